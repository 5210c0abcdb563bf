package submit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// TrialBinName is the file name of the soma-trial program that Submit
// looks for next to the running executable and on PATH.
const TrialBinName = "soma-trial"

// Options say what to submit. Study and Objective are required; the zero
// values of the others give soma's defaults.
type Options struct {
	// Study is the study's name.
	Study string
	// Spec, if set, creates the study when it does not exist yet, and must
	// equal the study's spec when it does (a *study.SpecMismatchError
	// otherwise). Nil joins an existing study; Submit refuses a study that
	// does not exist.
	Spec *study.Spec
	// Objective is the user's command, with {name} placeholders, as
	// soma-trial takes it after "--". It runs on the compute nodes, in the
	// directory sbatch was called from: give paths that are valid there.
	Objective []string
	// Array is the --array value, like "0-63%16" (64 tasks, at most 16 at
	// once); "" submits a single job.
	Array string
	// Time is each task's time limit (--time); zero leaves the partition's
	// default.
	Time time.Duration
	// Grace is how long before the time limit Slurm sends SIGUSR1, upon
	// which soma-trial records its trial interrupted (to be retried) and
	// exits; zero means slurm.DefaultGrace. It must be shorter than Time.
	Grace time.Duration
	// NoRequeue submits with --no-requeue instead of --requeue.
	NoRequeue bool
	// Name is the job name squeue shows; "" means "soma-<study>".
	Name string
	// Sbatch holds further sbatch options, one #SBATCH line each, like
	// "--partition=gpu" or "--gres=gpu:1". Options that the fields above
	// set (--array, --time, --signal, --output...) are refused.
	Sbatch []string
	// TrialArgs are more soma-trial flags, written before "--", like
	// "--lease", "10m" or "--parallel", "2". The flags that Submit sets
	// (--root, --study) and the spec flags (the study exists before any
	// task starts) are refused.
	TrialArgs []string
	// TrialBin is the soma-trial program the tasks run. "" means the
	// soma-trial next to the running executable, else the one on PATH. It
	// is made absolute, and must be reachable at that path on the compute
	// nodes (a shared filesystem, or the same install everywhere).
	TrialBin string
	// Setup holds shell lines the script runs before soma-trial, like
	// "module load cuda/12.4" (see slurm.Script.Setup).
	Setup []string
	// Note is free text for the script's header, such as the command line
	// that asked for the submission; it may span lines.
	Note string
	// By names who submits, for the record; "" means user@host of this
	// process.
	By string
	// DryRun renders and checks everything, including the study and its
	// spec, but writes nothing, creates nothing and submits nothing.
	DryRun bool
	// Slurm runs sbatch; the zero Client finds it on PATH.
	Slurm slurm.Client
}

// Result is what Submit did.
type Result struct {
	// Script is the sbatch script's text.
	Script []byte
	// Submission is what was recorded in the store. After a dry run it
	// holds what would be, without Job, ScriptPath, Digest and Submitted.
	Submission Submission
}

// Submission is one sbatch job that Submit submitted for a study, as
// recorded under study/<study>/slurm/<job id>.
type Submission struct {
	Study string      `json:"study"`
	Job   slurm.JobID `json:"job"`   // the job id; for an array, the array's id (%A)
	Array string      `json:"array"` // the --array value; "" for a single job
	Name  string      `json:"name"`  // the job name
	// TimeLimit is --time (0: the partition's default); Grace the lead of
	// the pre-timeout SIGUSR1.
	TimeLimit time.Duration `json:"time_limit"`
	Grace     time.Duration `json:"grace"`
	// ScriptPath is the script file sbatch was given, and Digest the blob
	// holding its bytes as submitted.
	ScriptPath string         `json:"script"`
	Digest     fsstore.Digest `json:"digest"`
	// LogDir holds the job's Slurm logs, <job>_<task>.out (%A_%a.out).
	LogDir    string    `json:"log_dir"`
	By        string    `json:"by"`        // user@host that submitted it
	Submitted time.Time `json:"submitted"` // file-server time of the submission
}

// Submission record: its kind, version and meta keys.
const (
	kindJob       = "slurm-job"
	recordVersion = 1

	keyKind      = "kind"
	keyVersion   = "v"
	keyStudy     = "study"
	keyJob       = "job"
	keyArray     = "array"
	keyName      = "job_name"
	keyTimeLimit = "time_limit"
	keyGrace     = "grace"
	keyScript    = "script"
	keyLogDir    = "log_dir"
	keyBy        = "by"
	keySubmitted = "submitted"
)

// Dir returns the folder beside study name that holds its sbatch scripts:
// <root>/slurm/<study>.
func Dir(root, name string) string { return filepath.Join(root, "slurm", name) }

