package slurm

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
)

// weirdArgs are arguments that break naive quoting.
var weirdArgs = []string{
	"", " ", "a b", "it's", `"dq"`, `it's "both"`, "$HOME", "${x}", "$(echo pwned)", "`id`",
	"{lr}", "{a,b}", "--lr={lr}", "*", "?", "[ab]", "~", "~root", "a\nb", "tab\there", `back\slash`,
	`\'`, "semi;colon", "&&", "|", "!", "!!", "#hash", "x#y", "é ü 世界", "-n", "--", "=", "A=b",
	"%", "%A_%a", "'", "''", "\x01\x7f", "trailing\\",
}

func trialArgv(t *testing.T, c TrialCommand) []string {
	t.Helper()
	argv, err := c.Argv()
	if err != nil {
		t.Fatalf("TrialCommand.Argv: %v", err)
	}
	return argv
}

func goldenScripts(t *testing.T) map[string]Script {
	return map[string]Script{
		"array": {
			Name:  "soma-spam",
			Array: "0-63%16",
			Time:  4 * time.Hour,
			Command: trialArgv(t, TrialCommand{
				Bin: "/opt/soma/bin/soma-trial", Root: "/scratch/soma", Study: "spam", Spec: "/home/me/spam.toml",
				Args:      []string{"--max-trials", "4"},
				Objective: []string{"python", "train.py", "--lr", "{lr}", "--batch", "{batch}"},
			}),
			LogDir: "/scratch/soma/slurm/spam",
			Sbatch: []string{"--partition=gpu", "--gres=gpu:1", "--cpus-per-task=4", "--mem=16G"},
			Setup:  []string{"module load cuda/12.4", "source /scratch/venv/bin/activate"},
			Note:   "soma slurm submit /scratch/soma --study spam --array 0-63%16 --time 4h\n-- python train.py --lr {lr} --batch {batch}",
		},
		"single": {
			Command: trialArgv(t, TrialCommand{Root: "/data/r", Study: "s", Objective: []string{"./objective"}}),
			LogDir:  "/data/r/logs",
		},
		"weird": {
			Name:      `it's a "job" #1 $x \ {lr}`,
			Array:     "1,3,5-9:2",
			Time:      26*time.Hour + 3*time.Minute + 4*time.Second + time.Millisecond,
			Grace:     90 * time.Second,
			NoRequeue: true,
			Command: trialArgv(t, TrialCommand{
				Root: "/scratch/my root", Study: "it's", Objective: append([]string{"python3", "-c", "import sys; print(sys.argv)"}, weirdArgs...),
			}),
			LogDir: `/tmp/log dir's $x %y`,
			Sbatch: []string{`--comment=a b\c 'd' "e" #f`, "--exclusive", "-pgpu"},
			Note:   "line one\n\tindented\n\nafter a blank",
		},
	}
}

func TestScriptGolden(t *testing.T) {
	for name, s := range goldenScripts(t) {
		t.Run(name, func(t *testing.T) {
			got, err := s.Render()
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			path := filepath.Join("testdata", "script-"+name+".sh")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./slurm -run TestScriptGolden -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render() differs from %s (go test ./slurm -run TestScriptGolden -update rewrites it); got:\n%s", path, got)
			}
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("bash -n %s: %v\n%s", path, err, out)
			}
			// sbatch reads exactly the #SBATCH lines we meant.
			var opts []string
			for l := range strings.Lines(string(got)) {
				if rest, ok := strings.CutPrefix(l, "#SBATCH "); ok {
					opts = append(opts, sbatchArgument(rest))
				}
			}
			if !containsAll(opts, "--job-name="+orDefault(s.Name, "soma"), "--open-mode=append") {
				t.Errorf("#SBATCH options = %q, want the job name and --open-mode=append", opts)
			}
			for _, o := range s.Sbatch {
				if !containsAll(opts, o) {
					t.Errorf("#SBATCH options = %q, want %q among them", opts, o)
				}
			}
		})
	}
}

func TestScriptShellcheck(t *testing.T) {
	_, err := exec.LookPath("shellcheck")
	testutil.Need(t, err == nil, "shellcheck (apt-get install shellcheck)")
	files, _ := filepath.Glob(filepath.Join("testdata", "script-*.sh"))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if out, err := exec.Command("shellcheck", "-s", "bash", "-S", "warning", f).CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", f, err, out)
			}
		})
	}
}

// TestScriptRunsWithBash runs a generated script with bash, outside
// Slurm: the exec'd program must receive exactly the argv it was given.
func TestScriptRunsWithBash(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "args.json")
	s := Script{
		Name:    "run me",
		Array:   "0-3",
		Command: helperCommand(t, "args", append([]string{out}, weirdArgs...)...),
		LogDir:  dir,
	}
	text, err := s.Render()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, text, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "x=EXPANDED"}
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash %s: %v\n%s", script, err, stdout)
	}
	if !strings.HasPrefix(string(stdout), "soma: job ?, restart 0, on ") {
		t.Errorf("script printed %q, want its header line", stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, weirdArgs) {
		t.Errorf("the program received %q, want %q", got, weirdArgs)
	}
}

