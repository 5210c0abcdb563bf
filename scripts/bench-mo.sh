#!/bin/sh
# bench-mo.sh: soma's nsga2 sampler on two objectives (ZDT1 and ZDT2 with
# 30 variables, and f1 = hartmann6(x), f2 = hartmann6(1 − x)) next to
# Optuna 3.1's NSGAIISampler and multi-objective TPESampler (MOTPE),
# Debian's python3-optuna: 200 trials, seeds 0..SEEDS-1, median
# hypervolume of all trials (internal/tools/mobench has the problems and
# reference points). A benchmark, not a test. Optuna's NSGA-II takes a few
# minutes; its MOTPE takes 2-3 minutes per seed for the three problems on
# 2 cores, so it runs only when MOTPE=1.
#
# Usage: scripts/bench-mo.sh [SEEDS]   (default 20)
# Env:   PYTHON (default /usr/bin/python3), MOTPE=1 to run Optuna's MOTPE too
set -eu
cd "$(dirname "$0")/.."
seeds=${1:-20}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

go build -o "$tmp/mobench" ./internal/tools/mobench
samplers=nsga2
[ "${MOTPE:-0}" = 1 ] && samplers=nsga2,motpe
if "$python" -c 'import optuna, numpy' 2>/dev/null; then
	"$python" scripts/bench_mo.py --seeds "$seeds" --samplers "$samplers" >"$tmp/optuna.jsonl"
	"$tmp/mobench" -seeds "$seeds" -optuna "$tmp/optuna.jsonl"
else
	echo "bench-mo: $python lacks optuna or numpy (apt-get install python3-optuna); soma side only" >&2
	"$tmp/mobench" -seeds "$seeds"
fi
