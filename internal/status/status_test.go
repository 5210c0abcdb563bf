package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/study"
)

func openFixture(t *testing.T) (*Store, *study.Study) {
	t.Helper()
	f := fix(t)
	s, err := Open(f.Root)
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStudy(context.Background(), s, studytest.Main, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestViewOfRealStudy(t *testing.T) {
	ctx := context.Background()
	s, st := openFixture(t)
	v, err := Load(ctx, s, st, Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	c := v.Counts
	if got, want := c.Done+c.Pruned+c.Failed, studytest.Ran; got != want {
		t.Errorf("done+pruned+failed = %d, want %d (the trials the loop ran)", got, want)
	}
	if c.Ended != studytest.Ran {
		t.Errorf("ended = %d, want %d", c.Ended, studytest.Ran)
	}
	if c.Failed == 0 {
		t.Errorf("failed = 0, want some (noise=bad makes the objective fail)")
	}
	checks := []struct {
		name      string
		got, want int
	}{
		{"running", c.Running, 1},
		{"stale", c.Stale, 1},
		{"interrupted", c.Interrupted, 1},
		{"corrupt", c.Corrupt, 1},
		{"foreign", c.Foreign, 2},
		{"total", c.Total, studytest.Ran + 3},
		{"budget", v.Budget, studytest.Budget},
		{"remaining", v.Pace.Remaining, studytest.Budget - studytest.Ran},
		{"problems", len(v.Problems), 1},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %d, want %d", ck.name, ck.got, ck.want)
		}
	}
	best, err := st.Best(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Best == nil || v.Best.Trial != best.Number || *v.Best.Score != best.Score {
		t.Errorf("best = %+v, want trial %d score %g (study.Best)", v.Best, best.Number, best.Score)
	}
	if len(v.Top) != min(5, c.Done) {
		t.Errorf("top has %d rows, want %d", len(v.Top), min(5, c.Done))
	}
	for i := 1; i < len(v.Top); i++ {
		if *v.Top[i].Score < *v.Top[i-1].Score {
			t.Errorf("top[%d] score %g < top[%d] %g: not best first", i, *v.Top[i].Score, i-1, *v.Top[i-1].Score)
		}
	}
	var states []string
	for _, r := range v.Running {
		states = append(states, r.State)
	}
	if got, want := strings.Join(states, ","), "running,stale"; got != want {
		t.Errorf("running rows %q, want %q", got, want)
	}
	hosts := map[string]Machine{}
	for _, m := range v.Machines {
		hosts[m.Host] = m
	}
	if m := hosts["node2"]; m.Running != 1 || strings.Join(m.Jobs, ",") != "77_9" {
		t.Errorf("node2 = %+v, want 1 running, job 77_9", m)
	}
	if m := hosts["node9"]; m.Stale != 1 || m.AgoS < 3000 {
		t.Errorf("node9 = %+v, want 1 stale, last seen an hour ago", m)
	}
	if _, ok := hosts["node1"]; !ok {
		t.Errorf("machines %v: node1 missing", v.Machines)
	}
	if v.Pace.TrialsPerHour == nil || v.Pace.ETASeconds == nil || v.Pace.Idle {
		t.Errorf("pace %+v: want a rate and an ETA (a trial is running)", v.Pace)
	}
}

func TestTextView(t *testing.T) {
	s, _ := openFixture(t)
	var b bytes.Buffer
	if err := NewViewer(s, StatusOptions{Study: studytest.Main, Top: 3, Verbose: true}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"study    quad · minimize loss · tpe sampler · median pruner · seed 7 · budget 24 · retries 0",
		"of 24 ended",
		"1 running · 1 stale · 1 corrupt",
		"best     loss ",
		"pace     ",
		"machines 3 seen, 1 working now",
		"node9",
		"problems 1 corrupt records",
		"study/quad/trial/19/0",
		"best 3 of ",
		"running 1, stale 1",
		"TRIAL  STATE",
		"packs    0",
		"files opened",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	// The tables are aligned: every row of a table starts its STATE
	// column where the header does.
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  TRIAL") {
			continue
		}
		col := strings.Index(l, "STATE")
		for _, row := range lines[i+1:] {
			if !strings.HasPrefix(row, "  ") || strings.TrimSpace(row) == "" {
				break
			}
			if row[col-1] != ' ' || row[col] == ' ' {
				t.Errorf("row %q: STATE column not at %d", row, col)
			}
		}
	}

	b.Reset()
	if err := NewViewer(s, StatusOptions{Top: 3}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	if !strings.Contains(out, "2 studies in ") || !strings.Contains(out, "\nother ") || !strings.Contains(out, "\nquad ") || !strings.Contains(out, "(1 corrupt)") {
		t.Errorf("several studies: want one line each:\n%s", out)
	}

	b.Reset()
	if err := NewViewer(s, StatusOptions{Study: studytest.Main, All: true}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "node"); got < studytest.Ran+3 {
		t.Errorf("--all: %d rows mention a node, want every trial (%d):\n%s", got, studytest.Ran+3, b.String())
	}
}

func TestJSONMatchesDocumentedShape(t *testing.T) {
	s, _ := openFixture(t)
	for _, o := range []StatusOptions{
		{Study: studytest.Main, Top: 10},
		{Study: studytest.Main, All: true},
		{Top: 3},
		{Study: studytest.Other, Top: 0, Compact: true},
	} {
		o.JSON = true
		var b bytes.Buffer
		if err := NewViewer(s, o).Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		for _, e := range studytest.CheckShape(JSONShape, b.Bytes()) {
			t.Errorf("%+v: %s", o, e)
		}
		var d Document
		if err := json.Unmarshal(b.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		if d.Format != Format || d.Version != Version || d.Clock != "server" || len(d.Studies) == 0 {
			t.Errorf("%+v: document head %q %d %q with %d studies", o, d.Format, d.Version, d.Clock, len(d.Studies))
		}
		if wantProblems := map[bool]int{true: 1, false: 0}[o.Study == ""]; len(d.Problems) != wantProblems {
			t.Errorf("%+v: problems %q, want %d (the broken study)", o, d.Problems, wantProblems)
		}
		if o.All && len(d.Studies[0].Trials) != studytest.Ran+3 {
			t.Errorf("--all: %d trials, want %d", len(d.Studies[0].Trials), studytest.Ran+3)
		}
		if o.Compact && bytes.Count(b.Bytes(), []byte("\n")) != 1 {
			t.Errorf("compact document spans %d lines, want 1", bytes.Count(b.Bytes(), []byte("\n")))
		}
	}
}

// TestShapeCheckerCatches proves the shape check is not vacuous.
func TestShapeCheckerCatches(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"undocumented", `{"format":"soma-status","version":1,"root":"/r","clock":"server","opened":{"records":1,"blobs":0,"lists":0,"probes":0},"studies":[],"extra":1}`, "extra: undocumented"},
		{"missing", `{"format":"soma-status","version":1,"root":"/r","opened":{"records":1,"blobs":0,"lists":0,"probes":0},"studies":[]}`, "clock: missing"},
		{"wrong type", `{"format":"soma-status","version":"1","root":"/r","clock":"server","opened":{"records":1,"blobs":0,"lists":0,"probes":0},"studies":[]}`, "version: string, documented as integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(studytest.CheckShape(JSONShape, []byte(tc.doc)), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("CheckShape = %q, want it to contain %q", got, tc.want)
			}
		})
	}
}

