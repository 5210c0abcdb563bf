#!/bin/bash
# soma slurm submit /scratch/soma --study spam --array 0-63%16 --time 4h
# -- python train.py --lr {lr} --batch {batch}
#
# An sbatch script written by soma. Submit it, or submit it again later, with
#   sbatch THIS-FILE
# Options given to sbatch on its command line override the #SBATCH lines,
# which sbatch reads only up to the first command.

#SBATCH --job-name=soma-spam
# 64 array tasks, at most 16 running at once (the %16).
#SBATCH --array=0-63%16
# The time limit of each task.
#SBATCH --time=04:00:00
# About 120 s before the time limit, Slurm sends SIGUSR1 to the batch shell
# ("B:"); soma-trial then records its trial as interrupted, so that it is
# retried, and exits. Slurm keeps this time only to within about a minute.
#SBATCH --signal=B:USR1@120
# After a node failure or preemption Slurm may start a task again from the
# top, with the same ids; SLURM_RESTART_COUNT counts the restarts.
#SBATCH --requeue
# One log per task, stdout and stderr together: <array job id>_<task index>.out.
#SBATCH --output=/scratch/soma/slurm/spam/%A_%a.out
# Append, so that a task started again keeps the output of its earlier runs.
#SBATCH --open-mode=append
# Options given to soma:
#SBATCH --partition=gpu
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G

echo "soma: job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_JOB_ID:+ (task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}, restart ${SLURM_RESTART_COUNT:-0}, on ${SLURMD_NODENAME:-$(hostname)}, $(date '+%F %T')"

# Setup given to soma; a failing line ends the task before soma-trial starts.
set -e
module load cuda/12.4
source /scratch/venv/bin/activate
set +e

# exec replaces this shell by the command, in the same process. It has to:
# --signal=B:USR1 signals the batch shell only, never its children, and a
# shell would run a trap only after its foreground child ended. After exec
# the command is the batch shell, so it receives USR1 itself. Nothing after
# this line runs.
exec /opt/soma/bin/soma-trial --root /scratch/soma --study spam --spec /home/me/spam.toml --max-trials 4 -- python train.py --lr '{lr}' --batch '{batch}'
