// Command benchfloor is the Go half of scripts/bench-trial.sh: the floor
// (the bare system calls of one trial, with nothing of soma around them,
// run by P processes over one folder until N trials are done), the timed
// run of P soma-trial processes over one study, and the table.
//
//	benchfloor floor -dir DIR -n N -p P -- /bin/echo 1
//	benchfloor soma -bin SOMA-TRIAL -root DIR -n N -p P -- /bin/echo 1
//	benchfloor table -n N < results.jsonl
//
// One floor trial is the least that any runner claiming trials safely on
// NFS must do, and nothing else: a unique temp file written, fsync'd and
// closed, claimed under the trial's name by link(2) (EEXIST: the next
// number), the folder fsync'd; one fork+exec of the objective, its last
// stdout line parsed as the score; a second temp file written, fsync'd,
// closed and renamed over the name, the folder fsync'd.
//
// floor and soma print one JSON Result on stdout; table reads those and
// the Optuna script's (scripts/bench_trial_optuna.py), one per line, and
// prints one markdown table.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/study"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchfloor floor|soma|table [flags] [-- objective...]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "floor":
		err = floor(os.Args[2:])
	case "worker":
		err = worker(os.Args[2:])
	case "soma":
		err = soma(os.Args[2:])
	case "table":
		err = table(os.Args[2:], os.Stdin, os.Stdout)
	default:
		err = fmt.Errorf("unknown mode %q: want floor, soma or table", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchfloor: %v\n", err)
		os.Exit(1)
	}
}

// Result is one measured row part: one kind of runner at one P.
type Result struct {
	Kind    string  `json:"kind"` // floor, soma, optuna-exec, optuna-inproc
	P       int     `json:"p"`
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"` // wall time
	Ran     int     `json:"ran"`     // objective runs
	PerSec  float64 `json:"per_s"`   // Ran / Seconds
	// CPUms is the CPU time (user+sys) of the runners and their
	// objectives per trial run, in milliseconds: what a trial costs
	// whatever else the machine is doing.
	CPUms   float64        `json:"cpu_ms,omitempty"`
	Trials  int            `json:"trials"` // trials recorded
	States  map[string]int `json:"states,omitempty"`
	Exact   bool           `json:"exact"`   // exactly N trials, each run once
	Crashes int            `json:"crashes"` // runner processes that exited non-zero
	Errors  []string       `json:"errors,omitempty"`
	// Ops is what soma's -ops command printed (one JSON value), run when
	// the runners have exited and before the study is read back: the
	// file-server operations of the runners alone (scripts/bench-slowfs.sh).
	Ops json.RawMessage `json:"ops,omitempty"`
}

