package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

var (
	// ErrUnavailable means Slurm cannot be asked: its commands are not
	// installed, it has no configuration, or slurmctld does not answer.
	ErrUnavailable = errors.New("slurm: not reachable")
	// ErrUnknownJob means Slurm does not know the job: it never existed, or
	// it ended more than MinJobAge (300 s by default) ago.
	ErrUnknownJob = errors.New("slurm: unknown job")
)

// CommandError is a Slurm command that failed. errors.Is(err,
// ErrUnavailable) and errors.Is(err, ErrUnknownJob) tell the cases callers
// branch on; Err is what os/exec returned.
type CommandError struct {
	Args   []string // the command line, program first
	Stderr string   // what it printed on stderr, trimmed
	Err    error    // from os/exec: an *exec.ExitError, exec.ErrNotFound...
	Kind   error    // ErrUnavailable, ErrUnknownJob, or nil
}

func (e *CommandError) Error() string {
	cmd := strings.Join(e.Args, " ")
	detail := e.Stderr
	if detail == "" {
		detail = e.Err.Error()
	}
	switch e.Kind {
	case ErrUnavailable:
		return fmt.Sprintf("slurm: %s: Slurm is not reachable (is it installed and slurmctld running? locally: scripts/slurm-local.sh start): %s", cmd, detail)
	case ErrUnknownJob:
		return fmt.Sprintf("slurm: %s: unknown job (never submitted, or ended more than MinJobAge ago): %s", cmd, detail)
	}
	return fmt.Sprintf("slurm: %s: %v: %s", cmd, e.Err, detail)
}

// Unwrap returns Kind (when set) and Err.
func (e *CommandError) Unwrap() []error {
	if e.Kind != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Err}
}

// unreachable are stderr fragments with which Slurm's commands say they
// could not reach slurmctld or find a configuration (measured on Slurm
// 22.05 with slurmctld stopped and with slurm.conf missing).
func unreachable(stderr string) bool {
	for _, s := range [...]string{
		"Unable to contact slurm controller",
		"Could not establish a configuration source",
		"Socket timed out on send/recv",
		"Zero Bytes were transmitted or received",
		"Connection refused",
		"Communication connection failure",
		"Protocol authentication error",
		"Munge encode failed",
		"Invalid user for SlurmUser",
	} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// Client runs Slurm's commands. The zero Client finds them on $PATH and
// passes the process's environment. It is safe for concurrent use.
type Client struct {
	// Dir, if set, is the directory holding sbatch, squeue, scontrol,
	// scancel and sinfo.
	Dir string
	// Env, if non-nil, is the commands' whole environment (SLURM_CONF, for
	// one, points them at a configuration).
	Env []string
}

// run runs a Slurm command and returns its stdout. A ctx that ends first
// sends it SIGTERM, then SIGKILL two seconds later.
func (c Client) run(ctx context.Context, name string, args ...string) (string, error) {
	bin := name
	if c.Dir != "" {
		bin = filepath.Join(c.Dir, name)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = c.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("slurm: %s %s: %w", name, strings.Join(args, " "), ctx.Err())
	}
	e := &CommandError{Args: append([]string{name}, args...), Stderr: strings.TrimSpace(stderr.String()), Err: err}
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		e.Kind = ErrUnavailable
	case unreachable(e.Stderr):
		e.Kind = ErrUnavailable
	case strings.Contains(e.Stderr, "Invalid job id"): // "... specified", or squeue's "Invalid job id: N"
		e.Kind = ErrUnknownJob
	}
	return "", e
}

// Ping asks sinfo whether Slurm answers. It returns nil, or an error that
// is ErrUnavailable when Slurm is not there.
func (c Client) Ping(ctx context.Context) error {
	_, err := c.run(ctx, "sinfo", "-h", "-o", "%P")
	return err
}

// Submit runs `sbatch --parsable [args...] script` and returns the new
// job's id. args are sbatch options that override the script's #SBATCH
// lines.
func (c Client) Submit(ctx context.Context, script string, args ...string) (JobID, error) {
	argv := append(append([]string{"--parsable"}, args...), script)
	out, err := c.run(ctx, "sbatch", argv...)
	if err != nil {
		return 0, err
	}
	return ParseSbatchOutput(out)
}

// squeueFormat is what Tasks asks squeue for; ParseSqueue reads it.
const squeueFormat = "%A|%F|%K|%T|%N|%r"

