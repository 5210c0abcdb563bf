package objective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
)

// py writes a Python objective (standard library only) next to the helper.
func py(t *testing.T, body string) []string {
	t.Helper()
	testutil.NeedPython(t, "json")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "soma_report.py"), Helper, 0o644)
	p := filepath.Join(dir, "obj.py")
	os.WriteFile(p, []byte("import os, sys, time, signal\nsys.path.insert(0, os.path.dirname(__file__))\nfrom soma_report import report, final, params\n"+body), 0o644)
	return []string{testutil.Python(), p}
}

// TestMain lets this test binary be the objectives' guard (Options.Guard).
func TestMain(m *testing.M) {
	GuardMain()
	os.Exit(m.Run())
}

// self is this test binary, the guard of the objectives it runs.
const self = "/proc/self/exe"

func run(t *testing.T, o Options, stop <-chan Stop) Result {
	t.Helper()
	if o.Guard == "" {
		o.Guard = self
	}
	if o.Grace == 0 {
		o.Grace = 300 * time.Millisecond
	}
	r, err := Run(context.Background(), o, stop)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return r
}

func TestProtocol(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		outcome   Outcome
		score     float64
		reasonHas string
		curve     int
	}{
		{"fd reporting", "for i in range(3):\n  report(i, i*0.5)\nfinal(0.25)\n", Done, 0.25, "", 3},
		{"last line of stdout", "print('training...')\nprint('  0.75  ')\n", Done, 0.75, "", 0},
		{"final wins over stdout", "print(3.0)\nfinal(2.0)\n", Done, 2.0, "", 0},
		{"NaN score", "final(float('nan'))\n", Failed, 0, "NaN", 0},
		{"NaN on stdout", "print('nan')\n", Failed, 0, "NaN", 0},
		{"garbage last line", "print('accuracy: 0.9')\n", Failed, 0, "not a number", 0},
		{"no output", "pass\n", Failed, 0, "no score", 0},
		{"non-zero exit", "sys.stderr.write('CUDA out of memory\\n')\nfinal(1.0)\nsys.exit(3)\n", Failed, 0, "exit status 3", 0},
		{"crash", "raise ValueError('bad lr')\n", Failed, 0, "exit status 1", 0},
		{"garbage on the report fd", "os.write(3, b'hello\\n')\nfinal(1.0)\n", Failed, 0, "bad report line", 0},
	}
	// Stdout goes to a pipe (any writer), or straight to a file whose
	// end is read back for the last line (soma-trial's log), including a
	// file that already holds earlier output, which must not count.
	stdouts := map[string]func(t *testing.T) io.Writer{
		"pipe": func(*testing.T) io.Writer { return nil },
		"file": func(t *testing.T) io.Writer {
			f, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		},
		"file with earlier output": func(t *testing.T) io.Writer {
			// As soma-trial's worker logs: opened for appending, after an
			// earlier attempt's score.
			p := filepath.Join(t.TempDir(), "out")
			if err := os.WriteFile(p, []byte("99.5\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		},
	}
	for _, tc := range tests {
		for how, stdout := range stdouts {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				r := run(t, Options{Argv: py(t, tc.body), Stdout: stdout(t)}, nil)
				if r.Outcome != tc.outcome {
					t.Fatalf("outcome = %s (%s), want %s", r.Outcome, r.Reason, tc.outcome)
				}
				if tc.outcome == Done && (r.Score != tc.score || !r.HasScore) {
					t.Errorf("score = %v, want %v", r.Score, tc.score)
				}
				if !strings.Contains(r.Reason, tc.reasonHas) {
					t.Errorf("reason = %q, want it to mention %q", r.Reason, tc.reasonHas)
				}
				if len(r.Curve) != tc.curve {
					t.Errorf("curve = %v, want %d steps", r.Curve, tc.curve)
				}
			})
		}
	}
	for how, stderr := range stdouts {
		t.Run("stderr tail kept/"+how, func(t *testing.T) {
			r := run(t, Options{Argv: py(t, "raise ValueError('bad lr 0.3')\n"), Stderr: stderr(t)}, nil)
			if !strings.Contains(r.StderrTail, "ValueError: bad lr 0.3") || strings.Contains(r.StderrTail, "99.5") {
				t.Errorf("stderr tail = %q, want this run's traceback only", r.StderrTail)
			}
		})
	}
}

