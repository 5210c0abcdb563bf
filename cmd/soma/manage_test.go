package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// gatedObjective writes an objective that waits until the file gate
// exists, then prints its first argument as the score: trials started
// before the gate opens stay running, so a test can change the study
// while they run (no sleep decides anything).
func gatedObjective(t *testing.T) (script, gate string) {
	t.Helper()
	dir := t.TempDir()
	script, gate = filepath.Join(dir, "obj.sh"), filepath.Join(dir, "gate")
	body := "#!/bin/sh\nwhile [ ! -e '" + gate + "' ]; do sleep 0.02; done\necho \"$1\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, gate
}

// runners starts n soma-trial processes on study name of root.
type runners struct {
	t     *testing.T
	cmds  []*exec.Cmd
	outs  []*strings.Builder
	ctx   context.Context
	stop  context.CancelFunc
	waitd bool
}

func startRunners(t *testing.T, bin string, n int, args ...string) *runners {
	t.Helper()
	// A bound on a test that goes wrong, not an assertion on time.
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	r := &runners{t: t, ctx: ctx, stop: stop}
	for range n {
		c := exec.CommandContext(ctx, bin, args...)
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		r.cmds = append(r.cmds, c)
		r.outs = append(r.outs, &out)
	}
	t.Cleanup(func() {
		if !r.waitd {
			for _, c := range r.cmds {
				c.Process.Kill()
				c.Wait()
			}
		}
		stop()
	})
	return r
}

// pids returns the processes' ids.
func (r *runners) pids() map[int]bool {
	m := map[int]bool{}
	for _, c := range r.cmds {
		m[c.Process.Pid] = true
	}
	return m
}

// wait waits for every process and fails the test unless each exits 0.
func (r *runners) wait() {
	r.t.Helper()
	r.waitd = true
	for i, c := range r.cmds {
		if err := c.Wait(); err != nil {
			r.t.Errorf("soma-trial %d: %v\n%s", i, err, r.outs[i])
		}
	}
}

