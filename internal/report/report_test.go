package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// shared is the fixture of this test binary: real soma-trial runs,
// built once (studytest.Shared).
var shared studytest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// fix returns the shared fixture.
func fix(t *testing.T) *studytest.Fixture { return shared.Get(t) }

// writeReport writes the fixture's report and returns it with its
// snapshot.
func writeReport(t *testing.T) (string, Info, *study.Snapshot) {
	t.Helper()
	ctx := context.Background()
	s, err := status.Open(fix(t).Root)
	if err != nil {
		t.Fatal(err)
	}
	st, err := status.OpenStudy(ctx, s, studytest.Main, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	info, err := Write(ctx, &b, st, Options{Source: s.Root()})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), info, snap
}

func TestReportHoldsThePlots(t *testing.T) {
	page, info, snap := writeReport(t)
	if got, want := strings.Join(info.Plots, " "), "history curves params parallel"; got != want {
		t.Errorf("plots with marks %q, want %q", got, want)
	}
	if info.Trials != len(snap.Trials) || info.Bytes != len(page) {
		t.Errorf("info %+v for %d trials, %d bytes", info, len(snap.Trials), len(page))
	}
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllStringIndex(page, -1)) }
	var done, pruned, failed, curves int
	for _, r := range snap.Trials {
		switch r.State {
		case study.StateDone:
			done++
		case study.StatePruned:
			pruned++
		case study.StateFailed:
			failed++
		}
		if len(r.Curve) > 0 {
			curves++
		}
	}
	historyDots := count(`<circle class="mark done" data-t="\d+" cx="[^"]+" cy="[^"]+" r="4"`) + count(`class="mark done clipped"`)
	checks := []struct {
		name      string
		got, want int
	}{
		{"svg plots", count(`<svg class="plot"`), 4},
		{"history: one mark per done trial", historyDots, done},
		{"history: failed trials on the axis", count(`class="mark failed"`), failed},
		{"history: best so far", count(`<path class="best" d="M[^"]*"><title>best so far`), 1},
		{"curves: one per trial that reported", count(`<polyline class="mark curve`), curves},
		{"curves: pruned trials marked where they stopped", count(`class="mark stop"`), pruned},
		{"params: one panel per knob", count(`class="panel-title"`), 3},
		{"params: a dot per done trial per knob", count(`<circle class="mark done" data-t="\d+" cx="[^"]+" cy="[^"]+" r="3"`), 3 * done},
		{"parallel: one line per done trial", count(`<polyline class="mark line"`), done},
		{"table: the best trials", count(`<tr data-t=`), min(15, done)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(page, "2 unreadable records</summary>") || !strings.Contains(page, "study/quad/trial/0/0: curve:") {
		t.Errorf("the page does not list the corrupt record and trial 0's rotten curve")
	}
	if pruned == 0 {
		t.Log("the fixture has no pruned trial this time; the stop marks went untested")
	}
}

func TestReportIsSelfContained(t *testing.T) {
	page, _, _ := writeReport(t)
	if !strings.Contains(page, `content="default-src 'none';`) {
		t.Error("no Content-Security-Policy forbidding loads")
	}
	for _, bad := range []string{"http://", "https://", "src=", "href=", "<link", "@import", "url(", "<iframe", "<object", "<embed"} {
		if i := strings.Index(page, bad); i >= 0 {
			t.Errorf("the page contains %q (it must load nothing): …%s…", bad, page[max(0, i-60):min(len(page), i+60)])
		}
	}
}

// chromium runs a headless Chromium on page with the extra flags and
// returns its stdout.
func chromium(t *testing.T, page string, extra ...string) []byte {
	t.Helper()
	bin := studytest.Chromium()
	testutil.Need(t, bin != "", "chromium (apt-get install chromium)")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	args = append(args, extra...)
	args = append(args, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return out
}

var checkRE = regexp.MustCompile(`<div id="` + CheckID + `"[^>]*data-plots="([^"]*)"[^>]*data-errors="([^"]*)"[^>]*>([^<]*)<`)

// pageCheck loads page in Chromium and returns what its script recorded.
func pageCheck(t *testing.T, page string) (plots, errors, text string) {
	t.Helper()
	dom := chromium(t, page, "--dump-dom", "--virtual-time-budget=3000")
	m := checkRE.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no %s element with results in the DOM:\n%.2000s", CheckID, dom)
	}
	return string(m[1]), string(m[2]), string(m[3])
}

func TestReportInChromium(t *testing.T) {
	page, _, _ := writeReport(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	plots, errs, text := pageCheck(t, file)
	if plots != "history curves params parallel" || errs != "0" {
		t.Errorf("in Chromium: plots %q errors %q (%s); want every plot, no error", plots, errs, text)
	}

	png := filepath.Join(dir, "report.png")
	chromium(t, file, "--screenshot="+png, "--window-size=1100,2800", "--hide-scrollbars")
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 20000 {
		t.Errorf("screenshot: %d bytes, not a PNG of a drawn page", len(b))
	}
	t.Logf("screenshot: %s (%d KiB)", png, len(b)/1024)
	if art := os.Getenv("SOMA_ARTIFACTS"); art != "" {
		if err := os.MkdirAll(art, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{png, file} {
			data, _ := os.ReadFile(f)
			if err := os.WriteFile(filepath.Join(art, filepath.Base(f)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("copied report.png and report.html to %s", art)
	}
}

// TestPageCheckCatchesErrors proves the in-page check is not vacuous: a
// script error and a blocked network load are both counted.
func TestPageCheckCatchesErrors(t *testing.T) {
	page, _, _ := writeReport(t)
	bad := strings.Replace(page, "</main>", `<script>undefinedFunction();</script><div id="x"></div><script>document.getElementById("x").innerHTML = '<img alt="" src="http://192.0.2.1/tracker.png">';</script></main>`, 1)
	bad = strings.Replace(bad, `<svg class="plot" data-plot="curves"`, `<svg class="plot" data-plot="curvez"`, 1)
	file := filepath.Join(t.TempDir(), "bad.html")
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	plots, errs, text := pageCheck(t, file)
	if errs == "0" || errs == "" || !strings.Contains(text, "undefinedFunction") {
		t.Errorf("a broken page reported errors=%q (%s), want the script error counted", errs, text)
	}
	if !strings.Contains(text, "blocked") {
		t.Errorf("the blocked load was not reported: %s", text)
	}
	if slices.Contains(strings.Fields(plots), "curves") {
		t.Errorf("plots %q: the renamed plot was counted as curves", plots)
	}
}

func TestScales(t *testing.T) {
	tests := []struct {
		name string
		s    scale
		want string
	}{
		{"linear", scale{d0: 0, d1: 10, r0: 0, r1: 100}, "0 2 4 6 8 10"},
		{"offset", scale{d0: 0.13, d1: 0.87, r0: 0, r1: 100}, "0.2 0.4 0.6 0.8"},
		{"log", scale{d0: 1e-5, d1: 1e-1, r0: 0, r1: 100, log: true}, "1e-05 0.0001 0.001 0.01 0.1"},
		{"flat", scale{d0: 3, d1: 3, r0: 0, r1: 100}, "3"},
	}
	for _, tc := range tests {
		var got []string
		for _, tk := range tc.s.ticks(5) {
			got = append(got, tk.label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: ticks %q, want %q", tc.name, strings.Join(got, " "), tc.want)
		}
	}
	s := scale{d0: 0, d1: 10, r0: 100, r1: 0}
	if s.at(5) != 50 || s.at(20) != 0 || s.at(-3) != 100 {
		t.Errorf("at: %g %g %g, want 50 0 100 (clamped)", s.at(5), s.at(20), s.at(-3))
	}
}

func TestScoreDomainClipsOutliers(t *testing.T) {
	vals := []float64{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 500}
	lo, hi, log := scoreDomain(vals, study.Minimize)
	if hi > 10 || lo > 1 || log {
		t.Errorf("minimize with one huge loss: domain [%g, %g] log=%v, want the outlier clipped", lo, hi, log)
	}
	lo, hi, _ = scoreDomain(vals, study.Maximize)
	if hi < 500 {
		t.Errorf("maximize: domain [%g, %g] must keep the best (500)", lo, hi)
	}
}