func TestShapeIsInPackageDoc(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(JSONShape, "\n") {
		if !bytes.Contains(doc, []byte("//\t"+line+"\n")) {
			t.Errorf("doc.go lacks the JSONShape line %q (regenerate the package doc from JSONShape)", line)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o666)
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o777)
	foreign := filepath.Join(dir, "foreign")
	os.Mkdir(foreign, 0o777)
	os.WriteFile(filepath.Join(foreign, "data.csv"), []byte("a,b\n"), 0o666)
	badMarker := filepath.Join(dir, "bad")
	os.Mkdir(badMarker, 0o777)
	os.WriteFile(filepath.Join(badMarker, "soma.json"), []byte("{not json"), 0o666)

	tests := []struct {
		name, root string
		is         error
		msg        string
	}{
		{"missing", filepath.Join(dir, "nope"), fsstore.ErrNotFound, "no such folder"},
		{"file", file, fsstore.ErrNotStore, "is a file"},
		{"empty", empty, fsstore.ErrNotStore, "not a soma store"},
		{"foreign", foreign, fsstore.ErrNotStore, "not a soma store"},
		{"bad marker", badMarker, fsstore.ErrNotStore, "not a soma store"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.root)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Open(%s) = %q, want one line with %q, errors.Is %v", tc.name, err, tc.msg, tc.is)
			}
		})
	}

	s, _ := openFixture(t)
	_, err := OpenStudy(context.Background(), s, "nosuch", 0)
	var ue *UnknownStudyError
	if !errors.As(err, &ue) || !errors.Is(err, study.ErrNoStudy) || !strings.Contains(err.Error(), "it holds: other, quad") {
		t.Errorf("OpenStudy(nosuch) = %v, want an UnknownStudyError listing other, quad", err)
	}
	if _, err := OpenStudy(context.Background(), s, "../x", 0); err == nil {
		t.Errorf("OpenStudy(../x) succeeded")
	}
}