// LogDir returns the folder of the Slurm logs of study name's jobs:
// <root>/slurm/<study>/logs. (What each trial's objective prints is kept
// apart by soma-trial, under <root>/logs/<study>.)
func LogDir(root, name string) string { return filepath.Join(Dir(root, name), "logs") }

// prefix returns the store prefix of study name's submission records.
func prefix(name string) string { return "study/" + name + "/slurm" }

// Submit checks o and the study, renders the sbatch script, creates the
// study from o.Spec if it does not exist yet, writes the script atomically
// to <root>/slurm/<study>/<time>-<random>.sh, creates the log folder,
// submits the script with sbatch, and records the job in store (see the
// package doc). With o.DryRun it only checks and renders, and changes
// nothing.
//
// Every check runs before anything is created; a refused Options leaves
// the store and the root as they were. If sbatch fails, the
// script file is removed and nothing is recorded. If the job was submitted
// but cannot be recorded, Submit returns the Result (its Submission.Job is
// set) together with an error that names the job, which then runs but does
// not appear in `soma status`. Submit is safe to call concurrently: each
// call writes its own script and record.
func Submit(ctx context.Context, store *fsstore.Store, o Options) (Result, error) {
	if err := check(o); err != nil {
		return Result{}, err
	}
	bin, err := findTrialBin(o.TrialBin, os.Executable, exec.LookPath)
	if err != nil {
		return Result{}, err
	}
	if err := checkStudy(ctx, store, o.Study, o.Spec, o.Objective); err != nil {
		return Result{}, err
	}
	root := store.Root()
	trialArgs := o.TrialArgs
	if !o.NoRequeue {
		// Nothing restarts a task that ran out of time (--requeue covers
		// node failure and preemption): after the pre-timeout USR1,
		// soma-trial records its trial interrupted and requeues its job,
		// whose next run retries the trial.
		trialArgs = append([]string{"--requeue-on-usr1"}, trialArgs...)
	}
	argv, err := slurm.TrialCommand{
		Bin: bin, Root: root, Study: o.Study, Args: trialArgs, Objective: o.Objective,
	}.Argv()
	if err != nil {
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	name := o.Name
	if name == "" {
		name = "soma-" + o.Study
	}
	grace := o.Grace
	if grace == 0 {
		grace = slurm.DefaultGrace
	}
	logDir := LogDir(root, o.Study)
	text, err := slurm.Script{
		Command:   argv,
		LogDir:    logDir,
		Name:      name,
		Array:     o.Array,
		Time:      o.Time,
		Grace:     grace,
		NoRequeue: o.NoRequeue,
		Sbatch:    o.Sbatch,
		Setup:     o.Setup,
		Note:      note(o, root, logDir),
	}.Render()
	if err != nil {
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	by := o.By
	if by == "" {
		by = whoAmI()
	}
	res := Result{Script: text, Submission: Submission{
		Study: o.Study, Array: o.Array, Name: name, TimeLimit: o.Time, Grace: grace, LogDir: logDir, By: by,
	}}
	if o.DryRun {
		return res, nil
	}

	if o.Spec != nil {
		if _, err := study.Open(ctx, store, o.Study, o.Spec, study.Options{}); err != nil {
			return Result{}, fmt.Errorf("submit: %w", err)
		}
	}
	// The log folder must exist before a task starts: Slurm opens the log
	// before the script runs and creates no folders (sbatch(1), --output).
	if err := os.MkdirAll(logDir, 0o777); err != nil {
		return Result{}, fmt.Errorf("submit: log folder: %w", err)
	}
	now, err := store.Now(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	path := filepath.Join(Dir(root, o.Study), now.UTC().Format("20060102-150405")+"-"+hex.EncodeToString(rnd[:])+".sh")
	if err := fsstore.WriteFileAtomic(path, bytes.NewReader(text)); err != nil {
		return Result{}, fmt.Errorf("submit: script: %w", err)
	}
	// Put the blob before sbatch: a job that runs should not be one that
	// could not be recorded for want of space.
	d, err := store.Put(ctx, text)
	if err != nil {
		os.Remove(path)
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	res.Submission.ScriptPath, res.Submission.Digest, res.Submission.Submitted = path, d, now
	id, err := o.Slurm.Submit(ctx, path)
	if err != nil {
		// Only a refusal from sbatch proves that no job runs this script;
		// after a cancelled ctx it may, so its script stays.
		var ce *slurm.CommandError
		if errors.As(err, &ce) {
			os.Remove(path)
		}
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	res.Submission.Job = id
	// The job runs from here on: the record must not be lost to a
	// cancelled ctx.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := store.Bind(rctx, prefix(o.Study)+"/"+id.String(), d, res.Submission.meta()); err != nil {
		return res, fmt.Errorf("submit: slurm job %s was submitted but not recorded, so soma status will not list it (scancel %s to withdraw it): %w", id, id, err)
	}
	return res, nil
}

// ownedTrialFlags are soma-trial flags that Submit sets, or that only
// create a study (which Submit does before any task starts).
var ownedTrialFlags = map[string]string{
	"root":      "soma sets it to the store's root",
	"study":     "soma sets it to the study submitted",
	"spec":      "the study is created at submission; give the spec to submit instead",
	"param":     "the study is created at submission; give the spec to submit instead",
	"direction": "the study is created at submission; give the spec to submit instead",
	"metrics":   "the study is created at submission; give the spec to submit instead",
	"sampler":   "the study is created at submission; give the spec to submit instead",
	"pruner":    "the study is created at submission; give the spec to submit instead",
	"budget":    "the study is created at submission; give the spec to submit instead",
	"seed":      "the study is created at submission; give the spec to submit instead",
	"trial":     "every task would run the same trial; leave it out and let the tasks share the budget",
}

// check refuses options that cannot make a working job.
func check(o Options) error {
	var errs []error
	if err := study.ValidateName(o.Study); err != nil {
		errs = append(errs, fmt.Errorf("submit: %w", err))
	}
	if len(o.Objective) == 0 || o.Objective[0] == "" {
		errs = append(errs, errors.New("submit: no objective command (give it after --, like -- python3 train.py --lr {lr})"))
	}
	for _, a := range o.TrialArgs {
		if a == "--" {
			errs = append(errs, errors.New(`submit: soma-trial argument "--": the objective goes in the objective command, not among soma-trial's flags`))
			continue
		}
		if !strings.HasPrefix(a, "-") {
			continue // a flag's value
		}
		flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if why, owned := ownedTrialFlags[flag]; owned {
			errs = append(errs, fmt.Errorf("submit: soma-trial flag %q: %s", a, why))
		}
	}
	return errors.Join(errs...)
}

// checkStudy checks, reading only, that study name exists with spec's
// definition, or can be created from spec, and that the objective's
// {name} placeholders are its parameters.
func checkStudy(ctx context.Context, store *fsstore.Store, name string, spec *study.Spec, argv []string) error {
	st, err := study.Open(ctx, store, name, nil, study.Options{})
	switch {
	case errors.Is(err, study.ErrNoStudy) && spec != nil:
		if err := spec.Validate(); err != nil { // submitting would create it
			return err
		}
		return checkPlaceholders(spec, argv)
	case errors.Is(err, study.ErrNoStudy):
		return fmt.Errorf("submit: %w: no study %q in %s (give a spec to create it)", study.ErrNoStudy, name, store.Root())
	case err != nil:
		return fmt.Errorf("submit: %w", err)
	}
	if spec != nil {
		if err := spec.Validate(); err != nil {
			return err
		}
		if !bytes.Equal(st.Spec().Canonical(), spec.Canonical()) {
			return fmt.Errorf("submit: %w", &study.SpecMismatchError{Study: name, Diff: study.DiffSpec(st.Spec(), spec)})
		}
	}
	return checkPlaceholders(st.Spec(), argv)
}

// checkPlaceholders refuses a {name} in the objective that is neither a
// parameter of spec nor one of soma-trial's own ({study}, {trial},
// {attempt}, {trial_dir}). (Bug: a {typo} was submitted, and every task
// of the array then failed on it; issue 16.)
func checkPlaceholders(spec *study.Spec, argv []string) error {
	knobs := spec.Space.Knobs()
	params := make([]objective.Param, len(knobs))
	for i, k := range knobs {
		params[i] = objective.Param{Name: k.Name}
	}
	vars := map[string]string{"study": "", "trial": "", "attempt": "", "trial_dir": ""}
	if _, err := objective.Substitute(argv, params, vars); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}

// findTrialBin returns the absolute path of the soma-trial to run: the
// explicit one, else the one next to the running executable, else the one
// on PATH.
func findTrialBin(explicit string, executable func() (string, error), lookPath func(string) (string, error)) (string, error) {
	if explicit != "" {
		abs, err := filepath.Abs(explicit)
		if err != nil {
			return "", fmt.Errorf("submit: soma-trial %q: %w", explicit, err)
		}
		if err := isExecutable(abs); err != nil {
			return "", fmt.Errorf("submit: soma-trial %s: %w (give the path of a built soma-trial: make build writes bin/soma-trial)", abs, err)
		}
		return abs, nil
	}
	var tried []string
	if exe, err := executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), TrialBinName)
		if isExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, "next to "+exe)
	}
	if p, err := lookPath(TrialBinName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	tried = append(tried, "on PATH")
	return "", fmt.Errorf("submit: no %s %s (install it beside soma, or give its path)", TrialBinName, strings.Join(tried, " or "))
}

// isExecutable says why path is not a regular file that someone may run.
func isExecutable(path string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%v)", st.Mode().Type())
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("not executable (%v)", st.Mode().Perm())
	}
	return nil
}

