#!/bin/sh
# bench-conditional.sh: soma's tpe on a conditional space (issue 21) next
# to Optuna 3.1's TPESampler (Debian's python3-optuna), define-by-run:
# momentum and damp matter only under sgd, beta1 and beta2 only under adam
# (internal/tools/condbench has the function). soma runs it with
# the knobs conditional and with them unconditional (ignored off their
# branch). 100 trials, seeds 0..SEEDS-1; prints one markdown table of
# median best values. A benchmark, not a test: two minutes on 2 cores,
# nearly all of it Optuna's.
#
# Usage: scripts/bench-conditional.sh [SEEDS]   (default 30)
# Env:   PYTHON (default /usr/bin/python3)
set -eu
cd "$(dirname "$0")/.."
seeds=${1:-30}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

go build -o "$tmp/condbench" ./internal/tools/condbench
if "$python" -c 'import optuna' 2>/dev/null; then
	"$python" scripts/bench_conditional.py --seeds "$seeds" >"$tmp/optuna.jsonl"
	"$tmp/condbench" -seeds "$seeds" -optuna "$tmp/optuna.jsonl"
else
	echo "bench-conditional: $python lacks optuna (apt-get install python3-optuna); soma side only" >&2
	"$tmp/condbench" -seeds "$seeds"
fi
