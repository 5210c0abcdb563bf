#!/usr/bin/env bash
# Trials on a slow filesystem (issue 18): the study folder on the FUSE
# harness of scripts/slowfs.sh, which waits DELAY (1 ms) in every metadata
# operation and lets the kernel cache nothing (NFS with lookupcache=none,
# noac: the pessimistic case), side by side with Optuna 3.1's journal
# file on the same mount, the objective /bin/echo 1 for both. For P = 1, 4,
# 8 processes and a shared budget of N trials it prints trials/s and the
# file-server operations per trial by kind (the whole run's count divided
# by N: the once-per-run costs spread over the trials); then the
# operations of one `soma status` of studies of STATUS_N trials (made by
# internal/tools/synth/synthstudy), unpacked and packed (as soma gc packs; it
# leaves fewer than 256 ended trials unpacked, so give STATUS_N >= 256).
#
#   bash scripts/bench-slowfs.sh                  # N=300, P in 1 4 8, DELAY=1ms, STATUS_N="1000 10000"
#   N=100 PS="1 8" bash scripts/bench-slowfs.sh
#
# Needs root and /dev/fuse (a direct FUSE mount); without them it says so
# and prints no table. On NFS each metadata operation is a round trip of
# 0.2–2 ms, so the operations per trial times the round trip is roughly
# the file server's share of a trial there.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-300}
PS=${PS:-1 4 8}
DELAY=${DELAY:-1ms}
STATUS_N=${STATUS_N:-1000 10000}
PYTHON=${PYTHON:-/usr/bin/python3}
GO=${GO:-go}
OBJ=(/bin/echo 1)

if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
    echo "bench-slowfs: no table: the slow filesystem needs root and /dev/fuse (a direct FUSE mount)" >&2
    exit 0
fi

base=${BENCH_DIR:-${TMPDIR:-/tmp}}
top=$(mktemp -d "$base/soma-bench-slowfs.XXXXXX")
mnt=$top/mnt
export SOMA_SLOWFS_STATE=$top/state
cleanup() {
    bash scripts/slowfs.sh stop "$mnt" 2>/dev/null || true
    rm -rf "$top"
}
trap cleanup EXIT

