package submit

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixture is a store, a spec and a stand-in soma-trial for unit tests.
type fixture struct {
	store *fsstore.Store
	spec  *study.Spec
	bin   string // an executable file named soma-trial
	dir   string // scratch folder outside the store
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	dir := t.TempDir()
	store, err := fsstore.Open(filepath.Join(dir, "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin", TrialBinName)
	writeExe(t, bin, "#!/bin/sh\nexit 0\n")
	return fixture{store: store, spec: testSpec(t, 12), bin: bin, dir: dir}
}

func testSpec(t *testing.T, budget int) *study.Spec {
	t.Helper()
	spec, err := study.SpecFromFlags([]string{"x=float:-1:1"}, "minimize", "random", "", budget, 7)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func writeExe(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeSlurm writes stand-ins for sbatch and squeue into a folder and
// returns a Client that runs them. sbatch saves its arguments to
// sbatch.args, fails unless the script's log folder exists, and prints the
// ids 4242, 4243... in turn; squeue prints squeue.<id> for job <id> if it
// exists, and Slurm's "Invalid job id" otherwise.
func fakeSlurm(t *testing.T) (slurm.Client, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "slurm-bin")
	writeExe(t, filepath.Join(dir, "sbatch"), `#!/bin/bash
set -eu
d=$(dirname "$0")
printf '%s\n' "$@" >"$d/sbatch.args"
script=${!#}
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
[[ -d $(dirname "$out") ]] || { echo "sbatch: error: log folder of $out missing" >&2; exit 1; }
[[ -e $d/sbatch.fail ]] && { echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2; exit 1; }
n=$(cat "$d/sbatch.next" 2>/dev/null || echo 4242)
echo $((n + 1)) >"$d/sbatch.next"
echo "$n;somalocal"
`)
	writeExe(t, filepath.Join(dir, "squeue"), `#!/bin/bash
set -eu
d=$(dirname "$0")
while (($#)); do [[ $1 == -j ]] && id=$2; shift; done
[[ -e $d/squeue.$id ]] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
cat "$d/squeue.$id"
`)
	return slurm.Client{Dir: dir}, dir
}

func (f fixture) options(extra func(*Options)) Options {
	o := Options{
		Study:     "spam",
		Spec:      f.spec,
		Objective: []string{"/usr/bin/python3", "train.py", "--x", "{x}", "--note", "it's"},
		Array:     "0-63%16",
		Time:      2 * time.Hour,
		Grace:     3 * time.Minute,
		Sbatch:    []string{"--partition=gpu", "--gres=gpu:1"},
		TrialArgs: []string{"--lease", "10m"},
		TrialBin:  f.bin,
		Note:      "soma slurm submit ROOT --study spam --array 0-63%16 -- ...",
		By:        "alice@login1",
	}
	if extra != nil {
		extra(&o)
	}
	return o
}

// TestSubmitDryRun: a dry run renders the script (compared with a golden
// file, the store's root and soma-trial's folder replaced by $ROOT and
// $BIN) and changes nothing: no study, no script, no log folder, no record.
func TestSubmitDryRun(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res, err := Submit(ctx, f.store, f.options(func(o *Options) { o.DryRun = true }))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(string(res.Script), f.store.Root(), "$ROOT")
	got = strings.ReplaceAll(got, filepath.Dir(f.bin), "$BIN")
	path := filepath.Join("testdata", "dryrun.sh.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./internal/submit -run TestSubmitDryRun -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("dry-run script differs from %s (-update rewrites it); got:\n%s", path, got)
	}

	if s := res.Submission; s.Job != 0 || s.ScriptPath != "" || s.Array != "0-63%16" || s.LogDir != LogDir(f.store.Root(), "spam") || s.Grace != 3*time.Minute {
		t.Errorf("dry-run Submission = %+v, want no job or path, array 0-63%%16, grace 3m, log dir under the root", s)
	}
	if _, err := os.Stat(filepath.Join(f.store.Root(), "slurm")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dry run made %s/slurm (stat: %v), want nothing written", f.store.Root(), err)
	}
	if names, err := study.List(ctx, f.store); err != nil || len(names) != 0 {
		t.Errorf("after a dry run the store holds studies %q (%v), want none", names, err)
	}
}

// TestSubmitRecords: Submit creates the study, writes the script where
// the record says, creates the log folder before sbatch, passes the script
// to sbatch, and records the job; Jobs reads the record back.
func TestSubmitRecords(t *testing.T) {
	f := newFixture(t)
	client, slurmDir := fakeSlurm(t)
	ctx := context.Background()
	res, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client }))
	if err != nil {
		t.Fatal(err)
	}
	s := res.Submission
	if s.Job != 4242 {
		t.Errorf("Job = %s, want 4242 (from sbatch's \"4242;somalocal\")", s.Job)
	}
	if dir := filepath.Dir(s.ScriptPath); dir != Dir(f.store.Root(), "spam") || filepath.Ext(s.ScriptPath) != ".sh" {
		t.Errorf("ScriptPath = %s, want a .sh file in %s", s.ScriptPath, Dir(f.store.Root(), "spam"))
	}
	onDisk, err := os.ReadFile(s.ScriptPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, res.Script) {
		t.Errorf("script file differs from Result.Script:\n%s", onDisk)
	}
	if blob, err := f.store.Get(ctx, s.Digest); err != nil || !bytes.Equal(blob, res.Script) {
		t.Errorf("blob %s = %q, %v; want the script", s.Digest, blob, err)
	}
	args, err := os.ReadFile(filepath.Join(slurmDir, "sbatch.args"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(args)), []string{"--parsable", s.ScriptPath}; !slices.Equal(got, want) {
		t.Errorf("sbatch arguments = %q, want %q", got, want)
	}
	if st, err := os.Stat(s.LogDir); err != nil || !st.IsDir() {
		t.Errorf("log folder %s: %v, want it made", s.LogDir, err)
	}
	if _, err := study.Open(ctx, f.store, "spam", nil, study.Options{}); err != nil {
		t.Errorf("the study was not created at submission: %v", err)
	}

	b, err := f.store.Resolve(ctx, "study/spam/slurm/4242")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{"kind", "slurm-job"}, {"v", "1"}, {"study", "spam"}, {"job", "4242"}, {"array", "0-63%16"},
		{"job_name", "soma-spam"}, {"time_limit", "2h0m0s"}, {"grace", "3m0s"},
		{"script", s.ScriptPath}, {"log_dir", s.LogDir}, {"by", "alice@login1"},
	} {
		if got := b.Meta.Value(kv[0]); got != kv[1] {
			t.Errorf("record meta %s = %q, want %q", kv[0], got, kv[1])
		}
	}
	if b.Digest != s.Digest {
		t.Errorf("record digest %s, want the script's %s", b.Digest, s.Digest)
	}

	l, err := Jobs(ctx, f.store, "spam", JobsOptions{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Jobs) != 1 || len(l.Corrupt) != 0 || l.Live || l.LiveErr != nil {
		t.Fatalf("Jobs offline = %+v, want the one job, not live, no error", l)
	}
	got := l.Jobs[0].Submission
	if !got.Submitted.Equal(s.Submitted) {
		t.Errorf("Submitted read back %v, want %v", got.Submitted, s.Submitted)
	}
	got.Submitted = s.Submitted
	if got != s {
		t.Errorf("Jobs read back %+v, want %+v", got, s)
	}
}