// waitRunning waits until name has want running trials (polling the
// folder; the bound is the runners' context).
func waitRunning(t *testing.T, ctx context.Context, root, name string, want int) {
	t.Helper()
	for {
		if s, err := fsstore.Open(root, fsstore.Options{}); err == nil {
			if st, err := study.Open(ctx, s, name, nil, study.Options{}); err == nil {
				if snap, err := st.Trials(ctx); err == nil && snap.Counts()[study.StateRunning] == want {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("study %s never had %d running trials", name, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// attempts reads every attempt of every trial of name.
func attempts(t *testing.T, root, name string) []study.Record {
	t.Helper()
	ctx := context.Background()
	s, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, name, nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, corrupt, err := st.Attempts(ctx, false)
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("Attempts: %v, corrupt %v", err, corrupt)
	}
	return recs
}

// Issue 20: soma extend while 4 soma-trial processes run raises the
// budget in place: the same 4 processes (no restart) run the new trials,
// each trial exactly once; lowering below the trials claimed is refused;
// soma status shows the change.
func TestExtendWhileRunning(t *testing.T) {
	bin := buildSomaTrial(t)
	root := filepath.Join(t.TempDir(), "root")
	obj, gate := gatedObjective(t)
	r := startRunners(t, bin, 4, "--root", root, "--study", "s", "--param", "x=float:0:1",
		"--direction", "minimize", "--budget", "4", "--seed", "3", "--", obj, "{x}")
	waitRunning(t, r.ctx, root, "s", 4)

	code, out, errOut := soma("extend", root, "--study", "s", "--budget", "3")
	if code != exitError || !strings.Contains(errOut, "below the 4 trials already claimed") || !strings.Contains(errOut, "the lowest budget now is 4") {
		t.Errorf("extend to 3 below 4 claimed: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = soma("extend", root, "--study", "s", "--budget", "12")
	if code != exitOK {
		t.Fatalf("extend to 12: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"budget 4 → 12", "without a restart", "not restarted", "soma slurm submit " + root + " --study s --array 0-7"} {
		if !strings.Contains(out, want) {
			t.Errorf("extend output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = soma("status", root, "--study", "s")
	if !strings.Contains(out, "budget   4 → 12 at ") || !strings.Contains(out, "(soma extend; spec version 1)") {
		t.Errorf("status does not show the change:\n%s", out)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.wait()

	recs := attempts(t, root, "s")
	pids := r.pids()
	var got []int
	for _, rec := range recs {
		got = append(got, rec.Number)
		if rec.Attempt != 0 || rec.State != study.StateDone {
			t.Errorf("trial %d attempt %d: %s, want attempt 0 done", rec.Number, rec.Attempt, rec.State)
		}
		if !pids[rec.Who.PID] {
			t.Errorf("trial %d was run by pid %d, not one of the 4 processes %v (restarted?)", rec.Number, rec.Who.PID, pids)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Errorf("attempts of trials %v, want each of %v once", got, want)
	}
	_, out, _ = soma("status", root, "--study", "s")
	if !strings.Contains(out, "12 of 12 ended") {
		t.Errorf("status after the runs:\n%s", out)
	}
	// A budget below the claimed trials is refused when nothing runs too.
	if code, _, errOut := soma("extend", root, "--study", "s", "--budget", "11"); code != exitError || !strings.Contains(errOut, "below the 12 trials") {
		t.Errorf("extend to 11 after 12 ran: exit %d %s", code, errOut)
	}
}

// Issue 20: soma-trial given another budget for an existing study still
// refuses with the difference, and now names soma extend with the root.
func TestSomaTrialOtherBudgetNamesExtend(t *testing.T) {
	bin := buildSomaTrial(t)
	root := filepath.Join(t.TempDir(), "root")
	trial := func(budget string) (int, string) {
		c := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1", "--sampler", "random",
			"--budget", budget, "--no-wait", "--", "/bin/echo", "1")
		out, _ := c.CombinedOutput()
		return c.ProcessState.ExitCode(), string(out)
	}
	if code, out := trial("2"); code != 0 {
		t.Fatalf("first run: %d\n%s", code, out)
	}
	code, out := trial("5")
	if code != 2 || !strings.Contains(out, "budget: 2 → 5") || !strings.Contains(out, "soma extend "+root+" --study s --budget 5") {
		t.Errorf("budget 5 for a study of 2: exit %d\n%s", code, out)
	}
	// After soma extend, the script with the new budget joins, and so
	// does the one with the old.
	if c, o, e := soma("extend", root, "--study", "s", "--budget", "5"); c != exitOK {
		t.Fatalf("extend: %d %s%s", c, o, e)
	}
	if code, out := trial("5"); code != 0 || !strings.Contains(out, "ran 3 trials") {
		t.Errorf("budget 5 after extend: exit %d\n%s", code, out)
	}
	if code, out := trial("2"); code != 0 {
		t.Errorf("budget 2 (as created) after extend: exit %d\n%s", code, out)
	}
}

// idxOrder reads soma-trial's log indexes: for each process (pid), the
// trials it started, in order.
func idxOrder(t *testing.T, root, name string) map[int][]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "logs", name, "*.idx"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no log index: %v", err)
	}
	out := map[int][]int{}
	for _, f := range files {
		parts := strings.Split(filepath.Base(f), ".")
		pid, err := strconv.Atoi(parts[len(parts)-3])
		if err != nil {
			t.Fatalf("index %s: %v", f, err)
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var n, a int
			if _, err := fmt.Sscanf(sc.Text(), "start %d %d", &n, &a); err == nil {
				out[pid] = append(out[pid], n)
			}
		}
		fh.Close()
	}
	return out
}

// Issue 20: 5 points enqueued into a study that 4 soma-trial processes
// run are each evaluated exactly once, before any sampled point (each
// process takes queued points until none is left, then samples); a
// point outside the space is refused at the command, naming the knob.
func TestEnqueueWhileRunning(t *testing.T) {
	bin := buildSomaTrial(t)
	root := filepath.Join(t.TempDir(), "root")
	obj, gate := gatedObjective(t)
	r := startRunners(t, bin, 4, "--root", root, "--study", "s", "--param", "x=float:0:1",
		"--param", "opt=choice:adam,sgd", "--direction", "minimize", "--budget", "14", "--seed", "3", "--", obj, "{x}")
	waitRunning(t, r.ctx, root, "s", 4)

	bad := []struct{ name, point, want string }{
		{"out of range", "x=2,opt=adam", `param "x": 2 is outside [0, 1]`},
		{"unknown option", "x=0.5,opt=adamw", `param "opt": "adamw" is not one of the options adam, sgd`},
		{"unknown knob", "x=0.5,opt=adam,lr=1", `param "lr" is not in the study's space`},
		{"missing knob", "x=0.5", `param "opt" is missing`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := soma("enqueue", root, "--study", "s", "--point", "x=0.25,opt=sgd", "--point", tc.point)
			if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "point 2") {
				t.Errorf("enqueue %q: exit %d %q, want usage naming %q", tc.point, code, errOut, tc.want)
			}
		})
	}
	csv := filepath.Join(t.TempDir(), "points.csv")
	os.WriteFile(csv, []byte("opt,x\nsgd,0.875\nadam,0.0625\n"), 0o644)
	queued := []string{"x=0.125,opt=adam", "x=0.375,opt=sgd", "x=0.625,opt=adam"}
	code, out, errOut := soma("enqueue", root, "--study", "s", "--point", queued[0], "--point", "opt = sgd, x = 0.375", "--point", queued[2])
	if code != exitOK || !strings.Contains(out, "enqueued 1.0: x=0.125,opt=adam") {
		t.Fatalf("enqueue: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = soma("enqueue", root, "--study", "s", "--from", csv)
	if code != exitOK || !strings.Contains(out, "5 points wait") {
		t.Fatalf("enqueue --from: exit %d\n%s%s", code, out, errOut)
	}
	queued = append(queued, "x=0.875,opt=sgd", "x=0.0625,opt=adam")
	if code, _, errOut := soma("enqueue", root, "--study", "s", "--point", queued[1]); code != exitError || !strings.Contains(errOut, "already enqueued") {
		t.Errorf("enqueue of a queued point: exit %d %s", code, errOut)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.wait()

	recs := attempts(t, root, "s")
	byPoint := map[string][]int{}
	isQueued := map[int]bool{}
	for _, rec := range recs {
		if rec.Attempt != 0 || rec.State != study.StateDone {
			t.Errorf("trial %d attempt %d: %s, want attempt 0 done", rec.Number, rec.Attempt, rec.State)
		}
		byPoint[rec.PointText] = append(byPoint[rec.PointText], rec.Number)
		if slices.Contains(queued, rec.PointText) {
			isQueued[rec.Number] = true
		}
	}
	if len(recs) != 14 {
		t.Errorf("%d trials ran, want the budget, 14", len(recs))
	}
	for _, p := range queued {
		if len(byPoint[p]) != 1 {
			t.Errorf("queued point %s ran in trials %v, want exactly one", p, byPoint[p])
		}
	}
	// Each process: its first trial (started before the enqueue), then
	// queued points, then sampled ones; never a queued point after a
	// sampled one.
	for pid, trials := range idxOrder(t, root, "s") {
		sampled := false
		for i, n := range trials[1:] {
			if isQueued[n] && sampled {
				t.Errorf("process %d ran queued trial %d after a sampled one (its trials %v, at %d)", pid, n, trials, i+1)
			}
			sampled = sampled || !isQueued[n]
		}
	}
}

// Issue 20: soma fork with a changed space carries S's ended trials that
// fit it as the fork's first trials, lists the others with why, leaves S
// untouched, and TPE in the fork learns from what it carried: its first
// proposal differs from a fresh study's with the same spec and seed.
func TestForkChangedSpace(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	old, err := study.SpecFromFlags([]string{"x=float:0:1", "y=float:0:1"}, "minimize", "tpe:startup=2", "", 8, 5)
	if err != nil {
		t.Fatal(err)
	}
	src, err := study.Open(ctx, s, "a", old, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		run, err := src.Next(ctx, study.Me(""))
		if err != nil {
			break
		}
		x, _ := strconv.ParseFloat(run.Values()[0].Text, 64)
		if err := run.Finish(ctx, study.StateDone, (x-0.2)*(x-0.2), ""); err != nil {
			t.Fatal(err)
		}
	}
	before := attempts(t, root, "a")
	if len(before) != 8 {
		t.Fatalf("source ran %d trials, want 8", len(before))
	}
	const newSpec = `direction = "minimize"
budget = 4
seed = 5
[sampler]
name = "tpe"
startup = 2
[param]
x = "float:0:0.5"
y = "float:0:1"
`
	specFile := filepath.Join(t.TempDir(), "b.toml")
	os.WriteFile(specFile, []byte(newSpec), 0o644)
	code, out, errOut := soma("fork", root, "--study", "a", "--to", "b", "--spec", specFile)
	if code != exitOK {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errOut)
	}
	var fit, left []study.Record
	for _, r := range before {
		x, _ := strconv.ParseFloat(strings.TrimPrefix(strings.Split(r.PointText, ",")[0], "x="), 64)
		if x <= 0.5 {
			fit = append(fit, r)
		} else {
			left = append(left, r)
		}
	}
	if len(fit) < 2 || len(left) == 0 {
		t.Fatalf("the source's points do not exercise the test: %d fit, %d left", len(fit), len(left))
	}
	if !strings.Contains(out, fmt.Sprintf("%d ended trials carried", len(fit))) || !strings.Contains(out, fmt.Sprintf("%d ended trials do not fit", len(left))) {
		t.Errorf("fork output:\n%s", out)
	}
	for _, r := range left {
		if !strings.Contains(out, fmt.Sprintf("trial %d (%s): param \"x\":", r.Number, r.PointText)) || !strings.Contains(out, "is outside [0, 0.5]") {
			t.Errorf("fork output does not list trial %d (%s) with why:\n%s", r.Number, r.PointText, out)
		}
	}
	carried := attempts(t, root, "b")
	if len(carried) != len(fit) {
		t.Fatalf("fork has %d trials, want the %d that fit", len(carried), len(fit))
	}
	for i, r := range carried {
		if r.Number != i || r.State != study.StateDone || r.PointText != fit[i].PointText || r.Score != fit[i].Score {
			t.Errorf("fork trial %d = %s %s %v, want done %s %v", i, r.State, r.PointText, r.Score, fit[i].PointText, fit[i].Score)
		}
	}
	if after := attempts(t, root, "a"); !slices.EqualFunc(before, after, func(x, y study.Record) bool {
		return x.Number == y.Number && x.PointText == y.PointText && x.Time.Equal(y.Time)
	}) {
		t.Errorf("the source changed")
	}
	b, err := study.Open(ctx, s, "b", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Limit() != len(fit)+4 {
		t.Errorf("fork's budget %d, want %d carried + 4", b.Limit(), len(fit))
	}
	run, err := b.Next(ctx, study.Me(""))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := study.Open(ctx, s, "fresh", b.Spec(), study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := fresh.Take(ctx, run.Number(), study.Me(""))
	if err != nil {
		t.Fatal(err)
	}
	if run.PointText() == alone.PointText() {
		t.Errorf("the fork's trial %d proposes %s, as a fresh study with the same seed does: TPE did not use the carried history", run.Number(), run.PointText())
	}
	if code, _, errOut := soma("fork", root, "--study", "a", "--to", "b"); code != exitError || !strings.Contains(errOut, "exists") {
		t.Errorf("fork onto an existing study: exit %d %s", code, errOut)
	}
}

// tree lists the files under dir with their sizes and times.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			out = append(out, fmt.Sprintf("%s %d %v", p, info.Size(), info.ModTime().UnixNano()))
		}
		return nil
	})
	return out
}

// Issue 20: soma rm refuses while a trial runs, says what it would
// remove, removes everything of the study with --force, and leaves the
// other study in the root untouched.
func TestRmStudy(t *testing.T) {
	bin := buildSomaTrial(t)
	root := filepath.Join(t.TempDir(), "root")
	for _, name := range []string{"keep", "gone"} {
		c := exec.Command(bin, "--root", root, "--study", name, "--param", "x=float:0:1", "--sampler", "random",
			"--budget", "3", "--no-wait", "--", "/bin/echo", "1")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	obj, _ := gatedObjective(t)
	// One more trial of gone runs (never released); a long lease keeps
	// its runner from writing while rm works.
	if c, o, e := soma("extend", root, "--study", "gone", "--budget", "4"); c != exitOK {
		t.Fatalf("extend: %s%s", o, e)
	}
	r := startRunners(t, bin, 1, "--root", root, "--study", "gone", "--lease", "30m", "--", obj, "{x}")
	waitRunning(t, r.ctx, root, "gone", 1)
	keep := tree(t, filepath.Join(root, "names", "study", "keep"))
	keep = append(keep, tree(t, filepath.Join(root, "logs", "keep"))...)
	keep = append(keep, tree(t, filepath.Join(root, "work", "keep"))...)
	paths := []string{filepath.Join(root, "names", "study", "gone"), filepath.Join(root, "logs", "gone"), filepath.Join(root, "work", "gone")}

	code, out, errOut := soma("rm", root, "--study", "gone")
	if code != exitError || !strings.Contains(errOut, "1 running trials") || !strings.Contains(errOut, "--force") || !strings.Contains(out, "running: trial 3") {
		t.Errorf("rm with a running trial: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = soma("rm", root, "--study", "gone", "--dry-run", "--force")
	if code != exitOK || !strings.Contains(out, "would remove") {
		t.Errorf("rm --dry-run: exit %d\n%s", code, out)
	}
	for _, p := range paths {
		if !strings.Contains(out, p) {
			t.Errorf("rm --dry-run does not name %s:\n%s", p, out)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after a refused rm and a dry run: %v", p, err)
		}
	}
	code, out, errOut = soma("rm", root, "--study", "gone", "--force")
	if code != exitOK || !strings.Contains(out, "removed study gone") {
		t.Fatalf("rm --force: exit %d\n%s%s", code, out, errOut)
	}
	r.cmds[0].Process.Kill()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after rm --force: %v, want it gone", p, err)
		}
	}
	after := tree(t, filepath.Join(root, "names", "study", "keep"))
	after = append(after, tree(t, filepath.Join(root, "logs", "keep"))...)
	after = append(after, tree(t, filepath.Join(root, "work", "keep"))...)
	if !slices.Equal(keep, after) {
		t.Errorf("the other study changed:\nbefore %v\nafter  %v", keep, after)
	}
	if _, out, _ := soma("status", root); strings.Contains(out, "gone") || !strings.Contains(out, "keep") {
		t.Errorf("status after rm:\n%s", out)
	}
	if code, _, errOut := soma("rm", root, "--study", "gone"); code != exitError || !strings.Contains(errOut, "no such study") {
		t.Errorf("rm of a removed study: exit %d %s", code, errOut)
	}
}

// The new commands teach themselves like the others, and their --json
// is one document.
func TestManageHelpAndJSON(t *testing.T) {
	for _, cmd := range []string{"extend", "enqueue", "fork", "rm"} {
		code, out, errOut := soma(cmd, "--help")
		if code != exitOK || !strings.Contains(out, "EXAMPLES:") || !strings.Contains(out, "soma "+cmd+" ROOT --study") {
			t.Errorf("soma %s --help: exit %d\n%s%s", cmd, code, out, errOut)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.SpecFromFlags([]string{"x=int:0:9"}, "minimize", "random", "", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := study.Open(context.Background(), s, "s", spec, study.Options{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"extend", root, "--study", "s", "--budget", "5", "--json"}, `"to": 5`},
		{[]string{"enqueue", root, "--study", "s", "--point", "x=4", "--json"}, `"point": "x=4"`},
		{[]string{"fork", root, "--study", "s", "--to", "t", "--json"}, `"budget": 5`},
	}
	for _, tc := range tests {
		code, out, errOut := soma(tc.args...)
		var doc map[string]any
		if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || !strings.Contains(out, tc.want) {
			t.Errorf("soma %v: exit %d\n%s%s", tc.args, code, out, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"extend", root, "--study", "s"}, "--budget is required"},
		{[]string{"extend", root, "--study", "s", "--budget", "0"}, "--budget 0: want the number of trials"},
		{[]string{"enqueue", root, "--study", "s"}, "no points"},
		{[]string{"fork", root, "--study", "s"}, "--to is required"},
		{[]string{"rm", root}, "--study is required"},
	} {
		if code, _, errOut := soma(tc.args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("soma %v: exit %d %q, want usage with %q", tc.args, code, errOut, tc.want)
		}
	}
}
