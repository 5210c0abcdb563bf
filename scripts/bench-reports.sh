#!/usr/bin/env bash
# What reporting every step costs a training loop (issue 13, item 8): a
# Python objective of N steps (default 100000), each doing WORK
# iterations of arithmetic and reporting, run alone and as one trial of
# soma-trial, side by side, in ROUNDS alternating rounds (median shown).
#   stream  each report written to fd 3, no verdict read (os.write per step)
#   helper  soma_report.report(): waits for each step's verdict on fd 4
#   nowait  soma_report.report(..., wait=False): sends its reports as one
#           binary batch line, and reads the verdicts that came, every 10 ms
# "alone" is the same loop without any report call (mode none): what
# reporting adds is measured against the loop that does not report.
# "under soma" is the trial's own time as soma-trial logs it (objective
# start to exit); the last column counts the steps in the curve blob of
# the ended record (must be N).
#
#   bash scripts/bench-reports.sh
#   N=20000 WORK=50 ROUNDS=5 MODES=stream bash scripts/bench-reports.sh
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-100000}
WORK=${WORK:-50}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-stream nowait helper}
PYTHON=${PYTHON:-/usr/bin/python3}
GO=${GO:-go}

top=$(mktemp -d "${TMPDIR:-/tmp}/soma-bench-reports.XXXXXX")
trap 'rm -rf "$top"' EXIT
"$GO" build -o "$top/bin/" ./cmd/soma-trial
cp internal/objective/soma_report.py scripts/bench_reports_obj.py "$top/"
obj=("$PYTHON" "$top/bench_reports_obj.py" "$N" "$WORK")

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "## reports: a training loop of N=$N steps (WORK=$WORK), reporting every step, alone vs under soma-trial ($(nproc) CPUs)"
echo
echo "| mode | alone, no report call: wall / objective CPU (s) | under soma-trial: wall / objective CPU (s) | added: wall / CPU | steps in the curve blob |"
echo "|---|---|---|---|---|"
for mode in $MODES; do
    alone=() soma=() acpu=() scpu=() steps=
    for r in $(seq "$ROUNDS"); do
        t0=$(date +%s.%N)
        c=$(PYTHONPATH="$top" "${obj[@]}" none 2>&1 >/dev/null | sed -n 's/^cpu //p')
        alone+=("$(echo "$(date +%s.%N) - $t0" | bc)")
        acpu+=("$c")
        root=$top/root-$mode-$r
        log=$("$top/bin/soma-trial" --root "$root" --study s --param x=float:0:1 --sampler random --budget 1 -- "${obj[@]}" "$mode" 2>&1)
        # "trial 0 x=... done score ... (2.654s)" or "(850ms)"
        d=$(sed -n 's/^trial 0 .*(\([0-9.]*\)\(m\?s\))$/\1 \2/p' <<<"$log")
        [ -n "$d" ] || { echo "bench-reports: no trial line in soma-trial's output:" >&2; echo "$log" >&2; exit 1; }
        set -- $d
        if [ "$2" = ms ]; then soma+=("$(echo "$1 / 1000" | bc -l)"); else soma+=("$1"); fi
        scpu+=("$(cat "$root"/logs/s/*.err | sed -n 's/^cpu //p' | tail -1)")
        steps=$("$PYTHON" - "$root" <<'PY'
import glob, json, os, sys
n = 0
for p in glob.glob(os.path.join(sys.argv[1], "blobs", "**", "*"), recursive=True):
    if os.path.isfile(p):
        try:
            d = json.load(open(p))
        except Exception:
            continue
        if isinstance(d, dict) and isinstance(d.get("curve"), list):
            n = max(n, len(d["curve"]))
print(n)
PY
)
        rm -rf "$root"
    done
    a=$(printf '%s\n' "${alone[@]}" | median)
    s=$(printf '%s\n' "${soma[@]}" | median)
    ac=$(printf '%s\n' "${acpu[@]}" | median)
    sc=$(printf '%s\n' "${scpu[@]}" | median)
    printf '| %s | %.2f / %.2f | %.2f / %.2f | %+.0f%% / %+.0f%% | %s |\n' "$mode" "$a" "$ac" "$s" "$sc" \
        "$(echo "($s / $a - 1) * 100" | bc -l)" "$(echo "($sc / $ac - 1) * 100" | bc -l)" "$steps"
done
echo
echo "Goal (issue 13): under 5% added for 100k reports, and every step in the blob."
echo "helper waits for a verdict per step: two process wakeups per report, which no coalescing removes; nowait does not."
echo "Load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is only as quiet as the machine)."