// TestSubmitSbatchFails: when sbatch refuses the job, Submit says so,
// removes the script it wrote and records nothing.
func TestSubmitSbatchFails(t *testing.T) {
	f := newFixture(t)
	client, slurmDir := fakeSlurm(t)
	if err := os.WriteFile(filepath.Join(slurmDir, "sbatch.fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client }))
	if err == nil || !strings.Contains(err.Error(), "Invalid partition name") {
		t.Fatalf("Submit with a failing sbatch: %v, want sbatch's error", err)
	}
	entries, _ := os.ReadDir(Dir(f.store.Root(), "spam"))
	for _, e := range entries {
		if e.Name() != "logs" {
			t.Errorf("left %s behind, want the script removed", e.Name())
		}
	}
	if l, err := Jobs(ctx, f.store, "spam", JobsOptions{Offline: true}); err != nil || len(l.Jobs) != 0 {
		t.Errorf("Jobs = %+v, %v; want none recorded", l, err)
	}
}

// TestSubmitRefuses: options that cannot make a working job are refused
// before anything is written or submitted.
func TestSubmitRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(o *Options, f fixture)
		want   string // in the error
		wantIs error
	}{
		{"no objective", func(o *Options, _ fixture) { o.Objective = nil }, "no objective command", nil},
		{"bad study name", func(o *Options, _ fixture) { o.Study = "a/b" }, "a/b", nil},
		{"--root among trial args", func(o *Options, _ fixture) { o.TrialArgs = []string{"--root", "/x"} }, `flag "--root"`, nil},
		{"--budget= among trial args", func(o *Options, _ fixture) { o.TrialArgs = []string{"--budget=3"} }, "created at submission", nil},
		{"--trial among trial args", func(o *Options, _ fixture) { o.TrialArgs = []string{"-trial", "3"} }, "same trial", nil},
		{"-- among trial args", func(o *Options, _ fixture) { o.TrialArgs = []string{"--"} }, "objective goes", nil},
		{"no study and no spec", func(o *Options, _ fixture) { o.Spec = nil }, "give a spec", study.ErrNoStudy},
		{"grace not below the time limit", func(o *Options, _ fixture) { o.Time = time.Minute }, "not shorter than the time limit", nil},
		{"default grace above a short limit", func(o *Options, _ fixture) { o.Time, o.Grace = time.Minute, 0 }, "not shorter than the time limit", nil},
		{"bad array", func(o *Options, _ fixture) { o.Array = "0-" }, `array "0-"`, nil},
		{"sbatch option soma sets", func(o *Options, _ fixture) { o.Sbatch = []string{"--time=5"} }, "set by soma", nil},
		{"soma-trial not executable", func(o *Options, f fixture) {
			p := filepath.Join(f.dir, "plain")
			os.WriteFile(p, nil, 0o644)
			o.TrialBin = p
		}, "not executable", nil},
		{"soma-trial missing", func(o *Options, f fixture) { o.TrialBin = filepath.Join(f.dir, "nope") }, "no such file", nil},
	}
	for _, tc := range tests {
		for _, dry := range []bool{true, false} {
			name := tc.name
			if dry {
				name += " (dry run)"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t)
				client, slurmDir := fakeSlurm(t)
				o := f.options(func(o *Options) { o.Slurm, o.DryRun = client, dry })
				tc.mod(&o, f)
				_, err := Submit(context.Background(), f.store, o)
				if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
					t.Fatalf("Submit: %v, want an error containing %q (is %v)", err, tc.want, tc.wantIs)
				}
				if strings.HasSuffix(err.Error(), ".") || err.Error() != strings.TrimSpace(err.Error()) {
					t.Errorf("error %q ends with a period or space", err)
				}
				if _, err := os.Stat(filepath.Join(slurmDir, "sbatch.args")); err == nil {
					t.Errorf("sbatch ran")
				}
				if _, err := os.Stat(filepath.Join(f.store.Root(), "slurm")); err == nil {
					t.Errorf("%s/slurm was made", f.store.Root())
				}
				if names, err := study.List(context.Background(), f.store); err != nil || len(names) != 0 {
					t.Errorf("the store holds studies %q (%v), want none made", names, err)
				}
			})
		}
	}
}

