#!/bin/bash
#SBATCH --job-name=soma-workers
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=soma-workers-%j.out
#
# job.sh — one soma-worker per node of this allocation, then a study whose
# plans soma run places on them through the folder, then the workers stop.
#
#   cd examples/slurm-workers
#   SOMA_ROOT=/scratch/$USER/soma sbatch job.sh
#
# Environment (sbatch passes the submitter's): SOMA_ROOT (required: the
# soma folder, on the shared filesystem), SOMA_TOKEN_FILE ($HOME/.soma/token,
# made with mode 600 if missing), SOMA_LISTEN_HOST (0.0.0.0; 127.0.0.1 on a
# cluster emulated on one host, whose node names do not resolve),
# SOMA_WORKER_PORT (7070; task i listens on PORT+i, 0 lets the kernel pick),
# SOMA_WORKER_TIMEOUT (30s), SOMA_MAX_PLANS (1 per worker), SOMA_PYTHON
# (/usr/bin/python3), SOMA_RUNS (4 plans, run in parallel), SOMA_HOLD (1:
# keep the workers until the job is cancelled or times out, for other
# clients' soma run), SOMA_WORKER_SRUN (--ntasks-per-node=1), SOMA_EXAMPLE_DIR
# (the submit directory: where worker.sh, plan.toml and filters.py are).
# soma and soma-worker must be on PATH.
set -euo pipefail

: "${SOMA_ROOT:?set SOMA_ROOT to the soma folder on the shared filesystem}"
dir=${SOMA_EXAMPLE_DIR:-$SLURM_SUBMIT_DIR}
export SOMA_ROOT SOMA_TOKEN_FILE=${SOMA_TOKEN_FILE:-$HOME/.soma/token}
export SOMA_WORKER_TIMEOUT=${SOMA_WORKER_TIMEOUT:-30s}
python=${SOMA_PYTHON:-/usr/bin/python3}

# A worker listening beyond loopback refuses a token file others can read.
if [[ ! -e $SOMA_TOKEN_FILE ]]; then
	mkdir -p "$(dirname "$SOMA_TOKEN_FILE")"
	(umask 077 && od -An -vtx1 -N32 /dev/urandom | tr -d ' \n' >"$SOMA_TOKEN_FILE")
fi
chmod 600 "$SOMA_TOKEN_FILE"

# One task per node. --overlap leaves the allocation's CPUs to the job's
# other steps too; the workers run in the background until stopped.
# shellcheck disable=SC2086 # SOMA_WORKER_SRUN is a list of srun options
srun --overlap ${SOMA_WORKER_SRUN:---ntasks-per-node=1} "$dir/worker.sh" &
workers=$!
stop() {
	# SIGTERM to each worker, which removes its record. Not kill -TERM
	# $workers: srun answers SIGTERM by killing its tasks (SIGKILL), which
	# leaves the records to go stale after the timeout (seen here: both
	# workers listed dead). The workers' srun is this job's first step, 0.
	scancel --signal=TERM "$SLURM_JOB_ID.0" 2>/dev/null || true
	wait "$workers" || true
}
trap stop EXIT

# Wait until every task's worker of this job is alive in the folder.
want=$SLURM_NTASKS
for ((i = 0; ; i++)); do
	# The folder exists once the first worker has registered.
	alive=0
	if doc=$(soma workers "$SOMA_ROOT" --json --timeout "$SOMA_WORKER_TIMEOUT" 2>/dev/null); then
		alive=$("$python" -c '
import json, sys
doc = json.loads(sys.argv[1])
print(sum(1 for w in doc["workers"] if w["alive"] and w.get("slurm_job", "").split("_")[0] == sys.argv[2]))
' "$doc" "$SLURM_JOB_ID")
	fi
	((alive >= want)) && break
	kill -0 "$workers" 2>/dev/null || { echo "job.sh: the workers' srun ended" >&2; exit 1; }
	((i < 600)) || { echo "job.sh: only $alive of $want workers alive after 60 s" >&2; exit 1; }
	sleep 0.1
done
echo "job.sh: $alive workers alive"
soma workers "$SOMA_ROOT" --timeout "$SOMA_WORKER_TIMEOUT"

# The study: here SOMA_RUNS copies of one plan at once; placement spreads
# them over the workers' free slots (and waits while all are busy).
pids=()
for ((i = 0; i < ${SOMA_RUNS:-4}; i++)); do
	soma run "$SOMA_ROOT" "$dir/plan.toml" --token-file "$SOMA_TOKEN_FILE" --timeout "$SOMA_WORKER_TIMEOUT" &
	pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
echo "job.sh: study done, $failed of ${SOMA_RUNS:-4} plans failed"
((failed == 0)) || exit 1

if [[ ${SOMA_HOLD:-0} == 1 ]]; then
	echo "job.sh: holding the workers until the job ends"
	wait "$workers"
fi