// note is the script's header comment.
func note(o Options, root, logDir string) string {
	var b strings.Builder
	if n := strings.TrimRight(o.Note, "\n"); n != "" {
		b.WriteString(n + "\n\n")
	}
	fmt.Fprintf(&b, "soma slurm submit: study %s in %s.\n", o.Study, root)
	// (A dry run said the study "was created or checked" though it
	// creates nothing, and the trials' logs were said to be per trial,
	// <trial>.<attempt>.out, though they are per worker; issue 16.)
	if o.DryRun {
		b.WriteString("A dry run: nothing was created or submitted. When submitted, the study is\n")
		b.WriteString("created or checked first; each task joins it and runs its trials until the\n")
		b.WriteString("budget is reached.\n")
	} else {
		b.WriteString("The study was created or checked at submission; each task joins it and runs\n")
		b.WriteString("its trials until the budget is reached.\n")
	}
	fmt.Fprintf(&b, "Slurm logs: %s (the folder must exist before sbatch runs).\n", logDir)
	fmt.Fprintf(&b, "The objectives' output: %s/<host>.<pid>.<worker>.out and .err,\n", filepath.Join(root, "logs", o.Study))
	fmt.Fprintf(&b, "one pair per soma-trial worker; soma logs %s --study %s TRIAL [--stderr]\n", root, o.Study)
	b.WriteString("shows one trial's part.")
	return b.String()
}