"$GO" build -o "$top/bin/" ./cmd/soma-trial ./cmd/soma ./internal/tools/benchfloor ./internal/tools/synth/synthstudy
bash scripts/slowfs.sh start --delay "$DELAY" "$mnt" 2>/dev/null
backing=$(echo "$SOMA_SLOWFS_STATE"/*/backing)
counts() { bash scripts/slowfs.sh counts "$mnt" --reset; }

optuna=yes
if ! "$PYTHON" -c 'import optuna, sys; sys.exit(0 if optuna.__version__.startswith("3.") else 1)' 2>/dev/null; then
    optuna=no
fi

# Each run: counts reset, the run, its counts; results.jsonl gets one line
# per run with its rate and its counts.
results=$top/results.jsonl
start=$SECONDS
for p in $PS; do
    counts >/dev/null
    # The counts are taken (-ops) when the runners have exited, before
    # benchfloor reads the study back to check it.
    if r=$("$top/bin/benchfloor" soma -bin "$top/bin/soma-trial" -root "$mnt/soma-$p" -n "$N" -p "$p" \
        -ops "bash scripts/slowfs.sh counts '$mnt' --reset" -- "${OBJ[@]}"); then
        echo "{\"run\": $r}" >>"$results"
    else
        echo "soma at P=$p failed (above)" >&2
    fi
    if [ "$optuna" = yes ]; then
        counts >/dev/null
        if r=$("$PYTHON" scripts/bench_trial_optuna.py --journal "$mnt/optuna-$p.log" --n "$N" --p "$p" --mode exec -- "${OBJ[@]}"); then
            echo "{\"run\": $r, \"ops\": $(counts)}" >>"$results"
        else
            echo "optuna at P=$p failed (above)" >&2
        fi
    fi
    # Removed behind the mount: through it, rm would take a while at 1 ms.
    rm -rf "$backing/soma-$p" "$backing"/optuna-"$p".log*
done

# soma status: each study is made behind the mount (on the local disk,
# fast), then read through it.
for n in $STATUS_N; do
    for packed in unpacked packed; do
        flag=
        [ "$packed" = packed ] && flag=-pack
        "$top/bin/synthstudy" -root "$backing/status" -n "$n" $flag >/dev/null 2>&1
        counts >/dev/null
        "$top/bin/soma" status "$mnt/status" >/dev/null
        echo "{\"status\": \"$packed\", \"trials\": $n, \"ops\": $(counts)}" >>"$results"
        rm -rf "$backing/status"
    done
done

echo "## soma-trial on a slow filesystem: FUSE loopback, $DELAY per metadata operation, no kernel caching (NFS lookupcache=none,noac); N=$N trials of '${OBJ[*]}' per run, $(nproc) CPUs"
echo
"$PYTHON" - "$results" "$N" <<'PY'
import json, sys

# What internal/tools/slowfs counts as metadata (slowfs.Metadata): the rest are
# data and the requests an NFS client sends without a round trip.
NOT_META = {"READ", "WRITE", "LSEEK", "IOCTL", "COPY_FILE_RANGE", "FLUSH", "RELEASE", "RELEASEDIR", "FORGET"}
rows = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
runs = [r for r in rows if "run" in r]
status = [r for r in rows if "status" in r]

def meta(ops):
    return {k: v for k, v in ops.items() if k not in NOT_META}

print("| runner | P | trials/s | metadata ops per trial | by kind, per trial | exact budget | crashes |")
print("|---|--:|--:|--:|---|:-:|--:|")
for r in runs:
    run = r["run"]
    ops = meta(run["ops"] if "ops" in run else r["ops"])
    trials = max(run.get("ran") or 0, 1)
    kinds = ", ".join("%s %.1f" % (k, v / trials) for k, v in sorted(ops.items(), key=lambda kv: -kv[1]))
    print("| %s | %d | %.1f | %.1f | %s | %s | %d |" % (
        "soma" if run["kind"] == "soma" else "Optuna journal, same exec", run["p"], run["per_s"],
        sum(ops.values()) / trials, kinds, "yes" if run.get("exact") else "no", run.get("crashes", 0)))
by = {}
for r in runs:
    by.setdefault(r["run"]["p"], {})[r["run"]["kind"]] = r["run"]["per_s"]
ratios = ["P=%d %.1fx" % (p, v["soma"] / v["optuna-exec"]) for p, v in sorted(by.items())
          if v.get("soma") and v.get("optuna-exec")]
errs = [(r["run"]["kind"], r["run"]["p"], e) for r in runs for e in r["run"].get("errors") or []]
for kind, p, e in errs[:10]:
    print("error (%s, P=%d): %s" % (kind, p, e[:300]))
if ratios:
    print()
    print("soma/Optuna trials/s: " + ", ".join(ratios) + " (goal: at least 4x at every P).")
print()
for r in status:
    ops = meta(r["ops"])
    kinds = ", ".join("%s %d" % (k, v) for k, v in sorted(ops.items(), key=lambda kv: -kv[1]))
    print("soma status of %d trials, %s: %d metadata operations (%s)." % (r["trials"], r["status"], sum(ops.values()), kinds))
PY
echo "Per trial: the run's operations divided by the trials it ran, the study's creation and each process's start included. Optuna's: its interpreter start and 'import optuna' touch no file on the mount."
[ "$optuna" = yes ] || echo "Optuna: $PYTHON has no optuna 3.x (Debian: apt-get install python3-optuna); its rows are missing."
echo "Total time: $((SECONDS - start)) s. Load average: $(cut -d' ' -f1-3 /proc/loadavg)."
