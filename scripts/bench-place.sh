#!/usr/bin/env bash
# bench-place: placement latency through the folder (worker.Place: read
# the registry and the leases, claim a lease by link(2)) with 10 and 1000
# registered workers, side by side with the floor: listing the same
# folders and reading every record with bare open/fstat/read, plus one
# link(2) claim (write, link: no fsync, as a lease needs none); and through
# one worker.Placer (the registry and the leases read once a second, kept
# up to date by its own claims and releases). Then no-op plans per second
# through placement (Place; one shared Placer claiming a lease for every
# plan; one keeping released leases for its next placement) vs straight
# to known workers (8 senders). Prints markdown tables; placement latency
# in milliseconds.
#
#   bash scripts/bench-place.sh                 (make bench runs it)
#   SOMA_BENCH_PLACE_N=300 bash scripts/bench-place.sh
#
# The folder is a new one under $TMPDIR (a local disk here; set TMPDIR to
# an NFS mount to measure one). Registering 1000 workers takes a few
# seconds of fsyncs before the timing starts. As root the throughput
# table is printed again for a fresh journaled ext4 image
# (SOMA_BENCH_PLACE_EXT4=no skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${SOMA_BENCH_PLACE_N:-100}
out=$(go test -run '^$' -bench '^BenchmarkPlace$' -benchtime "${N}x" ./worker/)
# fsinfo: the file system under a folder, and for ext4 whether it has a
# journal (scripts/fsbench.sh says why that matters here).
. scripts/fsbench.sh
echo "## placement from the folder vs the floor (list + read every record + one link claim)"
echo
echo "$N placements each, on $(fsinfo "${TMPDIR:-/tmp}"), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg). Milliseconds."
echo
echo "| workers | Place p50 | Place p99 | floor p50 | floor p99 | p50 ratio | Placer p50 | Placer p99 |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "$out" | awk '
/^BenchmarkPlace\/workers=/ {
	split($1, a, "/"); split(a[2], w, "="); n = w[2]; v = a[3]; sub(/-[0-9]+$/, "", v)
	for (i = 1; i <= NF; i++) { if ($(i) == "p50-us") p50[n, v] = $(i-1); if ($(i) == "p99-us") p99[n, v] = $(i-1) }
	if (!(n in seen)) { seen[n] = 1; order[++k] = n }
}
END {
	for (j = 1; j <= k; j++) { n = order[j]
		printf "| %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2f | %.1f |\n", n, p50[n, "soma"]/1000, p99[n, "soma"]/1000, p50[n, "floor"]/1000, p99[n, "floor"]/1000, p50[n, "soma"]/p50[n, "floor"], p50[n, "placer"]/1000, p99[n, "placer"]/1000
	}
}'

# Throughput end to end: 8 senders, a no-op plan, 2 workers of 4 slots
# behind loopback HTTP; placed through the folder vs sent straight to
# known workers (the peer: what placement costs is the difference).
# 2000 plans: at 200 a side ran for a tenth of a second and its plans/s
# swung by half between runs.
throughput() {
local dir=$1 out
out=$(cd worker && TMPDIR=$dir "$wtest" -test.run '^$' -test.bench '^BenchmarkPlacedPlans$' -test.benchtime "${P}x")
echo
echo "## no-op plans per second, 8 senders, 2 workers x 4 slots: placed vs straight to known workers"
echo
echo "$P plans each, on $(fsinfo "$dir"), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg)."
echo
echo "| path | plans/s |"
echo "|---|---:|"
echo "$out" | awk '
/^BenchmarkPlacedPlans\// {
	split($1, a, "/"); v = a[2]; sub(/-[0-9]+$/, "", v)
	for (i = 1; i <= NF; i++) if ($(i) == "plans/s") r[v] = $(i-1)
}
END {
	printf "| placed (Place, send, Release) | %.0f |\n", r["placed"]
	printf "| placed through one Placer, a lease claimed for every plan (registry and leases read once a second) | %.0f |\n", r["placer-claim-each"]
	printf "| placed through one Placer keeping released leases (KeepFor 50 ms) | %.0f |\n", r["placer"]
	printf "| placed through 8 Placers, one per sender, each keeping its leases | %.0f |\n", r["placers-8"]
	printf "| direct (send to a known worker) | %.0f |\n", r["direct"]
	if (r["direct"] > 0) printf "| placed / direct | %.2f |\n", r["placed"] / r["direct"]
	if (r["direct"] > 0) printf "| Placer claiming each / direct | %.2f |\n", r["placer-claim-each"] / r["direct"]
	if (r["direct"] > 0) printf "| Placer keeping leases / direct (goal: at least 0.67) | %.2f |\n", r["placer"] / r["direct"]
	if (r["direct"] > 0) printf "| 8 Placers keeping leases / direct | %.2f |\n", r["placers-8"] / r["direct"]
}'
}

P=${SOMA_BENCH_PLACED_N:-2000}
top=$(mktemp -d "${TMPDIR:-/tmp}/soma-bench-place.XXXXXX")
cleanup() {
	fsbench_cleanup
	rm -rf "$top"
}
trap cleanup EXIT
wtest=$top/worker.test
go test -c -o "$wtest" ./worker/
throughput "${TMPDIR:-/tmp}"
# As root, again on a fresh journaled ext4 image on the same disk
# (loop-mounted), as scripts/bench-trial.sh does and for the same reason:
# without a journal (this project's test VMs) every create scans the
# inodes deleted in the last minute, and a lease claimed per plan pays
# for it; most Linux machines and NFS servers have a journal.
# SOMA_BENCH_PLACE_EXT4=no skips it.
if [ "${SOMA_BENCH_PLACE_EXT4:-yes}" != no ] && fsbench_ext4 "$top" bench-place; then
	mkdir "$fsbench_mnt/w"
	throughput "$fsbench_mnt/w"
fi
