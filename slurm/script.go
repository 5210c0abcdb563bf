package slurm

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// DefaultGrace is how long before the time limit Slurm signals the job
// when Script.Grace is zero: Hydra's submitit launcher uses 120 s too, and
// Slurm may send the signal up to a minute early or late (sbatch(1); on
// Slurm 22.05, --time=1 with USR1@5 signalled 25 to 32 s after the start,
// not 55 s), so much less risks no warning at all.
const DefaultGrace = 2 * time.Minute

// maxGrace is the largest --signal lead time Slurm stores (a uint16 of
// seconds).
const maxGrace = 65535 * time.Second

// Script is the sbatch script `soma slurm submit` writes beside a study, so
// that it can be read, audited and resubmitted unchanged. Render turns it
// into text; the zero values of the optional fields give soma's defaults.
type Script struct {
	// Command is the program the job runs, as an argv; the batch shell
	// execs it (see Render). TrialCommand.Argv builds soma-trial's.
	Command []string
	// LogDir is the absolute directory of the job's logs. Slurm opens the
	// log before the script runs and does not create directories: the
	// directory must exist when a task starts.
	LogDir string
	// Name is the job name squeue shows (--job-name); "" means "soma".
	Name string
	// Array is the --array value, like "0-63%16"; "" submits one job.
	Array string
	// Time is the time limit (--time), rounded up to whole seconds (Slurm
	// itself counts whole minutes); zero leaves the partition's default.
	Time time.Duration
	// Grace is how long before the time limit the batch shell receives
	// SIGUSR1 (--signal=B:USR1@secs); zero means DefaultGrace. It must be
	// shorter than Time when Time is set.
	Grace time.Duration
	// NoRequeue writes --no-requeue instead of --requeue. soma retries an
	// interrupted trial from any later task either way.
	NoRequeue bool
	// Sbatch holds further sbatch options, each written on its own #SBATCH
	// line, like "--partition=gpu" or "--gres=gpu:1". Options that the
	// fields above set are refused.
	Sbatch []string
	// Note is free text for the script's header comment, such as the
	// command that wrote it; it may span lines.
	Note string
	// Setup holds shell lines run before the exec, one line each, like
	// "module load cuda/12.4" or "source /scratch/venv/bin/activate". They
	// run under 'set -e': a failing line ends the task before soma-trial
	// starts. They must not start background work or trap signals.
	Setup []string
}

// TrialCommand is the soma-trial command line that a Script runs.
type TrialCommand struct {
	Bin       string   // the soma-trial program; "" means "soma-trial" on the node's PATH
	Root      string   // absolute path of the store's root folder (--root)
	Study     string   // the study's name (--study)
	Spec      string   // optional absolute path of the study's spec file (--spec)
	Args      []string // more soma-trial flags, like "--max-trials", "4"
	Objective []string // the user's objective command, after "--"
}

