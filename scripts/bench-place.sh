#!/usr/bin/env bash
# bench-place: placement latency through the folder (worker.Place: read
# the registry and the leases, claim a lease by link(2)) with 10 and 1000
# registered workers, side by side with the floor: listing the same
# folders and reading every record with bare open/fstat/read, plus one
# durable link(2) claim (write, fsync, link, fsync the folder). Prints a
# markdown table of p50 and p99 in milliseconds.
#
#   bash scripts/bench-place.sh                 (make bench runs it)
#   SOMA_BENCH_PLACE_N=300 bash scripts/bench-place.sh
#
# The folder is a new one under $TMPDIR (a local disk here; set TMPDIR to
# an NFS mount to measure one). Registering 1000 workers takes a few
# seconds of fsyncs before the timing starts.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${SOMA_BENCH_PLACE_N:-100}
out=$(go test -run '^$' -bench '^BenchmarkPlace$' -benchtime "${N}x" ./worker/)
fstype=$(stat -f -c %T "${TMPDIR:-/tmp}")
echo "## placement from the folder vs the floor (list + read every record + one durable link claim)"
echo
echo "$N placements each, on $fstype, $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg). Milliseconds."
echo
echo "| workers | Place p50 | Place p99 | floor p50 | floor p99 | p50 ratio |"
echo "|---:|---:|---:|---:|---:|---:|"
echo "$out" | awk '
/^BenchmarkPlace\/workers=/ {
	split($1, a, "/"); split(a[2], w, "="); n = w[2]; v = a[3]; sub(/-[0-9]+$/, "", v)
	for (i = 1; i <= NF; i++) { if ($(i) == "p50-us") p50[n, v] = $(i-1); if ($(i) == "p99-us") p99[n, v] = $(i-1) }
	if (!(n in seen)) { seen[n] = 1; order[++k] = n }
}
END {
	for (j = 1; j <= k; j++) { n = order[j]
		printf "| %s | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", n, p50[n, "soma"]/1000, p99[n, "soma"]/1000, p50[n, "floor"]/1000, p99[n, "floor"]/1000, p50[n, "soma"]/p50[n, "floor"]
	}
}'
