#!/bin/sh
# bench-mo.sh: soma's multi-objective samplers (tpe, which is MOTPE with
# several objectives, and nsga2) on two objectives (ZDT1 and ZDT2 with 30
# variables, and f1 = hartmann6(x), f2 = hartmann6(1 − x)) next to Optuna
# 3.1's NSGAIISampler and multi-objective TPESampler (MOTPE), Debian's
# python3-optuna: 200 trials, seeds 0..SEEDS-1, median hypervolume of all
# trials (internal/tools/mobench has the problems and reference points).
# A benchmark, not a test. Optuna's NSGA-II takes a few minutes; its MOTPE
# takes 2-3 minutes per seed for the three problems on 2 idle cores, so it
# runs only when MOTPE=1, on MOTPE_SEEDS seeds (default SEEDS).
#
# Usage: scripts/bench-mo.sh [SEEDS]   (default 20)
# Env:   PYTHON (default /usr/bin/python3), MOTPE=1 to run Optuna's MOTPE
#        too, MOTPE_SEEDS (e.g. 5) to run it on fewer seeds
set -eu
cd "$(dirname "$0")/.."
seeds=${1:-20}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

go build -o "$tmp/mobench" ./internal/tools/mobench
if "$python" -c 'import optuna, numpy' 2>/dev/null; then
	"$python" scripts/bench_mo.py --seeds "$seeds" --samplers nsga2 >"$tmp/optuna.jsonl"
	if [ "${MOTPE:-0}" = 1 ]; then
		"$python" scripts/bench_mo.py --seeds "${MOTPE_SEEDS:-$seeds}" --samplers motpe >>"$tmp/optuna.jsonl"
	fi
	"$tmp/mobench" -seeds "$seeds" -optuna "$tmp/optuna.jsonl"
else
	echo "bench-mo: $python lacks optuna or numpy (apt-get install python3-optuna); soma side only" >&2
	"$tmp/mobench" -seeds "$seeds"
fi
