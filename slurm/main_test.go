package slurm

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// helperArg, as the test binary's first argument, makes it one of the
// small programs below instead of running tests: generated scripts exec it,
// locally and as Slurm jobs.
const helperArg = "slurm-test-helper"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		if err := helper(os.Args[2], os.Args[3:]); err != nil {
			fmt.Fprintln(os.Stderr, "slurm-test-helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCommand returns the argv that runs helper mode with args.
func helperCommand(t *testing.T, mode string, args ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	return append([]string{exe, helperArg, mode}, args...)
}

// whoReport is what the "who" helper writes.
type whoReport struct {
	Who   string `json:"who"`
	Job   Job    `json:"job"`
	InJob bool   `json:"in_job"`
	PID   int    `json:"pid"`
	// TaskPID is SLURM_TASK_PID: the pid of the batch shell Slurm started.
	TaskPID string `json:"task_pid"`
}

// sigReport is what the "sigwait" helper writes.
type sigReport struct {
	PID     int      `json:"pid"`
	TaskPID string   `json:"task_pid"`
	Signals []string `json:"signals"`
}

// helper runs one helper program:
//
//	args FILE ARGS...  writes ARGS to FILE as JSON
//	who DIR            writes DIR/who-<array task or "job">.json: Self() and its Who
//	sigwait FILE       writes FILE.ready, then waits up to 60 s for SIGUSR1,
//	                   recording every USR1/TERM/CONT/INT/HUP in FILE as it comes;
//	                   exits 0 after USR1
func helper(mode string, args []string) error {
	writeJSON := func(path string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	switch mode {
	case "args":
		if len(args) < 1 {
			return fmt.Errorf("args: want FILE ARGS...")
		}
		rest := args[1:]
		if rest == nil {
			rest = []string{}
		}
		return writeJSON(args[0], rest)
	case "who":
		if len(args) != 1 {
			return fmt.Errorf("who: want DIR")
		}
		me, err := Self()
		if err != nil {
			return err
		}
		name := "job"
		if me.Job.IsArray() {
			name = fmt.Sprint(me.Job.ArrayTaskID)
		}
		return writeJSON(filepath.Join(args[0], "who-"+name+".json"), whoReport{
			Who: me.Who(), Job: me.Job, InJob: me.InJob, PID: me.PID, TaskPID: os.Getenv("SLURM_TASK_PID"),
		})
	case "sigwait":
		if len(args) != 1 {
			return fmt.Errorf("sigwait: want FILE")
		}
		c := make(chan os.Signal, 8)
		signal.Notify(c, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGCONT, syscall.SIGINT, syscall.SIGHUP)
		rep := sigReport{PID: os.Getpid(), TaskPID: os.Getenv("SLURM_TASK_PID"), Signals: []string{}}
		if err := writeJSON(args[0], rep); err != nil {
			return err
		}
		if err := writeJSON(args[0]+".ready", rep); err != nil {
			return err
		}
		timeout := time.After(60 * time.Second)
		for {
			select {
			case s := <-c:
				name := map[os.Signal]string{syscall.SIGUSR1: "USR1", syscall.SIGTERM: "TERM", syscall.SIGCONT: "CONT", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP"}[s]
				rep.Signals = append(rep.Signals, name)
				if err := writeJSON(args[0], rep); err != nil {
					return err
				}
				if s == syscall.SIGUSR1 {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("sigwait: no SIGUSR1 within 60 s")
			}
		}
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}