func TestScriptErrors(t *testing.T) {
	ok := Script{Command: []string{"soma-trial"}, LogDir: "/logs"}
	with := func(f func(*Script)) Script { s := ok; f(&s); return s }
	tests := []struct {
		name string
		s    Script
		want string
	}{
		{"no command", with(func(s *Script) { s.Command = nil }), "no command to run"},
		{"empty program", with(func(s *Script) { s.Command = []string{""} }), "no command to run"},
		{"nul in arg", with(func(s *Script) { s.Command = []string{"x", "a\x00b"} }), "NUL byte"},
		{"no log dir", with(func(s *Script) { s.LogDir = "" }), `log dir "" is not an absolute path`},
		{"relative log dir", with(func(s *Script) { s.LogDir = "logs" }), `log dir "logs" is not an absolute path`},
		{"log dir with backslash", with(func(s *Script) { s.LogDir = `/a\b` }), "backslash"},
		{"log dir with newline", with(func(s *Script) { s.LogDir = "/a\nb" }), "control characters"},
		{"name with newline", with(func(s *Script) { s.Name = "a\nb" }), "job name"},
		{"bad array", with(func(s *Script) { s.Array = "3-1" }), "runs backwards"},
		{"negative time", with(func(s *Script) { s.Time = -time.Second }), "negative"},
		{"negative grace", with(func(s *Script) { s.Grace = -time.Second }), "grace -1s is negative"},
		{"grace too long", with(func(s *Script) { s.Grace = 20 * time.Hour }), "Slurm's limit"},
		{"grace not below time", with(func(s *Script) { s.Time = time.Minute; s.Grace = time.Minute }), "not shorter than the time limit"},
		{"default grace not below time", with(func(s *Script) { s.Time = 90 * time.Second }), "grace 2m0s is not shorter"},
		{"option without dash", with(func(s *Script) { s.Sbatch = []string{"partition=gpu"} }), "does not start with '-'"},
		{"option with space", with(func(s *Script) { s.Sbatch = []string{"--partition gpu"} }), "write --name=value"},
		{"option with newline", with(func(s *Script) { s.Sbatch = []string{"--comment=a\nb"} }), "one line"},
		{"owned --array", with(func(s *Script) { s.Sbatch = []string{"--array=0-3"} }), "set by soma from the array"},
		{"owned -a", with(func(s *Script) { s.Sbatch = []string{"-a0-3"} }), "set by soma from the array"},
		{"owned --time", with(func(s *Script) { s.Sbatch = []string{"--time=5"} }), "the time limit"},
		{"owned -t", with(func(s *Script) { s.Sbatch = []string{"-t10"} }), "the time limit"},
		{"owned --signal", with(func(s *Script) { s.Sbatch = []string{"--signal=USR2@60"} }), "the grace"},
		{"owned --output", with(func(s *Script) { s.Sbatch = []string{"--output=x"} }), "the log directory"},
		{"owned -e", with(func(s *Script) { s.Sbatch = []string{"-e", "x"} }), "the log directory"},
		{"owned --no-requeue", with(func(s *Script) { s.Sbatch = []string{"--no-requeue"} }), "requeue"},
		{"owned -J", with(func(s *Script) { s.Sbatch = []string{"-Jname"} }), "the job name"},
		{"owned --wrap", with(func(s *Script) { s.Sbatch = []string{"--wrap=true"} }), "the command"},
		{"empty setup line", with(func(s *Script) { s.Setup = []string{"  "} }), "setup line"},
		{"setup with newline", with(func(s *Script) { s.Setup = []string{"module load a\nmodule load b"} }), "one shell line per entry"},
		{"setup that execs", with(func(s *Script) { s.Setup = []string{"exec python x.py"} }), "soma execs soma-trial itself"},
		{"note with control", with(func(s *Script) { s.Note = "a\x1bb" }), "note"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.s.Render()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render() error = %v, want one containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "slurm: ") {
				t.Errorf("error %q does not name the package", err)
			}
		})
	}
	if _, err := ok.Render(); err != nil {
		t.Fatalf("the valid base script: %v", err)
	}
}

