#!/usr/bin/env bash
# Trial throughput, side by side in one run (issue 4): for P = 1, 2, 4, 8
# processes over one folder on one disk and a shared budget of N trials,
#   - the floor: the bare syscalls of a trial (fsync'd claim by link(2),
#     fsync'd rebind by rename(2), one fork+exec of the objective), by
#     internal/tools/benchfloor;
#   - soma-trial, P processes over one study (--sampler random);
#   - Optuna 3.1 with JournalFileStorage, P processes sharing one journal,
#     the objective running the same executable with subprocess, and, for
#     reference, an in-process objective (scripts/bench_trial_optuna.py).
# The objective is /bin/echo 1 everywhere: it prints the score "1".
# Prints one markdown table (and the measured notes under it).
#
#   bash scripts/bench-trial.sh                    # N=1000, P in 1 2 4 8
#   N=300 PS="1 8" bash scripts/bench-trial.sh     # smaller, fewer rows
#   BENCH_DIR=/scratch/x bash scripts/bench-trial.sh   # another disk (NFS...)
#   BENCH_FS=tmp bash scripts/bench-trial.sh       # only the default folder
#
# As root it runs twice: in $BENCH_DIR (default $TMPDIR or /tmp), and on a
# fresh journaled ext4 image on the same disk (loop-mounted), the
# filesystem most Linux machines and NFS servers use. Why both: this
# project's test VMs have ext4 without a journal, where each file
# creation scans the inodes freed in the last minutes (ext4's
# recently_deleted check), so a creation costs up to ten times more,
# depending on what else the machine deleted lately; both tables are
# real, neither is the whole story. BENCH_FS=tmp or BENCH_FS=ext4 runs one.
#   SOMA_FLAGS=--no-wait bash scripts/bench-trial.sh   # extra soma-trial flags
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-1000}
PS=${PS:-1 2 4 8}
PYTHON=${PYTHON:-/usr/bin/python3}
GO=${GO:-go}
SOMA_FLAGS=${SOMA_FLAGS:-}
OBJ=(/bin/echo 1)

base=${BENCH_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
top=$(mktemp -d "$base/soma-bench-trial.XXXXXX")
. scripts/fsbench.sh
cleanup() {
    fsbench_cleanup
    rm -rf "$top"
}
trap cleanup EXIT

"$GO" build -o "$top/bin/" ./cmd/soma-trial ./internal/tools/benchfloor
bf=$top/bin/benchfloor

optuna=yes
if ! "$PYTHON" -c 'import optuna, sys; sys.exit(0 if optuna.__version__.startswith("3.") else 1)' 2>/dev/null; then
    optuna=no
fi

# settle: write back what earlier runs left dirty, and let the journal and
# the writeback threads go quiet.
settle() { sync; sleep "${SETTLE:-1}"; }

# bench DIR: the table for one folder.
bench() {
local work=$1
mkdir -p "$work"
results=$work/results.jsonl
start=$SECONDS
echo "## soma-trial throughput: N=$N trials per run, objective '${OBJ[*]}', folder on $(df -PT "$work" | awk 'NR==2 {print $1 " (" $2 ")"}'), $(nproc) CPUs"
echo
for p in $PS; do
    # A runner that fails as a whole leaves its cells empty ("–") and says why.
    # Each runner starts on a settled disk (settle): the writeback and the
    # journal work of the previous run and of rm -rf otherwise land in the
    # next one (measured: ~10% on whichever runner came next).
    settle
    "$bf" floor -dir "$work/floor-$p" -n "$N" -p "$p" -- "${OBJ[@]}" >>"$results" ||
        echo "floor at P=$p failed (above)" >&2
    settle
    "$bf" soma -bin "$top/bin/soma-trial" -root "$work/soma-$p" -n "$N" -p "$p" -flags "$SOMA_FLAGS" -- "${OBJ[@]}" >>"$results" ||
        echo "soma at P=$p failed (above)" >&2
    if [ "$optuna" = yes ]; then
        for mode in exec inproc; do
            settle
            "$PYTHON" scripts/bench_trial_optuna.py --journal "$work/optuna-$mode-$p.log" --n "$N" --p "$p" --mode "$mode" -- "${OBJ[@]}" >>"$results" ||
                echo "optuna-$mode at P=$p failed (above)" >&2
        done
    fi
    rm -rf "$work/floor-$p" "$work/soma-$p" "$work"/optuna-*-"$p".log*
done
"$bf" table <"$results"
echo
echo "soma/floor: soma's rate as a share of the floor's (goal: within 1.3x, a share of 0.77 or more)."
echo "Exact budget: exactly N trials recorded, each run once (Optuna overshoots a shared budget by up to P-1)."
echo "Crashes: runner processes that exited non-zero (Optuna: e.g. JSONDecodeError on the shared journal, optuna#5138)."
echo "Wall time from the first process start to the last exit; Optuna's interpreter start and 'import optuna' are not counted, soma-trial's and the floor's process starts are."
[ "$optuna" = yes ] || echo "Optuna: $PYTHON has no optuna 3.x (Debian: apt-get install python3-optuna); its columns are empty."
# CPU per trial (runners and objectives): what a trial costs whatever else the machine does.
"$PYTHON" - "$results" <<'PY' 2>/dev/null || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cpu = {(r["p"], r["kind"]): r.get("cpu_ms") for r in rows}
ps = sorted({r["p"] for r in rows})
print("CPU ms per trial, floor / soma: " + ", ".join("P=%d %.1f / %.1f" % (p, cpu.get((p, "floor")) or 0, cpu.get((p, "soma")) or 0) for p in ps) + ".")
errs = [e for r in rows for e in r.get("errors") or []]
for e in errs[:10]:
    print("error: " + e[:300])
PY
echo "Total time: $((SECONDS - start)) s. Load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is only as quiet as the machine)."
}

fs=${BENCH_FS:-both}
if [ "$fs" != ext4 ]; then
    bench "$top/tmp"
fi
if [ "$fs" != tmp ] && fsbench_ext4 "$top" bench-trial; then
    echo
    bench "$fsbench_mnt/w"
fi
