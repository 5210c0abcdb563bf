package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 16: what a user typed was checked late, or not at all. A missing
// --root exited 1 without the usage hint; a bad study name or a {typo}
// was refused only after the store (or the study) was created; --lease
// 1ms, negative durations and counts, and --trial out of the budget were
// taken. Each is now refused with exit 2, the hint, and nothing made.
func TestEverythingTypedIsCheckedBeforeTheStoreIsMade(t *testing.T) {
	spec := []string{"--param", "x=float:0:1", "--budget", "3", "--direction", "minimize", "--sampler", "random"}
	tests := []struct {
		name  string
		flags []string // after --root R (unless noRoot)
		argv  []string
		want  string
	}{
		{"no root", nil, []string{"true"}, "--root is required"},
		{"no study", spec, []string{"true"}, "--study is required"},
		{"dot-dot study", append([]string{"--study", ".."}, spec...), []string{"true"}, `starts with '.'`},
		{"non-ASCII study", append([]string{"--study", "ünï"}, spec...), []string{"true"}, `character 'ü'`},
		{"placeholder typo", append([]string{"--study", "s"}, spec...), []string{"echo", "{xx}"}, "{xx} is not a parameter"},
		{"lease too short", append([]string{"--study", "s", "--lease", "1ms"}, spec...), []string{"true"}, "--lease 1ms: want at least 1s"},
		{"negative lease", append([]string{"--study", "s", "--lease", "-5s"}, spec...), []string{"true"}, "--lease -5s"},
		// Bucket times are whole seconds: a lease under 3 s could see a
		// live trial stale (checked before any request to the bucket).
		{"bucket lease too short", append([]string{"--study", "s", "--lease", "2s"}, spec...), []string{"true"}, "--lease 2s: want at least 3s on a bucket"},
		{"negative timeout", append([]string{"--study", "s", "--timeout", "-1s"}, spec...), []string{"true"}, "--timeout -1s: want 0 (no limit) or more"},
		{"negative kill-grace", append([]string{"--study", "s", "--kill-grace", "-1s"}, spec...), []string{"true"}, "--kill-grace -1s"},
		{"parallel 0", append([]string{"--study", "s", "--parallel", "0"}, spec...), []string{"true"}, "--parallel 0: want at least 1"},
		{"negative max-trials", append([]string{"--study", "s", "--max-trials", "-2"}, spec...), []string{"true"}, "--max-trials -2"},
		{"negative trial", append([]string{"--study", "s", "--trial", "-5"}, spec...), []string{"true"}, "--trial -5"},
		{"trial beyond the budget", append([]string{"--study", "s", "--trial", "999"}, spec...), []string{"true"}, "--trial 999: the study runs 3 trials, numbered 0 to 2"},
		{"budget in flag syntax", []string{"--study", "s", "--param", "x=float:0:1", "--direction", "minimize"}, []string{"true"}, "(e.g. --budget 100)"},
		// Issue 21: several objectives by flags; counts must match.
		{"directions without metrics", []string{"--study", "s", "--param", "x=float:0:1", "--budget", "3", "--direction", "minimize,maximize"}, []string{"true"}, "2 objectives need names: add --metrics NAME,NAME"},
		{"metrics count", []string{"--study", "s", "--param", "x=float:0:1", "--budget", "3", "--direction", "minimize", "--direction", "maximize", "--metrics", "error"}, []string{"true"}, "--direction has 2 entries (minimize,maximize) but --metrics has 1 (error)"},
		{"metrics with --spec", []string{"--study", "s", "--spec", "x.toml", "--metrics", "a,b"}, []string{"true"}, "--metrics goes with --param"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			args := tc.flags
			switch tc.name {
			case "no root":
			case "bucket lease too short":
				args = append([]string{"--root", "s3://no-such-bucket/x"}, args...)
			default:
				args = append([]string{"--root", root}, args...)
			}
			c := exec.Command(bin, append(append(args, "--"), tc.argv...)...)
			c.Env = append(os.Environ(), "SOMA_ROOT=")
			var stderr bytes.Buffer
			c.Stderr = &stderr
			c.Run()
			got := c.ProcessState.ExitCode()
			if got != exitUsage || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "(see soma-trial --help)") {
				t.Errorf("exit %d, stderr %q; want %d with %q and the --help hint", got, stderr.String(), exitUsage, tc.want)
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the root was made (%v) before the usage error", err)
			}
		})
	}
}

