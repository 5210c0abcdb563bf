#!/bin/bash
# An sbatch script written by soma. Submit it, or submit it again later, with
#   sbatch THIS-FILE
# Options given to sbatch on its command line override the #SBATCH lines,
# which sbatch reads only up to the first command.

#SBATCH --job-name=soma
# About 120 s before the time limit, Slurm sends SIGUSR1 to the batch shell
# ("B:"); soma-trial then records its trial as interrupted, so that it is
# retried, and exits. Slurm keeps this time only to within about a minute.
#SBATCH --signal=B:USR1@120
# After a node failure or preemption Slurm may start a task again from the
# top, with the same ids; SLURM_RESTART_COUNT counts the restarts.
#SBATCH --requeue
# One log, stdout and stderr together: <job id>.out.
#SBATCH --output=/data/r/logs/%j.out
# Append, so that a task started again keeps the output of its earlier runs.
#SBATCH --open-mode=append

echo "soma: job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_JOB_ID:+ (task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}, restart ${SLURM_RESTART_COUNT:-0}, on ${SLURMD_NODENAME:-$(hostname)}, $(date '+%F %T')"

# exec replaces this shell by the command, in the same process. It has to:
# --signal=B:USR1 signals the batch shell only, never its children, and a
# shell would run a trap only after its foreground child ended. After exec
# the command is the batch shell, so it receives USR1 itself. Nothing after
# this line runs.
exec soma-trial --root /data/r --study s -- ./objective
