#!/usr/bin/env bash
# bench-status: `soma status` and `soma trials --format json` on studies of
# 1k, 10k and 100k ended trials, side by side with Optuna 3.1 loading the
# same number of trials from a JournalFileStorage file and printing
# best_trial and the trials dataframe. Prints a markdown table.
#
#   bash scripts/bench-status.sh                 (make bench runs it)
#   SOMA_BENCH_SIZES="1000 10000" bash scripts/bench-status.sh
#
# Every number is the wall time of a whole process, warm (page cache
# filled by an untimed first run), the median of SOMA_BENCH_RUNS runs for
# soma (default 3) and of one run for Optuna (at 100k it takes tens of
# seconds). Fixtures are written to a new folder in /dev/shm (writing 100k
# fsync'd records takes seconds there, minutes on a VM's disk; warm reads
# cost about the same as from a local disk's page cache) and removed at
# the end (the three sizes take about 1 GiB of memory); give
# SOMA_BENCH_DIR to keep them there and reuse them on the next run.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-/usr/bin/python3}
SIZES=${SOMA_BENCH_SIZES:-"1000 10000 100000"}
RUNS=${SOMA_BENCH_RUNS:-3}
BIN=$(mktemp -d)
CLEAN=$BIN
if [ -z "${SOMA_BENCH_DIR:-}" ]; then
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then SOMA_BENCH_DIR=$(mktemp -d /dev/shm/soma-bench.XXXXXX); else SOMA_BENCH_DIR=$(mktemp -d); fi
	CLEAN="$CLEAN $SOMA_BENCH_DIR"
fi
mkdir -p "$SOMA_BENCH_DIR"
trap 'rm -rf $CLEAN' EXIT
go build -o "$BIN/" ./cmd/soma ./internal/tools/synth/synthstudy

if ! "$PY" -c 'import optuna, pandas' 2>/dev/null; then
	echo "bench-status: $PY cannot import optuna and pandas (apt-get install python3-optuna); soma only" >&2
	OPTUNA=no
else
	OPTUNA=yes
fi

secs() { "$PY" scripts/bench_status.py time "${RUNS}" "$@"; }
json() { "$PY" -c "import json,sys; print('%.2f' % json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
ratio() { "$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.0f×' % (a/b) if b > 0 else '-')" "$1" "$2"; }

fstype=$(stat -f -c %T "$SOMA_BENCH_DIR")
echo "## soma status / soma trials vs Optuna $("$PY" -c 'import optuna; print(optuna.__version__)' 2>/dev/null || echo '-') JournalFileStorage"
echo
echo "Fixtures on $fstype ($SOMA_BENCH_DIR); $(nproc) cores; load average $(cut -d' ' -f1 /proc/loadavg). Whole-process wall times, warm, seconds."
echo
echo "| trials | soma status | soma status, packed | files opened, packed | soma trials --format json, packed | Optuna import | Optuna load + best_trial + dataframe | Optuna total | status packed vs Optuna total |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $SIZES; do
	plain="$SOMA_BENCH_DIR/soma-$n"
	packed="$SOMA_BENCH_DIR/soma-$n-packed"
	journal="$SOMA_BENCH_DIR/optuna-$n.log"
	if [ ! -e "$plain/.bench-done" ]; then
		rm -rf "$plain" "$packed"
		"$BIN/synthstudy" -root "$plain" -study bench -n "$n" 2>/dev/null
		touch "$plain/.bench-done"
	fi
	if [ ! -e "$packed/.bench-done" ]; then
		rm -rf "$packed"
		cp -a "$plain" "$packed"
		"$BIN/soma" gc "$packed" --keep-blobs >/dev/null
	fi
	if [ "$OPTUNA" = yes ] && [ ! -e "$journal" ]; then
		"$PY" scripts/bench_status.py journal "$journal" "$n"
	fi
	"$BIN/soma" status "$plain" --study bench >/dev/null # warm the cache
	"$BIN/soma" status "$packed" --study bench >/dev/null
	runs=$RUNS
	[ "$n" -ge 100000 ] && runs=1 # each run takes seconds; one warm run is a fair sample
	s_plain=$(RUNS=$runs secs "$BIN/soma" status "$plain" --study bench)
	s_packed=$(secs "$BIN/soma" status "$packed" --study bench)
	opened=$("$BIN/soma" status "$packed" --study bench --verbose | sed -n 's/^read *\([0-9]*\) files opened.*/\1/p')
	s_trials=$(RUNS=$runs secs "$BIN/soma" trials "$packed" --study bench --format json)
	if [ "$OPTUNA" = yes ]; then
		o=$("$PY" scripts/bench_status.py optuna "$journal")
		o_imp=$(json "$o" import_s)
		o_load=$("$PY" -c "import json,sys; d=json.loads(sys.argv[1]); print('%.2f' % (d['load_s'] + d['best_df_s']))" "$o")
		o_total=$(json "$o" total_s)
		speed=$(ratio "$o_total" "$s_packed")
	else
		o_imp=- o_load=- o_total=- speed=-
	fi
	echo "| $n | $s_plain | $s_packed | $opened | $s_trials | $o_imp | $o_load | $o_total | $speed |"
done