// Issue 16: a joining process (no spec) is checked against the study's
// spec before it runs anything: a {typo} and a --trial beyond the budget
// exit 2. Joining a root that does not exist does not create it.
func TestJoinIsCheckedAgainstTheStudy(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if code, out := echoTrial(t, root, "--param", "x=float:0:1", "--budget", "2", "--sampler", "random"); code != exitOK {
		t.Fatalf("create: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trial", "2", "--", "/bin/echo", "1"}, "--trial 2: the study runs 2 trials, numbered 0 to 1"},
		{[]string{"--", "/bin/echo", "{y}"}, "{y} is not a parameter (parameters: x;"},
	} {
		c := exec.Command(bin, append([]string{"--root", root, "--study", "s"}, tc.args...)...)
		out, _ := c.CombinedOutput()
		if c.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: exit %d, %s; want %d with %q", tc.args, c.ProcessState.ExitCode(), out, exitUsage, tc.want)
		}
	}
	// A discrete space of 2 points runs 2 trials, whatever the budget.
	c := exec.Command(bin, "--root", filepath.Join(t.TempDir(), "d"), "--study", "s", "--param", "x=int:0:1", "--budget", "5",
		"--sampler", "random", "--trial", "3", "--", "/bin/echo", "1")
	if out, _ := c.CombinedOutput(); c.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "--trial 3: the study runs 2 trials, numbered 0 to 1") {
		t.Errorf("--trial 3 of a 2-point space: exit %d, %s", c.ProcessState.ExitCode(), out)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	c = exec.Command(bin, "--root", missing, "--study", "s", "--", "/bin/echo", "1")
	out, _ := c.CombinedOutput()
	if c.ProcessState.ExitCode() != exitError {
		t.Errorf("join of a missing root: exit %d, %s; want %d", c.ProcessState.ExitCode(), out, exitError)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("joining a missing root made it (%v)", err)
	}
}

// Issue 16: soma-trial exited 0 when every trial it ran failed, so a
// Slurm array task whose objective always fails looked like a success.
// It exits exitAllFailed, and a single success among failures is 0.
func TestEveryTrialFailedHasItsOwnExitStatus(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	run := func(script string) (int, string) {
		c := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1", "--budget", "2", "--sampler", "random",
			"--", "/bin/sh", "-c", script)
		out, _ := c.CombinedOutput()
		return c.ProcessState.ExitCode(), string(out)
	}
	code, out := run("echo 'ModuleNotFoundError: numpy' >&2; exit 1")
	if code != exitAllFailed || !strings.Contains(out, "every trial this process ran failed") {
		t.Errorf("all failed: exit %d\n%s\nwant %d", code, out, exitAllFailed)
	}
	root = filepath.Join(t.TempDir(), "root2")
	if code, out := run(`[ "$SOMA_TRIAL" = 0 ] && exit 1; echo 1`); code != exitOK {
		t.Errorf("one of two failed: exit %d\n%s\nwant 0", code, out)
	}
	if !strings.Contains(string(mustHelp(t)), "4 every trial this process ran failed") {
		t.Error("--help does not document exit status 4")
	}
}

func mustHelp(t *testing.T) []byte {
	t.Helper()
	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Issue 16: --budget showed "(default: 0)", a value it refuses, and
// --trial "(default: -1)". Each flag shows one default, never one that
// would be refused.
func TestHelpDefaultsAreMeant(t *testing.T) {
	for _, line := range strings.Split(string(mustHelp(t)), "\n") {
		if strings.Count(line, "(default") > 1 || strings.Contains(line, "(default: -1)") ||
			strings.Contains(line, "--budget") && strings.Contains(line, "(default: 0)") {
			t.Errorf("help line: %s", strings.TrimSpace(line))
		}
	}
}