func TestPointDelivery(t *testing.T) {
	argv := append(py(t, `
import json
p = params()
assert p == {"lr": 0.001, "opt": "adam"}, p
assert os.environ["SOMA_PARAM_LR"] == "0.001"
assert os.environ["SOMA_PARAM_BATCH_SIZE"] == "64"
assert os.environ["SOMA_TRIAL"] == "7"
assert sys.argv[1:] == ["--lr", "0.001", "--opt=adam", "7"], sys.argv
final(1)
`), "--lr", "{lr}", "--opt={opt}", "{trial}")
	r := run(t, Options{
		Argv:       argv,
		Params:     []Param{{Name: "lr", Text: "0.001"}, {Name: "opt", Text: "adam"}, {Name: "batch-size", Text: "64"}},
		ParamsJSON: []byte(`{"lr":0.001,"opt":"adam"}`),
		Vars:       map[string]string{"trial": "7"},
	}, nil)
	if r.Outcome != Done {
		t.Fatalf("outcome %s: %s\n%s", r.Outcome, r.Reason, r.StderrTail)
	}
	if _, err := Substitute([]string{"--x={nope}"}, []Param{{Name: "lr", Text: "1"}}, nil); err == nil || !strings.Contains(err.Error(), "{nope}") {
		t.Errorf("Substitute(unknown) = %v, want an error naming {nope}", err)
	}
}

func TestPruneStopsEarly(t *testing.T) {
	t.Run("cooperative objective stops at the verdict", func(t *testing.T) {
		body := "for i in range(100):\n  if report(i, 1.0/(i+1)):\n    print('stopping at', i); sys.exit(0)\nfinal(0)\n"
		r := run(t, Options{Argv: py(t, body), OnReport: func(step int64, v float64) bool { return step >= 4 }}, nil)
		if r.Outcome != Pruned || r.PrunedAt != 4 || len(r.Curve) != 5 {
			t.Fatalf("outcome %s at %d with %d steps, want pruned at step 4 with 5 steps", r.Outcome, r.PrunedAt, len(r.Curve))
		}
		if r.Score != 0.2 {
			t.Errorf("pruned score = %v, want the last value 0.2", r.Score)
		}
	})
	t.Run("an objective that does not wait for verdicts sees the prune", func(t *testing.T) {
		// report(..., wait=False): a loop that reports every step never
		// waits for soma-trial, and still stops on a prune, a few steps
		// later (issue 13: waiting for every verdict costs two process
		// wakeups per report). It stops on its own: exit status 0.
		body := "i = 0\nwhile not report(i, 1.0, wait=False):\n  i += 1\nprint('stopped at', i)\n"
		r := run(t, Options{Argv: py(t, body), Grace: 10 * time.Second, OnReport: func(step int64, v float64) bool { return step >= 100 }}, nil)
		if r.Outcome != Pruned || r.PrunedAt != 100 || r.ExitCode != 0 {
			t.Fatalf("outcome %s at %d, exit %d, want pruned at step 100 and stopped by itself (0)", r.Outcome, r.PrunedAt, r.ExitCode)
		}
	})
	t.Run("reports held back by wait=False all arrive", func(t *testing.T) {
		// report(..., wait=False) sends its reports in a batch every 10 ms
		// (issue 13: a write(2) per step cost a fast loop more than the
		// step); those still held when the loop ends are sent at final()
		// or, without one, at the interpreter's exit.
		for _, end := range []string{"final(0.5)\n", "print('no final')\n"} {
			body := "for i in range(1000):\n  report(i, 1.0/(i+1), wait=False)\n" + end
			r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool { return false }}, nil)
			if len(r.Curve) != 1000 || r.Curve[999].Step != 999 {
				t.Errorf("%q: %d steps in the curve, want 1000", end, len(r.Curve))
			}
		}
	})
	t.Run("objective ignoring the verdict and SIGTERM is killed", func(t *testing.T) {
		body := "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nfor i in range(10**9):\n  os.write(3, b'report %d 1.0\\n' % i)\n  time.sleep(0.01)\n"
		r := run(t, Options{Argv: py(t, body), Grace: 200 * time.Millisecond, OnReport: func(step int64, v float64) bool { return step == 2 }}, nil)
		if r.Outcome != Pruned || r.PrunedAt != 2 {
			t.Fatalf("outcome %s at %d, want pruned at 2", r.Outcome, r.PrunedAt)
		}
		if r.ExitCode != -1 {
			t.Errorf("exit code %d, want killed (-1)", r.ExitCode)
		}
	})
}