// TestSubmitSpecMismatch: a spec that differs from the existing study's
// is refused, in a dry run too; the same spec joins.
func TestSubmitSpecMismatch(t *testing.T) {
	f := newFixture(t)
	client, _ := fakeSlurm(t)
	ctx := context.Background()
	if _, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client })); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		_, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm, o.DryRun, o.Spec = client, dry, testSpec(t, 13) }))
		if !errors.Is(err, study.ErrSpecMismatch) || !strings.Contains(err.Error(), "budget") {
			t.Errorf("dry run %v, budget 13 against 12: %v, want ErrSpecMismatch naming the budget", dry, err)
		}
	}
	for _, spec := range []*study.Spec{testSpec(t, 12), nil} {
		res, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm, o.Spec = client, spec }))
		if err != nil {
			t.Errorf("same spec (or none) again: %v, want it to join", err)
		}
		if res.Submission.Job == 0 {
			t.Errorf("joining submission has no job id")
		}
	}
	if l, err := Jobs(ctx, f.store, "spam", JobsOptions{Offline: true}); err != nil || len(l.Jobs) != 3 {
		t.Errorf("Jobs = %+v, %v; want the 3 submissions", l, err)
	}
}

func TestFindTrialBin(t *testing.T) {
	dir := t.TempDir()
	next := filepath.Join(dir, "next", TrialBinName)
	writeExe(t, next, "#!/bin/sh\n")
	onPath := filepath.Join(dir, "path", TrialBinName)
	writeExe(t, onPath, "#!/bin/sh\n")
	exeIn := func(d string) func() (string, error) {
		return func() (string, error) { return filepath.Join(dir, d, "soma"), nil }
	}
	exeFails := func() (string, error) { return "", errors.New("no /proc") }
	look := func(string) (string, error) { return onPath, nil }
	lookFails := func(string) (string, error) { return "", errors.New("not found") }
	tests := []struct {
		name     string
		explicit string
		exe      func() (string, error)
		look     func(string) (string, error)
		want     string // "" means an error
	}{
		{"explicit wins", onPath, exeIn("next"), lookFails, onPath},
		{"next to the executable", "", exeIn("next"), look, next},
		{"PATH when none is next to it", "", exeIn("elsewhere"), look, onPath},
		{"PATH when the executable is unknown", "", exeFails, look, onPath},
		{"none anywhere", "", exeIn("elsewhere"), lookFails, ""},
		{"explicit missing", filepath.Join(dir, "missing"), exeIn("next"), look, ""},
		{"explicit is a folder", dir, exeIn("next"), look, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findTrialBin(tc.explicit, tc.exe, tc.look)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("findTrialBin = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("findTrialBin = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestJobs: live task states from squeue, a job Slurm has forgotten, a
// corrupt record, Slurm missing altogether (not an error), and offline.
func TestJobs(t *testing.T) {
	f := newFixture(t)
	client, slurmDir := fakeSlurm(t)
	ctx := context.Background()
	for range 2 {
		if _, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client })); err != nil {
			t.Fatal(err)
		}
	}
	// 4242: task 0 done, task 1 running, tasks 2-63 pending; 4243 forgotten.
	squeue := "4244|4242|0|COMPLETED|vm|None\n4245|4242|1|RUNNING|vm|None\n4242|4242|2-63%16|PENDING||JobArrayTaskLimit\n"
	if err := os.WriteFile(filepath.Join(slurmDir, "squeue.4242"), []byte(squeue), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Bind(ctx, "study/spam/slurm/999", fsstore.Sum([]byte("x")), fsstore.Meta{{Key: "kind", Value: "other"}}); err != nil {
		t.Fatal(err)
	}

	l, err := Jobs(ctx, f.store, "spam", JobsOptions{Slurm: client})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Live || l.LiveErr != nil || len(l.Jobs) != 2 || len(l.Corrupt) != 1 {
		t.Fatalf("Jobs = %+v, want 2 live jobs and 1 corrupt record", l)
	}
	j0, j1 := l.Jobs[0], l.Jobs[1]
	if j0.Job != 4242 || !j0.Asked || j0.Forgotten || len(j0.Tasks) != 3 || !j0.Active() {
		t.Errorf("job 0 = %+v, want 4242 with 3 squeue lines, active", j0)
	}
	if got, want := j0.Counts(), map[string]int{"COMPLETED": 1, "RUNNING": 1, "PENDING": 62}; !maps.Equal(got, want) {
		t.Errorf("Counts() = %v, want %v", got, want)
	}
	if j1.Job != 4243 || !j1.Asked || !j1.Forgotten || j1.Active() || len(j1.Counts()) != 0 {
		t.Errorf("job 1 = %+v, want 4243 forgotten by Slurm, not active", j1)
	}

	// Slurm not installed here: the records, and why there is nothing live.
	l, err = Jobs(ctx, f.store, "spam", JobsOptions{Slurm: slurm.Client{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Live || !errors.Is(l.LiveErr, slurm.ErrUnavailable) || len(l.Jobs) != 2 || l.Jobs[0].Asked {
		t.Errorf("Jobs without Slurm = %+v, want 2 jobs not asked, LiveErr ErrUnavailable", l)
	}

	l, err = Jobs(ctx, f.store, "nothing-here", JobsOptions{Slurm: client})
	if err != nil || len(l.Jobs) != 0 || !l.Live {
		t.Errorf("Jobs of a study without submissions = %+v, %v; want an empty live list", l, err)
	}
	if _, err := Jobs(ctx, f.store, "../x", JobsOptions{}); err == nil {
		t.Errorf("Jobs(\"../x\") succeeded, want a bad name refused")
	}
}