// whoAmI returns user@host for the record.
func whoAmI() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "uid" + strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return name + "@" + host
}

// meta is the record's meta.
func (s Submission) meta() fsstore.Meta {
	m := fsstore.Meta{
		{Key: keyKind, Value: kindJob},
		{Key: keyVersion, Value: strconv.Itoa(recordVersion)},
		{Key: keyStudy, Value: s.Study},
		{Key: keyJob, Value: s.Job.String()},
		{Key: keyArray, Value: s.Array},
		{Key: keyName, Value: s.Name},
		{Key: keyGrace, Value: s.Grace.String()},
		{Key: keyScript, Value: s.ScriptPath},
		{Key: keyLogDir, Value: s.LogDir},
		{Key: keyBy, Value: s.By},
		{Key: keySubmitted, Value: s.Submitted.UTC().Format(time.RFC3339Nano)},
	}
	if s.TimeLimit > 0 {
		m = append(m, fsstore.Pair{Key: keyTimeLimit, Value: s.TimeLimit.String()})
	}
	return m
}

// decodeSubmission reads a record written by Submission.meta.
func decodeSubmission(studyName string, b fsstore.Bound) (Submission, error) {
	m := b.Meta
	fail := func(format string, a ...any) (Submission, error) {
		return Submission{}, fmt.Errorf("submit: record %s: "+format, append([]any{b.Name}, a...)...)
	}
	if k := m.Value(keyKind); k != kindJob {
		return fail("kind %q, want %q (a stray record: remove it)", k, kindJob)
	}
	v, err := strconv.Atoi(m.Value(keyVersion))
	if err != nil || v < 1 {
		return fail("version %q is not a number", m.Value(keyVersion))
	}
	if v > recordVersion {
		return fail("%w: version %d, this soma reads up to %d (upgrade soma on this machine)", study.ErrNewerFormat, v, recordVersion)
	}
	s := Submission{
		Study: studyName, Array: m.Value(keyArray), Name: m.Value(keyName),
		ScriptPath: m.Value(keyScript), LogDir: m.Value(keyLogDir), By: m.Value(keyBy), Digest: b.Digest,
	}
	if s.Job, err = slurm.ParseJobID(m.Value(keyJob)); err != nil {
		return fail("%v", err)
	}
	if seg := b.Name[strings.LastIndexByte(b.Name, '/')+1:]; seg != s.Job.String() {
		return fail("job %s recorded under the name of job %s", s.Job, seg)
	}
	if st := m.Value(keyStudy); st != studyName {
		return fail("study %q recorded under study %q", st, studyName)
	}
	if t := m.Value(keyTimeLimit); t != "" {
		if s.TimeLimit, err = time.ParseDuration(t); err != nil {
			return fail("time limit %q: %v", t, err)
		}
	}
	if s.Grace, err = time.ParseDuration(m.Value(keyGrace)); err != nil {
		return fail("grace %q: %v", m.Value(keyGrace), err)
	}
	if s.Submitted, err = time.Parse(time.RFC3339Nano, m.Value(keySubmitted)); err != nil {
		return fail("submission time %q: %v", m.Value(keySubmitted), err)
	}
	return s, nil
}