// Argv returns the command as an argv. Paths must be absolute because the
// job may start in another directory than the one it was submitted from.
func (c TrialCommand) Argv() ([]string, error) {
	var errs []error
	if c.Root == "" || !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("slurm: trial command: root %q is not an absolute path (the job may start in another directory)", c.Root))
	}
	if c.Study == "" {
		errs = append(errs, errors.New("slurm: trial command: no study (name one)"))
	}
	if c.Spec != "" && !filepath.IsAbs(c.Spec) {
		errs = append(errs, fmt.Errorf("slurm: trial command: spec %q is not an absolute path (the job may start in another directory)", c.Spec))
	}
	if len(c.Objective) == 0 || c.Objective[0] == "" {
		errs = append(errs, errors.New("slurm: trial command: no objective command (give it after --)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	bin := c.Bin
	if bin == "" {
		bin = "soma-trial"
	}
	argv := []string{bin, "--root", c.Root, "--study", c.Study}
	if c.Spec != "" {
		argv = append(argv, "--spec", c.Spec)
	}
	argv = append(argv, c.Args...)
	argv = append(argv, "--")
	return append(argv, c.Objective...), nil
}

// ownedOption reports whether opt is an sbatch option that a Script sets
// from its fields, and names what to give instead.
func ownedOption(opt string) (field string, owned bool) {
	name, _, _ := strings.Cut(opt, "=")
	switch name {
	case "--array":
		return "the array", true
	case "--time":
		return "the time limit", true
	case "--signal":
		return "the grace before the time limit", true
	case "--requeue", "--no-requeue":
		return "requeue (on by default)", true
	case "--output", "--error", "--open-mode":
		return "the log directory", true
	case "--job-name":
		return "the job name", true
	case "--wrap":
		return "the command", true
	case "--parsable":
		return "how sbatch's output is read", true
	}
	// Short options may carry their value attached: -t10, -o/path.
	if len(opt) >= 2 && opt[0] == '-' && opt[1] != '-' {
		switch opt[1] {
		case 'a':
			return "the array", true
		case 't':
			return "the time limit", true
		case 'o', 'e':
			return "the log directory", true
		case 'J':
			return "the job name", true
		}
	}
	return "", false
}

// Render validates s and returns the script's text: a bash script whose
// #SBATCH lines carry the job's options, and whose body execs Command.
// Every argument is quoted for bash, and every #SBATCH value for sbatch's
// own parser (which honours quotes but also treats backslashes as escapes
// inside them). Render is deterministic: the same Script gives the same
// bytes.
func (s Script) Render() ([]byte, error) {
	c, err := s.check()
	if err != nil {
		return nil, err
	}
	return s.write(c), nil
}

// checked is what check derives from a valid Script for write.
type checked struct {
	name      string // the job's name ("soma" when none is given)
	array     Array  // parsed s.Array (zero when none)
	graceSecs int64  // the grace before the time limit, whole seconds
}

// check validates s, naming every problem at once.
func (s Script) check() (checked, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("slurm: script: "+format, a...)) }

	if len(s.Command) == 0 || s.Command[0] == "" {
		bad("no command to run")
	}
	for i, a := range s.Command {
		if strings.ContainsRune(a, 0) {
			bad("command argument %d %q contains a NUL byte, which no program can receive", i, a)
		}
	}
	name := s.Name
	if name == "" {
		name = "soma"
	}
	if hasControl(name) {
		bad("job name %q contains control characters (use printable text)", name)
	}
	var array Array
	if s.Array != "" {
		a, err := ParseArray(s.Array)
		if err != nil {
			errs = append(errs, err)
		}
		array = a
	}
	switch {
	case s.LogDir == "" || !filepath.IsAbs(s.LogDir):
		bad("log dir %q is not an absolute path (the job may start in another directory)", s.LogDir)
	case hasControl(s.LogDir):
		bad("log dir %q contains control characters (choose another directory)", s.LogDir)
	case strings.Contains(s.LogDir, `\`):
		// sbatch(1), filename pattern: a backslash turns off %A, %a, %j.
		bad("log dir %q contains a backslash, which stops Slurm expanding %%A_%%a in log names (choose another directory)", s.LogDir)
	}
	if s.Time < 0 {
		bad("time limit %v is negative", s.Time)
	}
	grace := s.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	graceSecs := ceilSeconds(grace)
	switch {
	case grace < 0:
		bad("grace %v is negative", s.Grace)
	case grace > maxGrace:
		bad("grace %v is longer than Slurm's limit of %v", grace, maxGrace)
	case s.Time > 0 && graceSecs >= ceilSeconds(s.Time):
		bad("grace %v is not shorter than the time limit %v (shorten the grace or raise the limit)", grace, s.Time)
	}
	for _, o := range s.Sbatch {
		optName, _, _ := strings.Cut(o, "=")
		switch field, owned := ownedOption(o); {
		case !strings.HasPrefix(o, "-"):
			bad("sbatch option %q does not start with '-' (write options like --partition=gpu)", o)
		case hasControl(o):
			bad("sbatch option %q contains control characters (an #SBATCH line holds one line)", o)
		case strings.ContainsAny(optName, " \t"):
			bad("sbatch option %q has a space in its name (write --name=value, like --partition=gpu)", o)
		case owned:
			bad("sbatch option %q is set by soma from %s; give that instead", o, field)
		}
	}
	for _, l := range s.Setup {
		switch t := strings.TrimSpace(l); {
		case t == "":
			bad("setup line %q is empty", l)
		case hasControl(strings.ReplaceAll(l, "\t", "")):
			bad("setup line %q contains control characters (give one shell line per entry)", l)
		case t == "exec" || strings.HasPrefix(t, "exec "):
			bad("setup line %q execs: soma execs soma-trial itself, after the setup", l)
		}
	}
	if hasControl(strings.ReplaceAll(strings.ReplaceAll(s.Note, "\n", ""), "\t", "")) {
		bad("note %q contains control characters other than newlines and tabs", s.Note)
	}
	if err := errors.Join(errs...); err != nil {
		return checked{}, err
	}
	return checked{name: name, array: array, graceSecs: graceSecs}, nil
}

// write returns the script's text for s, which check has passed.
func (s Script) write(c checked) []byte {
	name, array, graceSecs := c.name, c.array, c.graceSecs
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	sbatch := func(opt string) {
		if n, v, ok := strings.Cut(opt, "="); ok {
			line("#SBATCH %s=%s", sbatchQuote(n), sbatchQuote(v))
		} else {
			line("#SBATCH %s", sbatchQuote(opt))
		}
	}

	line("#!/bin/bash")
	if note := strings.TrimRight(s.Note, "\n"); note != "" {
		for _, l := range strings.Split(note, "\n") {
			line("%s", strings.TrimRight("# "+l, " "))
		}
		line("#")
	}
	line("# An sbatch script written by soma. Submit it, or submit it again later, with")
	line("#   sbatch THIS-FILE")
	line("# Options given to sbatch on its command line override the #SBATCH lines,")
	line("# which sbatch reads only up to the first command.")
	line("")
	sbatch("--job-name=" + name)
	if s.Array != "" {
		n := array.Len()
		if array.Throttle > 0 {
			line("# %d array tasks, at most %d running at once (the %%%d).", n, array.Throttle, array.Throttle)
		} else {
			line("# %d array tasks, as many at once as the cluster allows (add %%N to cap it).", n)
		}
		sbatch("--array=" + array.String())
	}
	if s.Time > 0 {
		line("# The time limit of each task.")
		sbatch("--time=" + slurmDuration(s.Time))
	}
	line("# About %d s before the time limit, Slurm sends SIGUSR1 to the batch shell", graceSecs)
	line("# (\"B:\"); soma-trial then records its trial as interrupted, so that it is")
	line("# retried, and exits. Slurm keeps this time only to within about a minute.")
	sbatch(fmt.Sprintf("--signal=B:USR1@%d", graceSecs))
	if s.NoRequeue {
		line("# Slurm does not start a task again after a node failure or preemption;")
		line("# other tasks retry its interrupted trial.")
		sbatch("--no-requeue")
	} else {
		line("# After a node failure or preemption Slurm may start a task again from the")
		line("# top, with the same ids; SLURM_RESTART_COUNT counts the restarts.")
		sbatch("--requeue")
	}
	logDir := strings.ReplaceAll(filepath.Clean(s.LogDir), "%", "%%")
	if s.Array != "" {
		line("# One log per task, stdout and stderr together: <array job id>_<task index>.out.")
		sbatch("--output=" + logDir + "/%A_%a.out")
	} else {
		line("# One log, stdout and stderr together: <job id>.out.")
		sbatch("--output=" + logDir + "/%j.out")
	}
	line("# Append, so that a task started again keeps the output of its earlier runs.")
	sbatch("--open-mode=append")
	if len(s.Sbatch) > 0 {
		line("# Options given to soma:")
		for _, o := range s.Sbatch {
			sbatch(o)
		}
	}
	line("")
	line(`echo "soma: job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_JOB_ID:+ (task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}, restart ${SLURM_RESTART_COUNT:-0}, on ${SLURMD_NODENAME:-$(hostname)}, $(date '+%%F %%T')"`)
	line("")
	if len(s.Setup) > 0 {
		line("# Setup given to soma; a failing line ends the task before soma-trial starts.")
		line("set -e")
		for _, l := range s.Setup {
			line("%s", l)
		}
		line("set +e")
		line("")
	}
	line("# exec replaces this shell by the command, in the same process. It has to:")
	line("# --signal=B:USR1 signals the batch shell only, never its children, and a")
	line("# shell would run a trap only after its foreground child ended. After exec")
	line("# the command is the batch shell, so it receives USR1 itself. Nothing after")
	line("# this line runs.")
	quoted := make([]string, len(s.Command))
	for i, a := range s.Command {
		quoted[i] = shellQuote(a)
	}
	line("exec %s", strings.Join(quoted, " "))
	return []byte(b.String())
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// slurmDuration formats d as [days-]hours:minutes:seconds, one of the
// forms sbatch --time takes.
func slurmDuration(d time.Duration) string {
	s := ceilSeconds(d)
	days, s := s/86400, s%86400
	hms := fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
	if days > 0 {
		return fmt.Sprintf("%d-%s", days, hms)
	}
	return hms
}

// isSafeWord reports whether s needs no quoting in bash or in sbatch's
// #SBATCH parser: letters, digits and _@%+=:,./- only.
func isSafeWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("_@%+=:,./-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ShellQuote returns s as one word for any POSIX shell (sh, dash, bash,
// zsh): unchanged when it holds only letters, digits and _@%+=:,./-,
// else in single quotes, inside which a POSIX shell expands nothing and
// keeps every byte as is (a newline, non-ASCII text). A single quote
// cannot appear inside single quotes, so each one closes the quotes, adds
// an escaped quote and reopens them; the empty string is two quotes:
//
//	it's  ->  'it'\''s'
//	""    ->  ''
//
// (The examples are in a code block because gofmt turns two single
// quotes in a doc comment's prose into a typographic quote.)
//
// It is the one quoting rule of soma; shellQuote and sbatchQuote add to it
// only what their readers need.
func ShellQuote(s string) string {
	if isSafeWord(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellQuote quotes s for the generated script, which bash runs: as
// ShellQuote, except that text with control characters (a newline, a
// tab) is written in bash's $'...' form, with escapes, so that the exec
// line stays one readable line:
//
//	a<newline>b  ->  $'a\nb'
//
// ($'...' is bash's, not POSIX's: dash prints it as is. That is why
// ShellQuote, for text a user pastes into any shell, does not use it.)
func shellQuote(s string) string {
	if !hasControl(s) {
		return ShellQuote(s)
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(&b, `\x%02x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sbatchQuote quotes s for an #SBATCH line. sbatch's parser (sbatch/opt.c,
// _get_argument) honours single and double quotes but treats a backslash
// as an escape even inside quotes, so backslashes are doubled first; the
// rest is ShellQuote's recipe, which that parser reads the same way.
func sbatchQuote(s string) string {
	return ShellQuote(strings.ReplaceAll(s, `\`, `\\`))
}

// hasControl reports whether s contains a control character (newline
// included) or a NUL.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