func TestTimeoutAndSignals(t *testing.T) {
	t.Run("hung objective hits the timeout", func(t *testing.T) {
		r := run(t, Options{Argv: py(t, "time.sleep(3600)\n"), Timeout: 300 * time.Millisecond}, nil)
		if r.Outcome != Failed || !strings.Contains(r.Reason, "timeout") {
			t.Errorf("outcome %s (%s), want failed by timeout", r.Outcome, r.Reason)
		}
	})
	t.Run("objective ignoring SIGTERM is killed after the grace", func(t *testing.T) {
		r := run(t, Options{Argv: py(t, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(3600)\n"),
			Timeout: 300 * time.Millisecond, Grace: 200 * time.Millisecond}, nil)
		if r.Outcome != Failed || r.ExitCode != -1 {
			t.Errorf("outcome %s exit %d, want failed and killed", r.Outcome, r.ExitCode)
		}
	})
	t.Run("USR1 is forwarded and the run is interrupted", func(t *testing.T) {
		mark := filepath.Join(t.TempDir(), "got")
		body := "def h(s, f):\n  open(" + pyStr(mark) + ", 'w').write(str(s)); sys.exit(0)\nsignal.signal(signal.SIGUSR1, h)\nreport(0, 1.0)\ntime.sleep(3600)\n"
		stop := make(chan Stop, 1)
		// A grace the handler cannot outlast: with run's 300 ms, a CI run
		// under load (go test -race, two packages at once) sent SIGTERM
		// before the objective's handler had written its mark, and the
		// test failed with "objective saw signal """. The objective exits
		// in its handler, so no grace is waited for when all is well.
		r := run(t, Options{Argv: py(t, body), Grace: 10 * time.Second, OnReport: func(int64, float64) bool {
			stop <- Stop{Kind: StopSignal, Signal: syscall.SIGUSR1}
			return false
		}}, stop)
		if r.Outcome != Interrupted {
			t.Fatalf("outcome %s, want interrupted", r.Outcome)
		}
		got, _ := os.ReadFile(mark)
		if string(got) != "10" {
			t.Errorf("objective saw signal %q, want 10 (SIGUSR1)", got)
		}
	})
	t.Run("killed by SIGTERM from outside is interrupted, not failed", func(t *testing.T) {
		// Slurm's scancel signals the objective directly, maybe before
		// soma-trial hears of it.
		r := run(t, Options{Argv: py(t, "report(0, 1.0)\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n")}, nil)
		if r.Outcome != Interrupted || !strings.Contains(r.Reason, "terminated") {
			t.Errorf("outcome %s (%s), want interrupted", r.Outcome, r.Reason)
		}
	})
	t.Run("a crash signal is a failure", func(t *testing.T) {
		r := run(t, Options{Argv: py(t, "os.kill(os.getpid(), signal.SIGSEGV)\ntime.sleep(5)\n")}, nil)
		if r.Outcome != Failed || !strings.Contains(r.Reason, "segmentation") {
			t.Errorf("outcome %s (%s), want failed", r.Outcome, r.Reason)
		}
	})
	t.Run("superseded", func(t *testing.T) {
		stop := make(chan Stop, 1)
		stop <- Stop{Kind: StopSuperseded}
		r := run(t, Options{Argv: py(t, "time.sleep(3600)\n")}, stop)
		if r.Outcome != Superseded {
			t.Errorf("outcome %s, want superseded", r.Outcome)
		}
	})
	t.Run("a program that cannot be executed is a start error", func(t *testing.T) {
		// Found, but exec fails in the guard: it says so on its status
		// pipe, and the error is still ErrStart (the loop stops).
		p := filepath.Join(t.TempDir(), "train")
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), Options{Argv: []string{p}, Guard: self}, nil)
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("Run(not executable) = %v, want ErrStart saying permission denied", err)
		}
		// Issue 16: the cause was formatted with %v, so a caller could
		// not tell EACCES from ENOENT with errors.Is.
		if !errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Run(not executable) = %v, want errors.Is fs.ErrPermission and not fs.ErrNotExist", err)
		}
	})
	t.Run("missing program is a start error", func(t *testing.T) {
		// Issue 16: the cause was formatted with %v, so a caller could
		// not tell ENOENT from EACCES with errors.Is.
		_, err := Run(context.Background(), Options{Argv: []string{"/nonexistent/train"}, Guard: self}, nil)
		if !errors.Is(err, ErrStart) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			t.Errorf("Run(missing) = %v, want ErrStart and errors.Is fs.ErrNotExist", err)
		}
		// A bare name is looked up in PATH before the guard is asked.
		_, err = Run(context.Background(), Options{Argv: []string{"soma-no-such-objective"}, Guard: self}, nil)
		if !errors.Is(err, ErrStart) || !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("Run(not in PATH) = %v, want ErrStart and errors.Is exec.ErrNotFound", err)
		}
	})
}

