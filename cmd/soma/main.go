// Command soma shows and tends the studies in a soma folder: status (with
// --watch), trials, best, logs, report, init and gc. Everything it shows
// is read out of the folder; it needs no daemon and no server.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/study"
	"github.com/urfave/cli/v2"
)

// Exit statuses (documented in --help).
const (
	exitOK    = 0 // done
	exitError = 1 // an error: a missing or foreign root, an unknown study, a failed read
	exitUsage = 2 // bad flags or arguments
)

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// usageError is a mistake on the command line; it exits with exitUsage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

const appDescription = `soma shows the studies that soma-trial runs in a folder (the "root": the
--root of soma-trial, usually on a shared filesystem). Everything is read
out of the folder: no daemon, no server, nothing to start. Run it from a
login node while 64 array tasks work, or from your laptop.

   soma status /scratch/$USER/soma                 what is happening, now
   soma status /scratch/$USER/soma --watch         ... and as it changes
   soma best   /scratch/$USER/soma --study lr      the best point so far
   soma report /scratch/$USER/soma --study lr -o report.html
   soma run --worker http://node12:7070 plan.toml  a plan on a soma-worker

Run 'soma COMMAND --help' for a command's flags and examples.

EXIT STATUS: 0 ok; 1 error (a missing root, a folder that is not a store,
an unknown study, a failed read: one line on stderr says which, and what
to do); 2 bad usage (flags, arguments).`

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                   "soma",
		Usage:                  "see and tend the studies in a soma folder",
		UsageText:              "soma COMMAND ROOT [flags]",
		Description:            appDescription,
		Writer:                 stdout,
		ErrWriter:              stderr,
		HideHelpCommand:        true,
		UseShortOptionHandling: false,
		// Repeated flags keep commas: --sbatch-opt=--gres=gpu:1,mps:2 is one
		// option, --setup 'module load a,b' one line.
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Action: func(c *cli.Context) error {
			switch first := c.Args().First(); {
			case first == "help" && c.NArg() == 2 && c.App.Command(c.Args().Get(1)) != nil:
				return cli.ShowCommandHelp(c, c.Args().Get(1))
			case first == "help" && c.NArg() == 1:
				return cli.ShowAppHelp(c)
			case c.Args().Present():
				return usagef("unknown command %q (commands: status, trials, best, logs, report, init, extend, enqueue, fork, rm, gc, slurm, zarr, run)", first)
			}
			if err := cli.ShowAppHelp(c); err != nil {
				return err
			}
			return usagef("no command given")
		},
		Commands: []*cli.Command{
			newStatusCommand(),
			newTrialsCommand(),
			newBestCommand(),
			newLogsCommand(),
			newReportCommand(),
			newInitCommand(),
			newExtendCommand(),
			newEnqueueCommand(),
			newForkCommand(),
			newRmCommand(),
			newGCCommand(),
			newSlurmCommand(),
			newZarrCommand(),
			newWorkersCommand(),
			newRunCommand(),
		},
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError{err} }
		for _, sub := range cmd.Subcommands {
			sub.OnUsageError = cmd.OnUsageError
		}
	}
	return app
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, reorder(app, args))
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "soma: %s (see soma %s--help)\n", oneLine(err.Error()), commandOf(app, args))
		return exitUsage
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintln(stderr, "soma: interrupted")
		return exitError
	default:
		fmt.Fprintf(stderr, "soma: %s\n", strings.TrimRight(err.Error(), "\n"))
		return exitError
	}
}

// oneLine folds a message onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// commandOf returns "status " when args name a command, else "".
func commandOf(app *cli.App, args []string) string {
	if len(args) > 1 {
		if cmd := app.Command(args[1]); cmd != nil {
			return cmd.Name + " "
		}
	}
	return ""
}

// reorder moves a command's flags before its arguments, so that the
// documented order "soma status ROOT --study S" works: urfave/cli (like
// Go's flag package) stops parsing flags at the first argument. Flags
// that take a value take the next word with them; "--" ends the flags.
func reorder(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	if len(cmd.Subcommands) > 0 {
		// "soma slurm submit ROOT --study S": reorder the subcommand's words.
		if len(args) < 3 {
			return args
		}
		sub := cmd.Command(args[2])
		if sub == nil {
			return args
		}
		inner := reorderFlags(sub, args[3:])
		return append([]string{args[0], args[1], args[2]}, inner...)
	}
	return append([]string{args[0], args[1]}, reorderFlags(cmd, args[2:])...)
}

// reorderFlags puts cmd's flags in rest before its positional words.
func reorderFlags(cmd *cli.Command, rest []string) []string {
	takesValue := make(map[string]bool)
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' || isNumber(a) {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if takesValue[name] && !hasValue && i+1 < len(rest) {
			flags = append(flags, rest[i+1])
			i++
		}
	}
	out := flags
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

// isNumber reports whether a looks like a negative number (an argument,
// not a flag).
func isNumber(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	for _, c := range a[1:] {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// rootArg returns the command's ROOT argument and checks the count of the
// others.
func rootArg(c *cli.Context, extra int) (string, error) {
	n := c.NArg()
	switch {
	case n == 0:
		return "", usagef("no ROOT: give the study folder, e.g. soma %s /scratch/$USER/soma", c.Command.Name)
	case n > 1+extra:
		return "", usagef("too many arguments: %q", c.Args().Slice()[1+extra:])
	}
	return c.Args().First(), nil
}

// needStudy returns --study, which the command requires.
func needStudy(c *cli.Context) (string, error) {
	s := c.String("study")
	if s == "" {
		return "", usagef("--study is required: name the study (soma status ROOT lists them)")
	}
	return s, nil
}

// rootAndStudy returns the ROOT argument (extra more arguments allowed)
// and --study, both required.
func rootAndStudy(c *cli.Context, extra int) (root, name string, err error) {
	if root, err = rootArg(c, extra); err != nil {
		return "", "", err
	}
	if name, err = needStudy(c); err != nil {
		return "", "", err
	}
	return root, name, nil
}

// openStudy opens the store at root for reading, and study name in it.
// The caller closes the store.
func openStudy(c *cli.Context, root, name string, lease time.Duration) (*status.Store, *study.Study, error) {
	s, err := status.Open(root)
	if err != nil {
		return nil, nil, err
	}
	st, err := status.OpenStudy(c.Context, s, name, lease)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, st, nil
}
