#!/bin/bash
# worker.sh — one Slurm task of job.sh: runs soma-worker in the foreground,
# registered in $SOMA_ROOT, until Slurm (scancel, the time limit, or job.sh)
# sends it SIGTERM, which removes its record from $SOMA_ROOT/workers/.
#
# The port is SOMA_WORKER_PORT + SLURM_PROCID: on a real cluster each node
# gets its own task anyway, but nodes emulated on one host (the local Slurm
# of scripts/slurm-local.sh --nodes N) share one network, so two tasks on
# the same port would collide. SOMA_WORKER_PORT=0 lets the kernel pick.
set -euo pipefail

: "${SOMA_ROOT:?SOMA_ROOT: the soma folder on the shared filesystem}"
: "${SOMA_TOKEN_FILE:?SOMA_TOKEN_FILE: the bearer token file (job.sh makes one)}"
: "${SLURM_PROCID:?run this under srun (job.sh does)}"
base=${SOMA_WORKER_PORT:-7070}
port=0
((base == 0)) || port=$((base + SLURM_PROCID))
node=${SLURMD_NODENAME:-$(hostname -s)}
id=$node-$SLURM_JOB_ID
# Two tasks on one node (--ntasks-per-node=2) need two ids.
((${SLURM_LOCALID:-0} == 0)) || id=$id.$SLURM_LOCALID
scratch=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/soma-worker-$SLURM_JOB_ID-$SLURM_PROCID

# exec: Slurm's SIGTERM then reaches soma-worker itself, not this shell.
exec soma-worker --root "$SOMA_ROOT" \
	--listen "${SOMA_LISTEN_HOST:-0.0.0.0}:$port" --token-file "$SOMA_TOKEN_FILE" \
	--worker-id "$id" --timeout "${SOMA_WORKER_TIMEOUT:-30s}" \
	--max-plans "${SOMA_MAX_PLANS:-1}" --python "${SOMA_PYTHON:-/usr/bin/python3}" \
	--env-dir "$scratch/envs" --work-dir "$scratch/work" --zarr-cache "$scratch/zcache" \
	--verbose
