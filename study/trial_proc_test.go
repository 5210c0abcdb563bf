package study

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	"github.com/soma-hpc/soma/internal/testutil"
)

// The cross-process tests re-run this test binary as worker processes
// (testutil.Child, role "helper"), so claims race through the filesystem
// and not through one process's memory.
func TestMain(m *testing.M) {
	testutil.RunChild(map[string]func() int{"helper": helperProcess})
	os.Exit(m.Run())
}

// helperEnv carries a helper process's arguments:
// helperEnv="mode root study grace gofile".
const helperEnv = "SOMA_STUDY_HELPER"

// helperProcess is the body of a worker process of the cross-process
// tests; it returns the exit status, 3 on an error.
func helperProcess() int {
	args := strings.Fields(os.Getenv(helperEnv))
	if len(args) != 5 {
		fmt.Fprintf(os.Stderr, "helper: %s=%q, want 5 fields: mode root study grace gofile\n", helperEnv, os.Getenv(helperEnv))
		return 3
	}
	mode, root, name, goFile := args[0], args[1], args[2], args[4]
	grace, err := time.ParseDuration(args[3])
	if err == nil {
		err = helperMain(mode, root, name, grace, goFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 3
	}
	return 0
}

func helperMain(mode, root, name string, grace time.Duration, goFile string) error {
	ctx := context.Background()
	st, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		return err
	}
	s, err := Open(ctx, st, name, nil, Options{Grace: grace})
	if err != nil {
		return err
	}
	// Start together: wait for the parent's go file.
	for {
		if _, err := os.Stat(goFile); err == nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	who := Me("helper")
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for {
		run, err := s.Next(ctx, who)
		switch {
		case errors.Is(err, ErrBudgetReached), errors.Is(err, ErrNoWork):
			fmt.Fprintln(out, "end", err)
			return nil
		case err != nil:
			return err
		}
		fmt.Fprintf(out, "ran %d %d %s\n", run.Number(), run.Attempt(), run.PointText())
		if mode == "once" {
			return run.Finish(ctx, StateDone, float64(run.Number()), "")
		}
		if err := run.Finish(ctx, StateDone, float64(run.Number()), ""); err != nil {
			return err
		}
	}
}

type helperRun struct {
	trial, attempt int
	point          string
}

// runHelpers starts n worker processes in mode over root/study, lets them
// go at once, and returns every trial they ran.
func runHelpers(t *testing.T, n int, mode, root, study string, grace time.Duration) []helperRun {
	t.Helper()
	goFile := filepath.Join(t.TempDir(), "go")
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range n {
		cmd := testutil.Child(t, "helper", fmt.Sprintf("%s=%s %s %s %s %s", helperEnv, mode, root, study, grace, goFile))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	if err := os.WriteFile(goFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	var runs []helperRun
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		for line := range strings.Lines(outs[i].String()) {
			f := strings.Fields(line)
			if len(f) == 4 && f[0] == "ran" {
				tr, _ := strconv.Atoi(f[1])
				at, _ := strconv.Atoi(f[2])
				runs = append(runs, helperRun{tr, at, f[3]})
			}
		}
	}
	return runs
}

// Four OS processes over one folder run every trial of the budget exactly
// once, and search the same points as one process alone.
func TestProcessesRunBudgetExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, sampler := range []string{"random", "sobol"} {
		t.Run(sampler, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			st, err := fsstore.Open(root, fsstore.Options{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			const budget = 32
			for _, name := range []string{"solo", "quad"} {
				recOpen(t, st, name, recSpec(t, recContinuous, "minimize", sampler, "none", budget), 0)
			}
			solo := runHelpers(t, 1, "loop", root, "solo", time.Minute)
			quad := runHelpers(t, 4, "loop", root, "quad", time.Minute)
			for _, runs := range [][]helperRun{solo, quad} {
				count := map[int]int{}
				for _, r := range runs {
					count[r.trial]++
					if r.attempt != 0 {
						t.Errorf("trial %d ran as attempt %d", r.trial, r.attempt)
					}
				}
				for n := range budget {
					if count[n] != 1 {
						t.Errorf("trial %d ran %d times, want 1", n, count[n])
					}
				}
				if len(runs) != budget {
					t.Errorf("%d runs, want %d", len(runs), budget)
				}
			}
			points := func(runs []helperRun) []string {
				var p []string
				for _, r := range runs {
					p = append(p, r.point)
				}
				slices.Sort(p)
				return p
			}
			if !slices.Equal(points(solo), points(quad)) {
				t.Errorf("4 processes searched other points than 1:\n%v\n%v", points(quad), points(solo))
			}
			s := recOpen(t, st, "quad", nil, 0)
			fin, err := s.Finished(context.Background())
			if err != nil || len(fin) != budget {
				t.Errorf("Finished: %d, %v; want %d", len(fin), err, budget)
			}
		})
	}
}

// A stale attempt seen by several processes at the same moment is retried
// by exactly one of them.
func TestProcessesRetryStaleOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	st, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 1), grace)
	dead, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	waitStale(t, st, "s", grace, 0)
	runs := runHelpers(t, 4, "once", root, "s", grace)
	if len(runs) != 1 || runs[0].attempt != 1 || runs[0].point != dead.PointText() {
		t.Fatalf("runs = %+v, want one retry (attempt 1) of %s", runs, dead.PointText())
	}
	if err := dead.Finish(ctx, StateDone, -1, ""); !errors.Is(err, ErrSuperseded) {
		t.Errorf("late Finish = %v, want ErrSuperseded", err)
	}
	best, err := recOpen(t, st, "s", nil, grace).Best(ctx)
	if err != nil || best.Attempt != 1 || best.Score != 0 {
		t.Errorf("Best = %+v, %v; want attempt 1, score 0", best, err)
	}
}
