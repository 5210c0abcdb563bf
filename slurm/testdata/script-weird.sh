#!/bin/bash
# line one
# 	indented
#
# after a blank
#
# An sbatch script written by soma. Submit it, or submit it again later, with
#   sbatch THIS-FILE
# Options given to sbatch on its command line override the #SBATCH lines,
# which sbatch reads only up to the first command.

#SBATCH --job-name='it'\''s a "job" #1 $x \\ {lr}'
# 5 array tasks, as many at once as the cluster allows (add %N to cap it).
#SBATCH --array=1,3,5-9:2
# The time limit of each task.
#SBATCH --time=1-02:03:05
# About 90 s before the time limit, Slurm sends SIGUSR1 to the batch shell
# ("B:"); soma-trial then records its trial as interrupted, so that it is
# retried, and exits. Slurm keeps this time only to within about a minute.
#SBATCH --signal=B:USR1@90
# Slurm does not start a task again after a node failure or preemption;
# other tasks retry its interrupted trial.
#SBATCH --no-requeue
# One log per task, stdout and stderr together: <array job id>_<task index>.out.
#SBATCH --output='/tmp/log dir'\''s $x %%y/%A_%a.out'
# Append, so that a task started again keeps the output of its earlier runs.
#SBATCH --open-mode=append
# Options given to soma:
#SBATCH --comment='a b\\c '\''d'\'' "e" #f'
#SBATCH --exclusive
#SBATCH -pgpu

echo "soma: job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_JOB_ID:+ (task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}, restart ${SLURM_RESTART_COUNT:-0}, on ${SLURMD_NODENAME:-$(hostname)}, $(date '+%F %T')"

# exec replaces this shell by the command, in the same process. It has to:
# --signal=B:USR1 signals the batch shell only, never its children, and a
# shell would run a trap only after its foreground child ended. After exec
# the command is the batch shell, so it receives USR1 itself. Nothing after
# this line runs.
exec soma-trial --root '/scratch/my root' --study 'it'\''s' -- python3 -c 'import sys; print(sys.argv)' '' ' ' 'a b' 'it'\''s' '"dq"' 'it'\''s "both"' '$HOME' '${x}' '$(echo pwned)' '`id`' '{lr}' '{a,b}' '--lr={lr}' '*' '?' '[ab]' '~' '~root' $'a\nb' $'tab\there' 'back\slash' '\'\''' 'semi;colon' '&&' '|' '!' '!!' '#hash' 'x#y' 'é ü 世界' -n -- = A=b % %A_%a ''\''' ''\'''\''' $'\x01\x7f' 'trailing\'
