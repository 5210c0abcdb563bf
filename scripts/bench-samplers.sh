#!/bin/sh
# bench-samplers.sh: search quality of soma's tpe sampler next to Optuna
# 3.1's TPESampler (Debian's python3-optuna), on Branin (2-d), Hartmann6
# (6-d) and Styblinski-Tang (10-d): 100 trials, seeds 0..SEEDS-1,
# sequential and 4 simulated parallel workers (Optuna with
# constant_liar=True). Prints one markdown table of median best values
# and one of parallel penalties. A benchmark, not a test: it takes about
# two minutes, nearly all of it Optuna's.
#
# Usage: scripts/bench-samplers.sh [SEEDS]   (default 10)
# Env:   PYTHON (default /usr/bin/python3), SAMPLER (default tpe)
set -eu
cd "$(dirname "$0")/.."
seeds=${1:-10}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

go build -o "$tmp/samplerbench" ./internal/tools/samplerbench
if "$python" -c 'import optuna, numpy' 2>/dev/null; then
	"$python" scripts/bench_samplers.py --seeds "$seeds" >"$tmp/optuna.jsonl"
	"$tmp/samplerbench" -seeds "$seeds" -sampler "${SAMPLER:-tpe}" -optuna "$tmp/optuna.jsonl"
else
	echo "bench-samplers: $python lacks optuna or numpy (apt-get install python3-optuna); soma side only" >&2
	"$tmp/samplerbench" -seeds "$seeds" -sampler "${SAMPLER:-tpe}"
fi