// procs starts one process per argv at once and waits for all of them,
// returning the wall time, their exit errors with the tail of their
// stderr, their stdouts, and their total CPU time (their waited-for
// children's included: wait4's rusage).
func procs(argvs [][]string, logDir string) (time.Duration, []error, []string, time.Duration, error) {
	type out struct {
		err error
		so  string
		cpu time.Duration
	}
	outs := make([]out, len(argvs))
	cmds := make([]*exec.Cmd, len(argvs))
	ses := make([]*os.File, len(argvs))
	for i, argv := range argvs {
		se, err := os.Create(filepath.Join(logDir, fmt.Sprintf("runner-%d.err", i)))
		if err != nil {
			return 0, nil, nil, 0, err
		}
		defer se.Close()
		ses[i] = se
		cmds[i] = exec.Command(argv[0], argv[1:]...)
		cmds[i].Stderr = se
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i, cmd := range cmds {
		var so bytes.Buffer
		cmd.Stdout = &so
		if err := cmd.Start(); err != nil {
			return 0, nil, nil, 0, err
		}
		wg.Go(func() {
			err := cmd.Wait()
			var cpu time.Duration
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			outs[i] = out{err: err, so: so.String(), cpu: cpu}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	errs := make([]error, len(argvs))
	sos := make([]string, len(argvs))
	var cpu time.Duration
	for i, o := range outs {
		sos[i], cpu = o.so, cpu+o.cpu
		if o.err != nil {
			errs[i] = fmt.Errorf("%v: %s", o.err, tail(ses[i].Name()))
		}
	}
	return wall, errs, sos, cpu, nil
}

// tail returns the last line of a file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// floor starts P worker processes of this program over one folder and
// times them from the first start to the last exit.
func floor(args []string) error {
	fl := flag.NewFlagSet("floor", flag.ContinueOnError)
	dir := fl.String("dir", "", "an empty folder (created)")
	n := fl.Int("n", 1000, "trials in all")
	p := fl.Int("p", 1, "processes")
	if err := fl.Parse(args); err != nil {
		return err
	}
	argv := fl.Args()
	if *dir == "" || len(argv) == 0 {
		return errors.New("floor: want -dir DIR and an objective after --")
	}
	for _, d := range []string{"tmp", "trial"} {
		if err := os.MkdirAll(filepath.Join(*dir, d), 0o777); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argvs := make([][]string, *p)
	for i := range argvs {
		argvs[i] = append([]string{self, "worker", "-dir", *dir, "-n", strconv.Itoa(*n), "--"}, argv...)
	}
	wall, errs, sos, cpu, err := procs(argvs, *dir)
	if err != nil {
		return err
	}
	res := Result{Kind: "floor", P: *p, N: *n, Seconds: wall.Seconds()}
	for i := range errs {
		r, _ := strconv.Atoi(strings.TrimSpace(sos[i]))
		res.Ran += r
		if errs[i] != nil {
			res.Crashes++
			res.Errors = append(res.Errors, fmt.Sprintf("worker %d: %v", i, errs[i]))
		}
	}
	ents, err := os.ReadDir(filepath.Join(*dir, "trial"))
	if err != nil {
		return err
	}
	res.Trials = len(ents)
	res.Exact = res.Trials == *n && res.Ran == *n
	res.finish(cpu)
	return json.NewEncoder(os.Stdout).Encode(res)
}

func (r *Result) finish(cpu time.Duration) {
	if r.Seconds > 0 {
		r.PerSec = float64(r.Ran) / r.Seconds
	}
	if r.Ran > 0 {
		r.CPUms = float64(cpu.Microseconds()) / 1000 / float64(r.Ran)
	}
}

// worker claims trial numbers from 0 up until it reaches n, running one
// floor trial per claim, and prints how many it ran.
func worker(args []string) error {
	fl := flag.NewFlagSet("worker", flag.ContinueOnError)
	dir := fl.String("dir", "", "")
	n := fl.Int("n", 1000, "")
	if err := fl.Parse(args); err != nil {
		return err
	}
	argv := fl.Args()
	tmpDir, trialDir := filepath.Join(*dir, "tmp"), filepath.Join(*dir, "trial")
	prefix := strconv.Itoa(os.Getpid()) + "."
	seq, ran, next := 0, 0, 0
	for next < *n {
		// The claim: one fsync'd temp file, linked under the first free
		// number (EEXIST: somebody else has it; try the next).
		seq++
		tmp, err := writeTemp(tmpDir, prefix+strconv.Itoa(seq), []byte("state=running\n"))
		if err != nil {
			return err
		}
		won := false
		for ; next < *n; next++ {
			err := os.Link(tmp, filepath.Join(trialDir, strconv.Itoa(next)))
			if err == nil {
				won = true
				break
			}
			if !errors.Is(err, fs.ErrExist) {
				os.Remove(tmp)
				return err
			}
		}
		os.Remove(tmp)
		if !won {
			break
		}
		if err := syncDir(trialDir); err != nil {
			return err
		}
		name := filepath.Join(trialDir, strconv.Itoa(next))
		next++
		// The objective: one fork+exec, the last line of stdout its score.
		outb, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			return fmt.Errorf("objective: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(outb)), "\n")
		score, err := strconv.ParseFloat(strings.TrimSpace(lines[len(lines)-1]), 64)
		if err != nil {
			return fmt.Errorf("objective: no score: %w", err)
		}
		// The result: a second fsync'd temp file renamed over the name.
		seq++
		tmp, err = writeTemp(tmpDir, prefix+strconv.Itoa(seq), []byte("state=done score="+strconv.FormatFloat(score, 'g', -1, 64)+"\n"))
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, name); err != nil {
			os.Remove(tmp)
			return err
		}
		if err := syncDir(trialDir); err != nil {
			return err
		}
		ran++
	}
	fmt.Println(ran)
	return nil
}

// writeTemp writes b to tmpDir/name, fsyncs and closes it (both checked).
func writeTemp(tmpDir, name string, b []byte) (string, error) {
	p := filepath.Join(tmpDir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
		return "", err
	}
	return p, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// soma starts P soma-trial processes over one new study with budget n
// and the random sampler, times them, and reads the study back with
// package study: exactly n trials must be done, each by one attempt and
// one objective run.
func soma(args []string) error {
	fl := flag.NewFlagSet("soma", flag.ContinueOnError)
	bin := fl.String("bin", "soma-trial", "the soma-trial binary")
	root := fl.String("root", "", "the store (a new folder)")
	n := fl.Int("n", 1000, "the budget")
	p := fl.Int("p", 1, "soma-trial processes")
	extra := fl.String("flags", "", "more soma-trial flags, space-separated")
	opsCmd := fl.String("ops", "", "a command (run by sh -c) to run once the runners have exited, before the study is read back; its output, one JSON value, is the result's ops")
	if err := fl.Parse(args); err != nil {
		return err
	}
	argv := fl.Args()
	if *root == "" || len(argv) == 0 {
		return errors.New("soma: want -root DIR and an objective after --")
	}
	if err := os.MkdirAll(*root, 0o777); err != nil {
		return err
	}
	const name = "bench"
	logDir, err := os.MkdirTemp(filepath.Dir(*root), "soma-runners-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)
	flags := []string{*bin, "--root", *root, "--study", name, "--param", "x=float:0:1",
		"--sampler", "random", "--budget", strconv.Itoa(*n)}
	flags = append(flags, strings.Fields(*extra)...)
	argvs := make([][]string, *p)
	for i := range argvs {
		argvs[i] = append(append(append([]string(nil), flags...), "--"), argv...)
	}
	wall, errs, _, cpu, err := procs(argvs, logDir)
	if err != nil {
		return err
	}
	res := Result{Kind: "soma", P: *p, N: *n, Seconds: wall.Seconds(), States: map[string]int{}}
	if *opsCmd != "" {
		// Before the read-back below, which on a slow filesystem would
		// add a read of every record to the runners' count.
		out, err := exec.Command("sh", "-c", *opsCmd).Output()
		if err != nil {
			return fmt.Errorf("soma: -ops %q: %w", *opsCmd, err)
		}
		if !json.Valid(out) {
			return fmt.Errorf("soma: -ops %q printed %q, not one JSON value", *opsCmd, out)
		}
		res.Ops = json.RawMessage(bytes.TrimSpace(out))
	}
	for i, e := range errs {
		if e != nil {
			res.Crashes++
			res.Errors = append(res.Errors, fmt.Sprintf("soma-trial %d: %v", i, e))
		}
	}
	ctx := context.Background()
	store, err := fsstore.Open(*root, fsstore.Options{})
	if err != nil {
		return err
	}
	st, err := study.Open(ctx, store, name, nil, study.Options{})
	if err != nil {
		return err
	}
	recs, corrupt, err := st.Attempts(ctx, false)
	if err != nil {
		return err
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		return err
	}
	res.Trials = len(snap.Trials)
	for s, c := range snap.Counts() {
		res.States[string(s)] = c
	}
	for _, c := range corrupt {
		res.Errors = append(res.Errors, c.Error())
	}
	// Objective runs: one "start" line per run in the workers' log indexes.
	idxs, err := filepath.Glob(filepath.Join(runlog.Dir(store.Root(), name), "*.idx"))
	if err != nil {
		return err
	}
	for _, p := range idxs {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "start ") {
				res.Ran++
			}
		}
	}
	res.Exact = res.Trials == *n && res.States[string(study.StateDone)] == *n &&
		len(recs) == *n && res.Ran == *n && len(corrupt) == 0
	res.finish(cpu)
	return json.NewEncoder(os.Stdout).Encode(res)
}

// table reads Results, one JSON object per line, and prints the markdown
// table: one row per P.
func table(args []string, in io.Reader, out io.Writer) error {
	fl := flag.NewFlagSet("table", flag.ContinueOnError)
	if err := fl.Parse(args); err != nil {
		return err
	}
	rows := map[int]map[string]Result{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("table: %q: %w", line, err)
		}
		if rows[r.P] == nil {
			rows[r.P] = map[string]Result{}
		}
		rows[r.P][r.Kind] = r
	}
	if err := sc.Err(); err != nil {
		return err
	}
	ps := make([]int, 0, len(rows))
	for p := range rows {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	fmt.Fprintln(out, "| P | floor trials/s | soma trials/s | soma/floor | optuna-exec trials/s | optuna-inproc trials/s | exact budget (soma / optuna-exec, -inproc) | crashes (soma / optuna-exec / -inproc) |")
	fmt.Fprintln(out, "|--:|--:|--:|--:|--:|--:|:-:|:-:|")
	for _, p := range ps {
		r := rows[p]
		fl, okF := r["floor"]
		so, okS := r["soma"]
		ratio := "–"
		if okF && okS && fl.PerSec > 0 && so.PerSec > 0 {
			// soma's rate as a share of the floor's, and the slowdown
			// (the goal is at most 1.3x, a share of at least 0.77).
			if share := so.PerSec / fl.PerSec; share < 1 {
				ratio = fmt.Sprintf("%.2f (%.1fx slower)", share, 1/share)
			} else {
				ratio = fmt.Sprintf("%.2f (not slower)", share)
			}
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %s / %s | %s / %s / %s |\n", p,
			rate(r, "floor"), rate(r, "soma"), ratio, rate(r, "optuna-exec"), rate(r, "optuna-inproc"),
			exact(r, "soma"), exactOptuna(r), crashes(r, "soma"), crashes(r, "optuna-exec"), crashes(r, "optuna-inproc"))
	}
	return nil
}

func rate(r map[string]Result, kind string) string {
	x, ok := r[kind]
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.0f", x.PerSec)
}

func exact(r map[string]Result, kind string) string {
	x, ok := r[kind]
	switch {
	case !ok:
		return "–"
	case x.Exact:
		return "yes"
	}
	return fmt.Sprintf("no (%d)", x.Trials)
}

// exactOptuna shows both Optuna runs: "yes", or the trials each ran.
func exactOptuna(r map[string]Result) string {
	var parts []string
	for _, k := range []string{"optuna-exec", "optuna-inproc"} {
		x, ok := r[k]
		switch {
		case !ok:
			parts = append(parts, "–")
		case x.Exact:
			parts = append(parts, "yes")
		case x.Trials >= 0:
			parts = append(parts, fmt.Sprintf("no (%d)", x.Trials))
		default:
			parts = append(parts, fmt.Sprintf("no (%d ran, journal unreadable)", x.Ran))
		}
	}
	return strings.Join(parts, ", ")
}

func crashes(r map[string]Result, kind string) string {
	x, ok := r[kind]
	if !ok {
		return "–"
	}
	return strconv.Itoa(x.Crashes)
}
