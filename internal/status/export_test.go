package status

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// documentedColumns expands TrialColumns for a study's knobs.
func documentedColumns(knobs []study.Knob, curves bool) []string {
	var out []string
	for _, line := range strings.Split(TrialColumns, "\n") {
		name := strings.Fields(line)[0]
		switch {
		case name == "params_<name>":
			for _, k := range knobs {
				out = append(out, "params_"+k.Name)
			}
		case name == "score_<metric>": // several objectives only: none here
		case (name == "reason" || name == "curve") && !curves:
		default:
			out = append(out, name)
		}
	}
	return out
}

func TestTrialsExport(t *testing.T) {
	ctx := context.Background()
	_, st := openFixture(t)
	want := studytest.Ran + 3 // the corrupt record is left out
	for _, curves := range []bool{false, true} {
		cols := documentedColumns(st.Space().Knobs(), curves)
		t.Run("csv/curves="+strconv.FormatBool(curves), func(t *testing.T) {
			var b bytes.Buffer
			problems, err := WriteTrials(ctx, st, &b, TrialsOptions{Format: FormatCSV, Curves: curves})
			if err != nil {
				t.Fatal(err)
			}
			// The corrupt record; with curves, also trial 0's rotten curve blob.
			if want := map[bool]int{false: 1, true: 2}[curves]; len(problems) != want {
				t.Errorf("problems = %v, want %d", problems, want)
			}
			rows, err := csv.NewReader(&b).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := rows[0]; !slices.Equal(got, cols) {
				t.Errorf("header = %q, want %q (TrialColumns)", got, cols)
			}
			if len(rows)-1 != want {
				t.Errorf("%d rows, want %d", len(rows)-1, want)
			}
			states := map[string]int{}
			for _, r := range rows[1:] {
				states[r[3]]++
				if r[3] == "done" && r[4] == "" {
					t.Errorf("done row without a score: %q", r)
				}
			}
			if states["running"] != 1 || states["stale"] != 1 || states["interrupted"] != 1 || states["failed"] == 0 {
				t.Errorf("states %v", states)
			}
		})
		for _, format := range []string{FormatJSON, FormatJSONL} {
			t.Run(format+"/curves="+strconv.FormatBool(curves), func(t *testing.T) {
				var b bytes.Buffer
				if _, err := WriteTrials(ctx, st, &b, TrialsOptions{Format: format, Curves: curves}); err != nil {
					t.Fatal(err)
				}
				var objs []map[string]json.RawMessage
				if format == FormatJSON {
					if err := json.Unmarshal(b.Bytes(), &objs); err != nil {
						t.Fatalf("not JSON: %v\n%s", err, b.String())
					}
				} else {
					for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
						var o map[string]json.RawMessage
						if err := json.Unmarshal([]byte(line), &o); err != nil {
							t.Fatalf("line %q: %v", line, err)
						}
						objs = append(objs, o)
					}
				}
				if len(objs) != want {
					t.Fatalf("%d objects, want %d", len(objs), want)
				}
				for _, o := range objs {
					var keys []string
					for k := range o {
						keys = append(keys, k)
					}
					slices.Sort(keys)
					w := slices.Clone(cols)
					slices.Sort(w)
					if !slices.Equal(keys, w) {
						t.Fatalf("keys %q, want %q", keys, w)
					}
					var x float64
					if err := json.Unmarshal(o["params_x"], &x); err != nil {
						t.Errorf("params_x %s is not a number", o["params_x"])
					}
					if curves && string(o["state"]) == `"done"` && string(o["trial"]) != "0" && len(o["curve"]) < 5 {
						t.Errorf("done trial without a curve: %s", o["curve"])
					}
				}
			})
		}
	}
}

// TestTrialsLoadInPandas reads both exports the way the help says.
func TestTrialsLoadInPandas(t *testing.T) {
	testutil.NeedPython(t, "pandas")
	ctx := context.Background()
	_, st := openFixture(t)
	dir := t.TempDir()
	for _, format := range []string{FormatCSV, FormatJSON} {
		var b bytes.Buffer
		if _, err := WriteTrials(ctx, st, &b, TrialsOptions{Format: format}); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "t."+format), b.Bytes(), 0o666)
	}
	script := `import sys, pandas as pd
a = pd.read_csv(sys.argv[1] + "/t.csv"); b = pd.read_json(sys.argv[1] + "/t.json")
assert list(a.columns) == list(b.columns), (list(a.columns), list(b.columns))
assert len(a) == len(b) == int(sys.argv[2]), (len(a), len(b))
done = a[a.state == "done"]
assert done.score.notna().all() and done.params_x.dtype.kind == "f"
print(done.nsmallest(1, "score").trial.iloc[0])`
	out, err := exec.Command(testutil.Python(), "-c", script, dir, strconv.Itoa(studytest.Ran+3)).CombinedOutput()
	if err != nil {
		t.Fatalf("pandas: %v\n%s", err, out)
	}
	best, err := st.Best(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.Itoa(best.Number) {
		t.Errorf("pandas' best trial %s, want %d", got, best.Number)
	}
}