func pyStr(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

// TestReportPipe pins how the report pipe is read (watch): what an
// objective may do with fd 3 and fd 4 without losing a report or leaving
// soma-trial waiting.
func TestReportPipe(t *testing.T) {
	t.Run("an objective that never reads its verdicts is not stalled", func(t *testing.T) {
		// 20000 verdicts are ~170 KiB, more than a pipe holds: the ones
		// that do not fit are dropped, the reports all count.
		body := "for i in range(20000):\n  os.write(3, b'report %d 0.5\\n' % i)\nfinal(1.0)\n"
		r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool { return false }}, nil)
		if r.Outcome != Done || len(r.Curve) != 20000 {
			t.Fatalf("outcome %s (%s) with %d steps, want done with 20000", r.Outcome, r.Reason, len(r.Curve))
		}
	})
	t.Run("verdicts that fill the pipe are dropped whole, never cut", func(t *testing.T) {
		// Verdicts are written a read's worth at a time; into a full pipe
		// a write over PIPE_BUF writes what fits, which could cut a line.
		// The objective reads fd 4 only once soma-trial has had a second
		// to fill it (if it had not, nothing is checked, nothing flakes).
		out := filepath.Join(t.TempDir(), "verdicts")
		body := "for i in range(20000):\n  os.write(3, b'report %d 0.5\\n' % i)\ntime.sleep(1)\nos.set_blocking(4, False)\nb = b''\ntry:\n  while True:\n    c = os.read(4, 1 << 16)\n    if not c: break\n    b += c\nexcept BlockingIOError:\n  pass\nopen(" + pyStr(out) + ", 'wb').write(b)\nfinal(1.0)\n"
		r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool { return false }}, nil)
		if r.Outcome != Done || len(r.Curve) != 20000 {
			t.Fatalf("outcome %s (%s) with %d steps, want done with 20000", r.Outcome, r.Reason, len(r.Curve))
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got); n > 0 && got[n-1] != '\n' {
			t.Errorf("the verdicts end in %q: a line cut in two", got[max(0, n-20):])
		}
		for i, l := range strings.Split(strings.TrimSuffix(string(got), "\n"), "\n") {
			if l != "continue" && len(got) > 0 {
				t.Fatalf("verdict %d is %q, want continue", i, l)
			}
		}
	})
	t.Run("reports after a prune are answered prune", func(t *testing.T) {
		// The objective reads each verdict, ignores the prune and
		// reports twice more, then exits on its own.
		out := filepath.Join(t.TempDir(), "verdicts")
		body := "ctl = os.fdopen(4)\ngot = []\nfor i in range(4):\n  os.write(3, b'report %d 0.5\\n' % i)\n  got.append(ctl.readline().strip())\nopen(" + pyStr(out) + ", 'w').write(' '.join(got))\n"
		r := run(t, Options{Argv: py(t, body), Grace: 5 * time.Second, OnReport: func(step int64, _ float64) bool { return step == 1 }}, nil)
		if r.Outcome != Pruned || r.PrunedAt != 1 {
			t.Fatalf("outcome %s at %d, want pruned at step 1", r.Outcome, r.PrunedAt)
		}
		got, _ := os.ReadFile(out)
		if string(got) != "continue prune prune prune" {
			t.Errorf("verdicts %q, want continue then prune for every later report", got)
		}
	})
	t.Run("reports in the first milliseconds and after them count", func(t *testing.T) {
		// The first report comes at once, the next after 50 ms, when the
		// reading goroutine has parked in the netpoller; with one P and
		// with two. (Until issue 13 the first 5 ms were read with a raw
		// ppoll and the rest with an ordinary one: this pinned both.)
		body := "echo 'report 0 0.25' >&3; sleep 0.05; echo 'report 1 0.5' >&3; echo 'final 0.75' >&3"
		for _, procs := range []int{1, 2} {
			prev := runtime.GOMAXPROCS(procs)
			r := run(t, Options{Argv: []string{"/bin/sh", "-c", body}}, nil)
			runtime.GOMAXPROCS(prev)
			if r.Outcome != Done || r.Score != 0.75 || len(r.Curve) != 2 {
				t.Errorf("GOMAXPROCS=%d: outcome %s (%s) score %v with %d steps, want done 0.75 with 2", procs, r.Outcome, r.Reason, r.Score, len(r.Curve))
			}
		}
	})
	t.Run("reports still in the pipe at the exit all count, however slow their answers", func(t *testing.T) {
		// Regression: the exit set a fixed read deadline exitDrain (2 s)
		// ahead, and the reports still in the pipe once answering them
		// took longer were lost (a trial of 2000 reports failed with
		// "nothing on fd $SOMA_REPORT_FD").
		const n = 3000 // ~45 KiB: in the pipe, more than one read
		body := "for i in range(" + strconv.Itoa(n) + "):\n  os.write(3, b'report %d 0.5\\n' % i)\nos.write(3, b'final 1.0\\n')\n"
		r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool {
			time.Sleep(time.Millisecond) // 3 s over all: past exitDrain
			return false
		}}, nil)
		if r.Outcome != Done || len(r.Curve) != n {
			t.Errorf("outcome %s (%s) with %d steps, want done with %d", r.Outcome, r.Reason, len(r.Curve), n)
		}
	})
	t.Run("a last line without a newline counts", func(t *testing.T) {
		r := run(t, Options{Argv: py(t, "os.write(3, b'report 0 0.5\\nfinal 0.75')\n")}, nil)
		if r.Outcome != Done || r.Score != 0.75 || len(r.Curve) != 1 {
			t.Errorf("outcome %s score %v steps %d, want done 0.75 with 1 step", r.Outcome, r.Score, len(r.Curve))
		}
	})
	t.Run("a report line over 1 MiB is a protocol error, not a hang", func(t *testing.T) {
		body := "os.write(3, b'report 0 ' + b'1' * (3 << 20) + b'\\n')\nos.write(3, b'report 1 0.5\\n')\nfinal(1.0)\n"
		r := run(t, Options{Argv: py(t, body)}, nil)
		if r.Outcome != Failed || !strings.Contains(r.Reason, "bad report line") || len(r.Curve) != 1 {
			t.Errorf("outcome %s (%s) with %d steps, want failed on the long line, the next report kept", r.Outcome, r.Reason, len(r.Curve))
		}
	})
	t.Run("closing fd 3 early does not end the run", func(t *testing.T) {
		body := "os.write(3, b'report 0 0.5\\n')\nos.close(3)\ntime.sleep(0.3)\nprint(2.5)\n"
		r := run(t, Options{Argv: py(t, body)}, nil)
		if r.Outcome != Done || r.Score != 2.5 || len(r.Curve) != 1 {
			t.Errorf("outcome %s (%s) score %v, want done 2.5 after the early close", r.Outcome, r.Reason, r.Score)
		}
	})
	t.Run("a process left holding fd 3 is not waited for", func(t *testing.T) {
		// The objective starts a background process that inherits fd 3
		// and outlives it; its score must still be taken, and the run
		// must end without waiting for the straggler.
		testutil.NeedPython(t, "json")
		// Its stdout goes to the objective's stdout too (a pipe here,
		// soma-trial's log file there): not waited for either.
		body := "import subprocess\nsubprocess.Popen(['sleep', '61'], pass_fds=(3,), start_new_session=True)\nprint(3.5, flush=True)\n"
		t.Cleanup(func() { _ = exec.Command("pkill", "-f", "^sleep 61$").Run() })
		done := make(chan Result, 1)
		go func() { done <- run(t, Options{Argv: py(t, body)}, nil) }()
		select {
		case r := <-done:
			if r.Outcome != Done || r.Score != 3.5 {
				t.Errorf("outcome %s (%s) score %v, want done 3.5", r.Outcome, r.Reason, r.Score)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run waited for a background process holding fd 3 and stdout")
		}
	})
}