// TestReadOnlyRootUsesLocalClock: a root the user may not write to is
// still shown, with a warning about the clock.
func TestReadOnlyRootUsesLocalClock(t *testing.T) {
	f := fix(t)
	root := f.Copy(t, filepath.Join(t.TempDir(), "ro"))
	tmp := filepath.Join(root, "tmp")
	if err := os.Chmod(tmp, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(tmp, 0o755) })
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root writes anyway: fail the probe the way the kernel would.
		s.probe = func(context.Context) (time.Time, error) {
			return time.Time{}, fmt.Errorf("server time: %w", &os.PathError{Op: "open", Path: tmp + "/x", Err: syscall.EACCES})
		}
	}
	var b bytes.Buffer
	if err := NewViewer(s, StatusOptions{Study: studytest.Main}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "warning  cannot write a time probe") || !strings.Contains(b.String(), "1 running · 1 stale") {
		t.Errorf("read-only root: want the view with a clock warning:\n%s", b.String())
	}
	if clock, _ := s.Clock(); clock != "local" {
		t.Errorf("Clock = %q, want local", clock)
	}
}

func TestPace(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rec := func(state study.State, startAgo, endAgo time.Duration) study.Record {
		return study.Record{State: state, Start: now.Add(-startAgo), Time: now.Add(-endAgo)}
	}
	tests := []struct {
		name      string
		recs      []study.Record
		budget    int
		running   int
		wantBasis string
		wantRate  float64 // 0: nil
		wantIdle  bool
		wantETA   bool
	}{
		{"nothing yet", nil, 10, 0, "no trial ended yet", 0, true, false},
		{"young study", []study.Record{rec(study.StateDone, 30*time.Minute, 20*time.Minute), rec(study.StateRunning, time.Minute, 0)}, 10, 1, "since start", 2, false, true},
		{"last hour", []study.Record{
			rec(study.StateDone, 5*time.Hour, 4*time.Hour), rec(study.StatePruned, 50*time.Minute, 40*time.Minute),
			rec(study.StateDone, 30*time.Minute, 10*time.Minute), rec(study.StateRunning, time.Minute, 0)}, 10, 1, "last hour", 2, false, true},
		{"idle", []study.Record{rec(study.StateDone, 3*time.Hour, 2*time.Hour)}, 10, 0, "all time", 1, true, false},
		{"finished", []study.Record{rec(study.StateDone, 2*time.Hour, time.Hour), rec(study.StateDone, 2*time.Hour, time.Hour)}, 2, 0, "finished", 2, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := &study.Snapshot{Now: now, Trials: tc.recs}
			ended := 0
			for i := range tc.recs {
				if tc.recs[i].Final(0) {
					ended++
				}
			}
			p := pace(snap, 0, tc.budget, ended, tc.running)
			if p.Basis != tc.wantBasis || p.Idle != tc.wantIdle || (p.ETASeconds != nil) != tc.wantETA {
				t.Errorf("pace = %+v, want basis %q idle %v eta %v", p, tc.wantBasis, tc.wantIdle, tc.wantETA)
			}
			got := 0.0
			if p.TrialsPerHour != nil {
				got = *p.TrialsPerHour
			}
			if d := got - tc.wantRate; d > 1e-9 || d < -1e-9 {
				t.Errorf("rate = %g, want %g", got, tc.wantRate)
			}
		})
	}
}

func TestFormatting(t *testing.T) {
	nums := []struct {
		x    float64
		want string
	}{
		{0.1234567, "0.123457"}, {1234567.8, "1234568"}, {12345.678, "12345.7"}, {1e-7, "1e-07"}, {-2.5, "-2.5"}, {0, "0"},
	}
	for _, tc := range nums {
		if got := fnum(tc.x, 6); got != tc.want {
			t.Errorf("fnum(%g) = %q, want %q", tc.x, got, tc.want)
		}
	}
	durs := []struct {
		s    float64
		want string
	}{
		{0.25, "250ms"}, {42, "42s"}, {192, "3m12s"}, {7500, "2h05m"}, {3*86400 + 4*3600, "3d4h"},
	}
	for _, tc := range durs {
		if got := dur(tc.s); got != tc.want {
			t.Errorf("dur(%g) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestBestN(t *testing.T) {
	scores := []float64{5, 3, 9, 3, 1, 7, 2, 8, 6, 4, 0.5, 3}
	cmp := func(a, b int) int {
		switch {
		case scores[a] < scores[b]:
			return -1
		case scores[a] > scores[b]:
			return 1
		}
		return a - b
	}
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sorted := slices.Clone(idx)
	slices.SortFunc(sorted, cmp)
	for n := 1; n <= len(scores)+2; n++ {
		got := bestN(idx, n, cmp)
		if want := sorted[:min(n, len(sorted))]; !slices.Equal(got, want) {
			t.Errorf("bestN(n=%d) = %v, want %v", n, got, want)
		}
	}
	// The bounded path (n much smaller than the list) agrees too.
	big := make([]int, 1000)
	for i := range big {
		big[i] = i % len(scores)
	}
	got := bestN(big, 3, func(a, b int) int { return cmp(a, b) })
	if want := []int{10, 10, 10}; !slices.Equal(got, want) {
		t.Errorf("bestN(big, 3) = %v, want %v", got, want)
	}
}