func TestBest(t *testing.T) {
	ctx := context.Background()
	_, st := openFixture(t)
	b, err := FindBest(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := st.Best(ctx)
	if b.Trial != want.Number || b.Score != want.Score {
		t.Errorf("FindBest = trial %d %g, want %d %g", b.Trial, b.Score, want.Number, want.Score)
	}
	var out bytes.Buffer
	if err := WriteBest(&out, b, BestJSON); err != nil {
		t.Fatal(err)
	}
	for _, e := range studytest.CheckShape(BestShape, out.Bytes()) {
		t.Errorf("best json: %s", e)
	}
	out.Reset()
	if err := WriteBest(&out, b, BestArgs); err != nil {
		t.Fatal(err)
	}
	// The words, read back by a real shell, are the point.
	got, err := exec.Command("/bin/sh", "-c", `for a in `+strings.TrimSpace(out.String())+`; do printf '%s\n' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var wantWords []string
	for _, kv := range st.Space().Values(want.Point) {
		wantWords = append(wantWords, "--"+kv.Name, kv.Text)
	}
	if g := strings.Fields(string(got)); !slices.Equal(g, wantWords) {
		t.Errorf("args through sh = %q, want %q", g, wantWords)
	}
	out.Reset()
	if err := WriteBest(&out, b, BestText); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "best of quad: trial "+strconv.Itoa(want.Number)) || !strings.Contains(out.String(), "  noise") {
		t.Errorf("best text:\n%s", out.String())
	}
}

func TestBestWithoutResult(t *testing.T) {
	ctx := context.Background()
	f := fix(t)
	root := f.Copy(t, filepath.Join(t.TempDir(), "r"))
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := study.ParseSpec([]byte("direction = \"minimize\"\nbudget = 3\n[param]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, "empty", sp, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = FindBest(ctx, st)
	var nr *NoResultError
	if !errors.As(err, &nr) || !errors.Is(err, study.ErrNoResult) || !strings.Contains(err.Error(), "no done trial yet") {
		t.Errorf("FindBest(empty) = %v, want a NoResultError", err)
	}
}

func TestLogs(t *testing.T) {
	ctx := context.Background()
	s, st := openFixture(t)
	root := s.Root()
	// The attempt's bytes, read from its worker's files by hand.
	logOf := func(n int, stream string) string {
		loc, ok, err := runlog.Find(root, studytest.Main, n, 0)
		if err != nil || !ok || !loc.Ended {
			t.Fatalf("runlog.Find(%d) = %+v, %v, %v", n, loc, ok, err)
		}
		path, from, to := loc.Out, loc.OutStart, loc.OutEnd
		if stream == "err" {
			path, from, to = loc.Err, loc.ErrStart, loc.ErrEnd
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b[from:to])
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failed, pruned := -1, -1
	for _, r := range snap.Trials {
		switch r.State {
		case study.StateFailed:
			failed = r.Number
		case study.StatePruned:
			pruned = r.Number
		}
	}
	tests := []struct {
		name    string
		o       LogOptions
		want    string // the output, or
		wantErr string // part of the error
	}{
		{"stdout", LogOptions{Trial: 0, Attempt: -1}, logOf(0, "out"), ""},
		{"stderr of a failed trial", LogOptions{Trial: failed, Attempt: -1, Stderr: true}, logOf(failed, "err"), ""},
		{"attempt 0", LogOptions{Trial: 1, Attempt: 0}, logOf(1, "out"), ""},
		{"no such attempt", LogOptions{Trial: 1, Attempt: 3}, "", "has attempts 0 to 0, not 3"},
		{"no such trial", LogOptions{Trial: 500, Attempt: -1}, "", "has no trial 500"},
		{"corrupt record", LogOptions{Trial: studytest.Corrupt, Attempt: -1}, "", "corrupt"},
		{"no log kept", LogOptions{Trial: studytest.Interrupted, Attempt: -1}, "", "no output kept for trial 18"},
	}
	if pruned >= 0 {
		tests = append(tests, struct {
			name    string
			o       LogOptions
			want    string
			wantErr string
		}{"pruned", LogOptions{Trial: pruned, Attempt: -1}, logOf(pruned, "out"), ""})
	}
	if !strings.Contains(logOf(failed, "err"), "invalid choice") {
		t.Errorf("failed trial's stderr %q lacks argparse's complaint", logOf(failed, "err"))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Logs(ctx, st, root, tc.o, &b)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Errorf("Logs = %v, want one line with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("Logs = %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// TestLogsFollow follows a running attempt until it ends.
func TestLogsFollow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := fix(t)
	root := f.Copy(t, filepath.Join(t.TempDir(), "r"))
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStudy(ctx, s, studytest.Main, 0)
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.Take(ctx, 20, study.Who{Host: "node5", PID: 5})
	if err != nil {
		t.Fatal(err)
	}
	// A worker's files, as soma-trial writes them: the attempt's start in
	// the index (after an earlier attempt's output), then its output.
	base := filepath.Join(runlog.Dir(root, studytest.Main), "node5.5.0")
	path := base + ".out"
	if err := os.WriteFile(path, []byte("an earlier attempt's output\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	var out, notes syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Logs(ctx, st, root, LogOptions{Trial: 20, Attempt: -1, Follow: true, Poll: 10 * time.Millisecond, Notes: &notes}, &out)
	}()
	// The objective starts writing after the claim, line by line.
	time.Sleep(30 * time.Millisecond)
	if err := os.WriteFile(base+".idx", []byte("start 20 0 28 0\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		fh.WriteString("epoch " + strconv.Itoa(i) + "\n")
		fh.Close()
		time.Sleep(20 * time.Millisecond)
	}
	if err := run.Finish(ctx, study.StateDone, 0.5, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := "epoch 0\nepoch 1\nepoch 2\nepoch 3\nepoch 4\n"
	if out.String() != want {
		t.Errorf("followed %q, want %q", out.String(), want)
	}
	if !strings.Contains(notes.String(), "trial 20 attempt 0 done (score 0.5)") {
		t.Errorf("note %q", notes.String())
	}
}