// Tasks returns the squeue lines of job id (an array's id lists all its
// tasks), in every state Slurm still remembers, finished ones included.
// It returns ErrUnknownJob when Slurm does not know the job.
func (c Client) Tasks(ctx context.Context, id JobID) ([]Task, error) {
	out, err := c.run(ctx, "squeue", "-h", "-t", "all", "-j", id.String(), "-o", squeueFormat)
	if err != nil {
		return nil, err
	}
	tasks, err := ParseSqueue(out)
	if err != nil {
		return nil, fmt.Errorf("squeue -j %s: %w", id, err)
	}
	return tasks, nil
}

// ShowJob returns `scontrol show job` for id: one record per array task
// (and one for an array's pending remainder). It returns ErrUnknownJob when
// Slurm does not know the job.
func (c Client) ShowJob(ctx context.Context, id JobID) ([]JobInfo, error) {
	out, err := c.run(ctx, "scontrol", "show", "job", "-o", id.String())
	if err != nil {
		return nil, err
	}
	jobs, err := ParseShowJob(out)
	if err != nil {
		return nil, fmt.Errorf("scontrol show job %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("slurm: scontrol show job %s printed no job: %w", id, ErrUnknownJob)
	}
	return jobs, nil
}

// CancelOptions modify Cancel.
type CancelOptions struct {
	// Signal, if set, is sent instead of ending the job, by name without
	// "SIG": "USR1", "TERM"...
	Signal string
	// Batch sends the signal to the batch shell only (scancel --batch),
	// the way --signal=B: does, rather than to every job step.
	Batch bool
}

// Cancel runs scancel on ref: it ends the job or array task, or with
// opts.Signal only signals it. A job that is already ending or has ended
// is no error; one that Slurm does not know (anymore) is ErrUnknownJob.
func (c Client) Cancel(ctx context.Context, ref Ref, opts CancelOptions) error {
	if ref.Job == 0 {
		return errors.New("slurm: cancel: no job given")
	}
	var args []string
	if opts.Signal != "" {
		if !isSafeWord(opts.Signal) || strings.HasPrefix(opts.Signal, "-") {
			return fmt.Errorf("slurm: cancel: signal %q is not a signal name like USR1", opts.Signal)
		}
		args = append(args, "--signal="+opts.Signal)
	}
	if opts.Batch {
		args = append(args, "--batch")
	}
	_, err := c.run(ctx, "scancel", append(args, ref.String())...)
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Stderr, "already completing or completed") {
		return nil
	}
	return err
}

// Requeue runs `scontrol requeue` on ref: a running job is killed and
// queued again, a finished batch job is queued again; either starts from
// the top of its script with the same ids and SLURM_RESTART_COUNT one
// higher. Slurm holds it until AuthInfo's cred_expire plus a second has
// passed (121 s by default, 11 s under scripts/slurm-local.sh). Do not
// shorten that wait with `scontrol update StartTime=now`: a launch within
// cred_expire of the previous run's end fails with "Job credential
// revoked" and the job ends FAILED (measured on Slurm 22.05).
func (c Client) Requeue(ctx context.Context, ref Ref) error {
	if ref.Job == 0 {
		return errors.New("slurm: requeue: no job given")
	}
	_, err := c.run(ctx, "scontrol", "requeue", ref.String())
	return err
}

// CancelUnended cancels job id if any of its tasks has not ended, and
// waits (polling every interval) until they all have; a job that has
// ended, or that Slurm has forgotten, is left alone. Tests clean up their
// jobs with it (it was a cleanup copied between two test files, which
// could not share a helper package: slurm's own tests are in package
// slurm, issue 16).
func (c Client) CancelUnended(ctx context.Context, id JobID, interval time.Duration) error {
	tasks, err := c.Tasks(ctx, id)
	if errors.Is(err, ErrUnknownJob) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, task := range tasks {
		if !task.Ended() {
			if err := c.Cancel(ctx, Ref{Job: id}, CancelOptions{}); err != nil {
				return err
			}
			_, err := c.Wait(ctx, id, interval)
			return err
		}
	}
	return nil
}

// Wait polls Tasks every interval until every task of job id has ended
// (see Task.Ended), and returns them. A job Slurm has forgotten has ended
// too: Wait then returns no tasks and no error. It returns early with
// ctx's error.
func (c Client) Wait(ctx context.Context, id JobID, interval time.Duration) ([]Task, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		tasks, err := c.Tasks(ctx, id)
		if errors.Is(err, ErrUnknownJob) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		ended := true
		for _, task := range tasks {
			ended = ended && task.Ended()
		}
		if ended {
			return tasks, nil
		}
		select {
		case <-ctx.Done():
			return tasks, fmt.Errorf("slurm: waiting for job %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}