// TestNoRawSystemCalls: the package does its blocking I/O through Go's
// ordinary calls. Issue 13: watch polled the report pipe with a raw
// ppoll(2) (unix.RawSyscall6), which keeps its P while blocked; on a
// shared filesystem's slow moments that holds up the GC's stop-the-world
// and every heartbeat of the process with it.
func TestNoRawSystemCalls(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "RawSyscall") {
				t.Errorf("%s: %s: a raw system call (use the ordinary call, or an *os.File in the netpoller)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

// tree is a shell objective that starts a process tree before it does
// what mode says, each process writing its pid to a file in dir:
//
//	bg      a background child
//	grand   a grandchild, under a child that waits for it
//	setsid  a child in a session of its own (out of the process group)
//	orphan  a grandchild whose setsid parent exits (reparented)
//	noterm  a child that ignores SIGTERM
//
// Then mode: "exit" prints a score and exits; "report" reports step 0
// and sleeps; "sleep" sleeps.
func tree(dir, mode string) []string {
	body := `d=` + dir + `
sh -c 'echo $$ > '$d'/bg.tmp; mv '$d'/bg.tmp '$d'/bg; exec sleep 300' &
sh -c 'sh -c "echo \$\$ > '$d'/grand.tmp; mv '$d'/grand.tmp '$d'/grand; exec sleep 300" & wait' &
setsid sh -c 'echo $$ > '$d'/setsid.tmp; mv '$d'/setsid.tmp '$d'/setsid; exec sleep 300' &
setsid sh -c 'sh -c "echo \$\$ > '$d'/orphan.tmp; mv '$d'/orphan.tmp '$d'/orphan; exec sleep 300" &' &
sh -c 'trap "" TERM; echo $$ > '$d'/noterm.tmp; mv '$d'/noterm.tmp '$d'/noterm; exec sleep 300' &
for f in bg grand setsid orphan noterm; do while [ ! -e $d/$f ]; do sleep 0.01; done; done
case ` + mode + ` in
exit) echo 1.5 ;;
report) echo 'report 0 1.0' >&3; read v <&4; sleep 300 ;;
sleep) sleep 300 ;;
esac
`
	return []string{"/bin/sh", "-c", body}
}

// treePids reads the pids tree's processes wrote to dir.
func treePids(t *testing.T, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range []string{"bg", "grand", "setsid", "orphan", "noterm"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the objective's %s process never started: %v", name, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: pid %q: %v", name, b, err)
		}
		out[name] = pid
	}
	return out
}

// alive reports whether pid is a live process (not a zombie: a zombie has
// ended, only its parent has not reaped it yet).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestTreeEndsWithTheAttempt: an objective's whole process tree ends with
// its run, however the run ends. Issue 13: Pdeathsig reached the direct
// child only and signals went to its process group only, so a
// background child outlived a normal exit, and setsid escapes outlived
// everything.
func TestTreeEndsWithTheAttempt(t *testing.T) {
	tests := []struct {
		name    string
		mode    string
		opts    func(o *Options, stop chan Stop)
		outcome Outcome
	}{
		{"normal exit", "exit", func(*Options, chan Stop) {}, Done},
		{"prune", "report", func(o *Options, _ chan Stop) {
			o.OnReport = func(int64, float64) bool { return true }
		}, Pruned},
		{"timeout", "sleep", func(o *Options, _ chan Stop) { o.Timeout = 3 * time.Second }, Failed},
		{"stop signal", "report", func(o *Options, stop chan Stop) {
			o.OnReport = func(int64, float64) bool {
				stop <- Stop{Kind: StopSignal, Signal: syscall.SIGTERM}
				return false
			}
		}, Interrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			stop := make(chan Stop, 1)
			o := Options{Argv: tree(dir, tc.mode), Grace: 300 * time.Millisecond}
			tc.opts(&o, stop)
			r := run(t, o, stop)
			if r.Outcome != tc.outcome {
				t.Errorf("outcome %s (%s), want %s", r.Outcome, r.Reason, tc.outcome)
			}
			// Run returns once the tree is gone: no process of it may be
			// left, not even for a moment.
			for name, pid := range treePids(t, dir) {
				if alive(pid) {
					t.Errorf("%s process %d outlived the run", name, pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// The guard itself killed (the OOM killer, a person's kill -9): the
// objective dies with it (its Pdeathsig), and the run ends failed with
// the reason, instead of waiting on a pipe that nobody will close.
func TestGuardKilled(t *testing.T) {
	dir := t.TempDir()
	body := "echo $$ > " + dir + "/pid.tmp; mv " + dir + "/pid.tmp " + dir + "/pid; exec sleep 300"
	done := make(chan Result, 1)
	go func() { done <- run(t, Options{Argv: []string{"/bin/sh", "-c", body}}, nil) }()
	var pid int
	for i := 0; ; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
		if i == 600 {
			t.Fatal("the objective never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	guard, _ := strconv.Atoi(f[1])
	if guard <= 1 || guard == os.Getpid() {
		t.Fatalf("the objective's parent is %d, want its guard", guard)
	}
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Outcome != Failed || !strings.Contains(r.Reason, "guard") {
			t.Errorf("outcome %s (%s), want failed naming the guard", r.Outcome, r.Reason)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its guard was killed")
	}
	for i := 0; alive(pid); i++ {
		if i == 600 {
			t.Fatalf("the objective %d outlived its guard", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A guard is kept between runs: starting one per objective (a Go
// program's exec and initialisation) cost soma-trial about 18 ms of CPU
// per trial, 39-53 trials/s of /bin/echo instead of 232-496.
func TestGuardIsKept(t *testing.T) {
	var guards []int
	for i := range 3 {
		r := run(t, Options{Argv: []string{"/bin/sh", "-c", `awk '{print $4}' /proc/$$/stat`}}, nil)
		if r.Outcome != Done {
			t.Fatalf("run %d: %s (%s)", i, r.Outcome, r.Reason)
		}
		guards = append(guards, int(r.Score))
	}
	if guards[0] <= 1 || guards[0] == os.Getpid() {
		t.Fatalf("the objective's parent is %d, want a guard", guards[0])
	}
	if guards[1] != guards[0] || guards[2] != guards[0] {
		t.Errorf("the objectives' guards were %v, want one kept guard", guards)
	}
}

// A command meant for a run that has ended (a kill sent as the objective
// exited) must not reach the guard's next run: each carries its run's
// number. The stale kill is sent while the next objective waits for
// SIGUSR1, which comes after it: obeyed, it would kill the objective.
func TestGuardIgnoresStaleCommands(t *testing.T) {
	g, err := takeGuard(self)
	if err != nil {
		t.Fatal(err)
	}
	defer g.release(false)
	runOn := func(script string) (uint64, <-chan guardReply, *os.File) {
		t.Helper()
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		null, _ := devNull()
		fds := []int{int(null.Fd()), int(outW.Fd()), 2, int(null.Fd()), int(null.Fd())}
		seq, err := g.start(guardRun{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ()}, fds)
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		replies := g.replies(seq)
		if r := <-replies; r.verb != "pid" {
			t.Fatalf("first reply %+v, want pid", r)
		}
		return seq, replies, outR
	}
	old, replies, out := runOn("exit 0")
	for range replies {
	}
	out.Close()
	seq, replies, out := runOn(`trap 'echo got-usr1; exit 0' USR1; echo ready; while :; do sleep 0.05; done`)
	defer out.Close()
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("the objective said %q (%v), want ready", line, err)
	}
	g.command(old, "kill", "")
	g.command(seq, "signal", strconv.Itoa(int(syscall.SIGUSR1)))
	var status string
	for r := range replies {
		if r.verb == "exit" {
			status = r.arg
		}
	}
	e, ok := parseExit(status)
	if !ok || !e.ws.Exited() || e.ws.ExitStatus() != 0 {
		t.Errorf("the second run ended with wait status %q, want exit 0 (the first run's kill reached it?)", status)
	}
}

// An idle guard that died (killed by hand) is replaced: the next run
// starts on a new one instead of failing.
func TestIdleGuardDied(t *testing.T) {
	prog := []string{"/bin/sh", "-c", `awk '{print $4}' /proc/$$/stat`}
	r := run(t, Options{Argv: prog}, nil)
	if r.Outcome != Done {
		t.Fatalf("%s (%s)", r.Outcome, r.Reason)
	}
	first := int(r.Score)
	// Every idle guard of this binary, so that the next run cannot pick
	// a live one.
	guardPool.mu.Lock()
	idle := append([]*guardProc(nil), guardPool.idle[self]...)
	guardPool.mu.Unlock()
	for _, g := range idle {
		_ = g.cmd.Process.Kill()
		<-g.dead
	}
	r = run(t, Options{Argv: prog}, nil)
	if r.Outcome != Done {
		t.Fatalf("after the idle guard was killed: %s (%s), want done", r.Outcome, r.Reason)
	}
	if int(r.Score) == first {
		t.Errorf("the run's guard is %d, the one that was killed", first)
	}
}

// A guard whose soma-trial has gone (its socket closed) exits, with
// nothing running or killing what runs.
func TestGuardExitsWithItsCaller(t *testing.T) {
	g, err := startGuard(self)
	if err != nil {
		t.Fatal(err)
	}
	g.release(false)
	select {
	case <-g.dead:
	case <-time.After(60 * time.Second):
		t.Fatal("the guard did not exit when its socket closed")
	}
	if g.werr != nil {
		t.Errorf("the guard exited with %v, want 0", g.werr)
	}
}

// The caller that knows where its log files end (soma-trial's per-worker
// logs, issue 18: a seek to a file's end is a round trip on NFS) says so,
// and the run takes its output to start there rather than asking the
// file; the run's Result says where the output ended, for the next run.
func TestEndsKnown(t *testing.T) {
	dir := t.TempDir()
	open := func(name, earlier string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.WriteString(earlier)
		return f
	}
	// Each file holds a line before the end the caller gives: "0.25"
	// is the last line of stdout from there, so the score says where the
	// run started.
	out := open("out", "0.5\n0.25\n")
	errf := open("err", "old warning\n")
	r := run(t, Options{
		Argv: []string{"/bin/sh", "-c", "echo warn >&2"}, Stdout: out, Stderr: errf,
		EndsKnown: true, StdoutEnd: 4, StderrEnd: 0,
	}, nil)
	if r.Outcome != Done || r.Score != 0.25 {
		t.Errorf("outcome %s score %v, want done 0.25 (the last line after the known end 4)", r.Outcome, r.Score)
	}
	// A done run's stderr is not read back (issue 18): only a failed
	// one keeps its tail.
	if r.StderrTail != "" {
		t.Errorf("stderr tail %q of a done run, want none", r.StderrTail)
	}
	if r.StdoutEnd != 9 || r.StderrEnd != 17 {
		t.Errorf("ends stdout %d stderr %d, want 9 17 (the files' sizes)", r.StdoutEnd, r.StderrEnd)
	}
	// Without EndsKnown the run starts at the files' ends: no score.
	r = run(t, Options{Argv: []string{"/bin/true"}, Stdout: out, Stderr: errf}, nil)
	if r.HasScore || r.StdoutEnd != 9 || r.StderrEnd != 17 {
		t.Errorf("unknown ends: score %v (has %v), ends %d %d, want no score, ends 9 17", r.Score, r.HasScore, r.StdoutEnd, r.StderrEnd)
	}
	// A failed run's stderr tail runs from the known end.
	r = run(t, Options{
		Argv: []string{"/bin/sh", "-c", "echo bad >&2; exit 3"}, Stdout: out, Stderr: errf,
		EndsKnown: true, StdoutEnd: 9, StderrEnd: 12,
	}, nil)
	if r.Outcome != Failed || r.StderrTail != "warn\nbad\n" || r.StderrEnd != 21 {
		t.Errorf("failed run: outcome %s, stderr tail %q, end %d; want failed, %q, 21", r.Outcome, r.StderrTail, r.StderrEnd, "warn\nbad\n")
	}
}

// The ends of the output files come from the descriptor the objective
// wrote through (its offset, which costs no file-server round trip; issue
// 18), but output that reached a file through a descriptor of its own
// must still count: stdout's last line is the score. An objective that
// opens /dev/stdout anew writes past the shared offset.
func TestOutputPastTheOffset(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         float64
		end          int64
	}{
		{"only through its own descriptor", "echo 0.75 >>/dev/stdout", 0.75, 5},
		{"after a line through the shared one", "echo 1; echo 0.75 >>/dev/stdout", 0.75, 7},
		{"before a line through the shared one", "echo 0.75 >>/dev/stdout; echo 1", 1, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var fs [2]*os.File
			for i, name := range []string{"out", "err"} {
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				fs[i] = f
			}
			r := run(t, Options{
				Argv: []string{"/bin/sh", "-c", tc.script}, Stdout: fs[0], Stderr: fs[1],
				EndsKnown: true,
			}, nil)
			if r.Outcome != Done || r.Score != tc.want || r.StdoutEnd != tc.end {
				t.Errorf("outcome %s score %v stdout end %d, want done %v %d (%s)", r.Outcome, r.Score, r.StdoutEnd, tc.want, tc.end, r.Reason)
			}
		})
	}
}