func TestTrialCommandArgv(t *testing.T) {
	tests := []struct {
		name    string
		c       TrialCommand
		want    []string
		wantErr string
	}{
		{name: "minimal", c: TrialCommand{Root: "/r", Study: "s", Objective: []string{"obj"}},
			want: []string{"soma-trial", "--root", "/r", "--study", "s", "--", "obj"}},
		{name: "everything", c: TrialCommand{Bin: "/bin/st", Root: "/r", Study: "s", Spec: "/r/s.toml", Args: []string{"--max-trials", "2"}, Objective: []string{"python", "t.py", "{lr}"}},
			want: []string{"/bin/st", "--root", "/r", "--study", "s", "--spec", "/r/s.toml", "--max-trials", "2", "--", "python", "t.py", "{lr}"}},
		{name: "relative root", c: TrialCommand{Root: "r", Study: "s", Objective: []string{"o"}}, wantErr: `root "r" is not an absolute path`},
		{name: "no study", c: TrialCommand{Root: "/r", Objective: []string{"o"}}, wantErr: "no study"},
		{name: "relative spec", c: TrialCommand{Root: "/r", Study: "s", Spec: "s.toml", Objective: []string{"o"}}, wantErr: `spec "s.toml"`},
		{name: "no objective", c: TrialCommand{Root: "/r", Study: "s"}, wantErr: "no objective command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.Argv()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Argv() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Argv() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestDurationFormat(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{time.Second, "00:00:01"},
		{time.Millisecond, "00:00:01"},
		{90 * time.Minute, "01:30:00"},
		{24 * time.Hour, "1-00:00:00"},
		{50*time.Hour + 59*time.Second, "2-02:00:59"},
	}
	for _, tc := range tests {
		if got := slurmDuration(tc.in); got != tc.want {
			t.Errorf("slurmDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzQuote: shellQuote must read back as the same word in bash's rules,
// and sbatchQuote in sbatch's.
func FuzzQuote(f *testing.F) {
	for _, a := range weirdArgs {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			return
		}
		q := shellQuote(s)
		if got, err := bashWord(q); err != nil || got != s {
			t.Fatalf("bashWord(shellQuote(%q) = %q) = %q, %v", s, q, got, err)
		}
		if hasControl(s) {
			return // never on an #SBATCH line: Render refuses it
		}
		q = sbatchQuote(s)
		if got := sbatchArgument(q + " trailing"); got != s {
			t.Fatalf("sbatchArgument(sbatchQuote(%q) = %q) = %q", s, q, got)
		}
	})
}

// bashWord reads one bash word made of safe characters, '...' and $'...'
// strings and backslash escapes, the only forms shellQuote writes.
// TestScriptRunsWithBash checks real bash agrees.
func bashWord(w string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c == '$' && i+1 < len(w) && w[i+1] == '\'':
			i += 2
			for ; i < len(w) && w[i] != '\''; i++ {
				if w[i] != '\\' {
					b.WriteByte(w[i])
					continue
				}
				if i+1 == len(w) {
					return "", errors.New("unterminated escape")
				}
				i++
				switch w[i] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case '\\', '\'':
					b.WriteByte(w[i])
				case 'x':
					n, err := strconv.ParseUint(w[i+1:min(i+3, len(w))], 16, 8)
					if err != nil {
						return "", err
					}
					b.WriteByte(byte(n))
					i += 2
				default:
					return "", errors.New("unknown escape")
				}
			}
			if i == len(w) {
				return "", errors.New("unterminated $' quote")
			}
		case c == '\'':
			j := strings.IndexByte(w[i+1:], '\'')
			if j < 0 {
				return "", errors.New("unterminated quote")
			}
			b.WriteString(w[i+1 : i+1+j])
			i += j + 1
		case c == '\\':
			if i+1 == len(w) {
				return "", errors.New("trailing backslash")
			}
			i++
			b.WriteByte(w[i])
		case isSafeWord(string(c)):
			b.WriteByte(c)
		default:
			return "", errors.New("unquoted special character " + string(c))
		}
	}
	return b.String(), nil
}

// sbatchArgument reads the first argument of an #SBATCH line's rest the way
// sbatch's _get_argument does (sbatch/opt.c): leading blanks skipped; a
// backslash escapes the next character, even inside quotes; ' and " quote;
// an unquoted blank or # ends the argument. TestSlurmScriptQuoting checks
// the real sbatch agrees on the cases that matter.
func sbatchArgument(line string) string {
	line = strings.TrimLeft(line, " \t")
	var b strings.Builder
	var quote byte
	escaped := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\n' || c == '\r':
			return b.String()
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
			continue
		case quote != 0:
			if c == quote {
				quote = 0
				continue
			}
		case c == '\'' || c == '"':
			quote = c
			continue
		case c == '#' || c == ' ' || c == '\t':
			return b.String()
		}
		b.WriteByte(c)
	}
	return b.String()
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			found = found || l == w
		}
		if !found {
			return false
		}
	}
	return true
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// A failing setup line ends the task before the command runs; the lines
// before it have run.
func TestScriptSetupRunsFirstAndStopsOnFailure(t *testing.T) {
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	for _, tc := range []struct {
		name    string
		setup   []string
		wantRan string
		wantErr bool
	}{
		{"setup then command", []string{"echo setup >> " + marks}, "setup\ncommand\n", false},
		{"failing setup stops the task", []string{"echo setup >> " + marks, "false", "echo after >> " + marks}, "setup\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marks)
			text, err := Script{Command: []string{"bash", "-c", "echo command >> " + marks}, LogDir: dir, Setup: tc.setup}.Render()
			if err != nil {
				t.Fatal(err)
			}
			script := filepath.Join(dir, "job.sh")
			os.WriteFile(script, text, 0o755)
			err = exec.Command("bash", script).Run()
			got, _ := os.ReadFile(marks)
			if string(got) != tc.wantRan || (err != nil) != tc.wantErr {
				t.Errorf("ran %q (err %v), want %q (err %v)", got, err, tc.wantRan, tc.wantErr)
			}
		})
	}
}
