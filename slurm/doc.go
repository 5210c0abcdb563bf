// Package slurm is soma's Slurm side: what a process knows about its Slurm
// job (Job, Me and its Who line for records), the sbatch script that
// `soma slurm submit` writes (Script, TrialCommand, Array), and a thin,
// typed wrapper over Slurm's commands (Client: sbatch, squeue, scontrol,
// scancel, sinfo) with parsers for their output.
//
// The package imports only the standard library. It never logs and holds
// no package-level state; everything that blocks takes a context.
//
// Slurm facts it relies on, and where they come from:
//
//   - `--signal=B:USR1@<secs>` sends USR1 to the batch shell only, never to
//     its children (sbatch(1)); bash runs a trap only after a foreground
//     child exits. So the generated script ends in `exec soma-trial ...`:
//     soma-trial becomes the batch shell and receives the signal itself.
//     `scancel --signal=USR1 --batch` delivers the same signal on demand,
//     which is how the tests prove it.
//   - The signal's timing is only accurate to about 30 s and it arrives
//     together with SIGCONT (on Slurm 22.05, `--time=1 --signal=B:USR1@5`
//     signalled 25 to 32 s after the start, not 55 s, always with
//     SIGCONT); programs must not rely on either being alone.
//   - `--open-mode=append` keeps a requeued task's earlier output in its log;
//     without it every restart truncates the log.
//   - A job that Slurm has forgotten (MinJobAge after it ended) makes squeue
//     and scontrol answer "Invalid job id specified": ErrUnknownJob.
//     Accounting (sacct) is often disabled, so nothing here depends on it.
package slurm
