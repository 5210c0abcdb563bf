#!/usr/bin/env bash
# File-server operations per trial (issue 13, item 9): what a trial costs
# on a shared filesystem, where every create, link, rename, unlink, fsync,
# readdir, stat, open and mkdir is a round trip to the server (or a wait
# on it). Counted with strace for one soma-trial process running N trials
# of /bin/echo, beside the floor (internal/tools/benchfloor: the claim by
# link(2) and the result by rename(2), each written to a temp file,
# fsynced and published with the folder fsynced; nothing else). Only
# calls on files in the benchmark's folder count (the objective's loader
# and soma's reads of /proc do not): see scripts/bench_trial_ops.py.
#
#   bash scripts/bench-trial-ops.sh            # N=200
#   N=50 bash scripts/bench-trial-ops.sh
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-200}
PYTHON=${PYTHON:-/usr/bin/python3}
GO=${GO:-go}

if ! command -v strace >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bench-trial-ops: installing strace (Debian)" >&2
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q strace >/dev/null
    fi
fi
if ! command -v strace >/dev/null; then
    echo "bench-trial-ops: no strace (Debian: apt-get install strace); no table" >&2
    exit 0
fi

base=${BENCH_DIR:-${TMPDIR:-/tmp}}
top=$(mktemp -d "$base/soma-bench-ops.XXXXXX")
top=$(cd "$top" && pwd -P) # strace prints resolved paths
trap 'rm -rf "$top"' EXIT
"$GO" build -o "$top/bin/" ./cmd/soma-trial ./internal/tools/benchfloor

strace -f -y -qq -o "$top/floor.strace" \
    "$top/bin/benchfloor" floor -dir "$top/floor" -n "$N" -p 1 -- /bin/echo 1 >/dev/null 2>&1
strace -f -y -qq -o "$top/soma.strace" \
    "$top/bin/soma-trial" --root "$top/soma" --study s --param x=float:0:1 --sampler random \
    --budget "$N" --no-wait -- /bin/echo 1 >/dev/null 2>&1

echo "## File-server operations per trial: N=$N trials of /bin/echo 1, one process, folder on $(df -PT "$top" | awk 'NR==2 {print $1 " (" $2 ")"}')"
echo
"$PYTHON" scripts/bench_trial_ops.py "$top" "$N" "$top/floor.strace" "$top/soma.strace"
echo
echo "Floor: one trial's claim (temp file created, written, fsynced; link; folder fsynced) and result (the same, by rename), by internal/tools/benchfloor."
echo "Counted: system calls on files in the benchmark's folder (strace -f -y), failed ones included. On NFS each file open, create, link, rename, unlink, mkdir, setattr and fsync is a round trip; an open of a folder, or a stat, may be answered from the client's cache."
echo "setattr: Put of a blob already stored refreshes its time (so that soma gc keeps it until the record that refers to it is bound: fsstore's GC)."
echo "Above the floor, per trial of soma-trial: the empty curve's blob refreshed at a claim once every 10 s of the run, not at each (study.BlobReuse: a stat and a setattr, relative to its folder held open); the trial's record folder (mkdir, open) and work folder (mkdir; rmdir when left empty); the look for a retry after the result (open, relative to the trial's folder the result was just renamed into, so no stat of that folder when nothing is there); the objective's output files (1 stat, the objective's own: soma takes their ends from the offset of the descriptor the objective wrote through, and reads stdout's tail for the score); the result's server time (stat). The result's bind reuses the folder the claim opened, and the claim the parent the last claim opened."
echo "soma-trial's once-per-run calls (opening the store, the study's spec, packing at the end) are spread over the N trials."
