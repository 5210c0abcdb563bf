#!/bin/sh
# bench-worker.sh: issue 14's benchmarks of soma-worker, side by side with
# their floors measured in the same run, printed as one markdown table.
#
#   round trip  a warm no-op plan over loopback through Client.Run, which
#               sends it on the plan socket (p50, p99; its file inline, and
#               by digest from a client that sees the store), and over
#               POST /plans?wait=1 (soma-worker-http: the path before the
#               socket, and Run's to an older worker), against
#               the floor: the same frame to an already running Python
#               over a pipe plus a bare loopback HTTP request (goal: p50
#               < 5 ms and within 2x of the floor), and against the two
#               composed with no soma between them (http-to-pipe: a bare
#               HTTP handler that calls the Python over the pipe, which
#               on few cores costs well above the sum; ws-to-pipe: the
#               same over one WebSocket, the socket's own floor). Latency on a shared
#               machine is noisy: ROUNDS runs of N plans each, medians of
#               their p50s and p99s, the load average before and after,
#               and the CPU each plan cost (Go: client, server and worker
#               in one process; Python: the daemon), which load moves less
#   forward     a SOMA_BENCH_MB (default 100) MB float32 array by blob
#               reference, by Zarr rows and inline, against reading the
#               bytes from the store and a raw loopback TCP copy (goal:
#               by reference within 1.5x of the store read)
#   env reuse   a plan needing a wheel (built offline here, installed with
#               --no-index --find-links), then a second plan with the same
#               requirements: pip runs and times of both (goal: the second
#               runs pip 0 times)
#
# Usage: scripts/bench-worker.sh            (from anywhere in the repository)
# Env:   SOMA_PYTHON    interpreter with numpy (default /usr/bin/python3)
#        SOMA_BENCH_MB  array size in MB (default 100)
#        N              iterations of each benchmark (default 2000 round
#                       trips, 5 forwards, 2 env reuses)
#        ROUNDS         runs of the round-trip benchmark (default 5)
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
export SOMA_PYTHON=${SOMA_PYTHON:-/usr/bin/python3}
"$SOMA_PYTHON" -c 'import numpy' 2>/dev/null || {
	echo "bench-worker: $SOMA_PYTHON cannot import numpy (apt-get install python3-numpy)" >&2
	exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/soma-bench-worker.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "bench-worker: building and running worker's benchmarks" >&2
(cd "$root" && go test -c -o "$tmp/worker.test" ./worker)
cd "$root/worker"
load0=$(cut -d' ' -f1 /proc/loadavg)
"$tmp/worker.test" -test.run '^$' -test.bench 'RoundTrip' -test.benchtime "${N:-2000}x" -test.count "${ROUNDS:-5}" >"$tmp/rt.txt"
load1=$(cut -d' ' -f1 /proc/loadavg)
"$tmp/worker.test" -test.run '^$' -test.bench 'Forward' -test.benchtime "${N:-5}x" >"$tmp/out.txt"
"$tmp/worker.test" -test.run '^$' -test.bench 'EnvReuse' -test.benchtime "${N:-2}x" >"$tmp/env.txt"

echo "## soma-worker: warm no-op plan vs the floor (medians of ${ROUNDS:-5} runs of ${N:-2000} plans; load average $load0 before, $load1 after, on $(nproc) CPUs)"
echo
awk '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
/^Benchmark/ {
	name = $1; sub(/^BenchmarkRoundTrip\//, "", name); sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++rows] = name }
	for (i = 4; i < NF; i++) {
		if ($(i+1) == "p50-ms") { P50[name] = P50[name] " " $i; RUN[name, ++runs[name]] = $i }
		if ($(i+1) == "p99-ms") P99[name] = P99[name] " " $i
		if ($(i+1) == "go-cpu-us") GO[name] = GO[name] " " $i
		if ($(i+1) == "py-cpu-us") PY[name] = PY[name] " " $i
	}
}
END {
	floor = median(P50["python-pipe"]) + median(P50["loopback-http"])
	print "| round trip | p50 ms | p99 ms | CPU per plan, Go / Python µs | p50 vs floor |"
	print "|---|---:|---:|---:|---|"
	for (r = 1; r <= rows; r++) {
		k = order[r]; cpu = ""; vs = ""
		if (GO[k] != "") cpu = sprintf("%.0f / %.0f", median(GO[k]), median(PY[k]))
		if (k ~ /^soma-worker/ || k == "in-process") vs = sprintf("%.1fx pipe + http (%.3f ms)", median(P50[k]) / floor, floor)
		if (k ~ /^soma-worker/ && P50["http-to-pipe"] != "") vs = vs sprintf("; %.1fx http-to-pipe", median(P50[k]) / median(P50["http-to-pipe"]))
		if (k ~ /^soma-worker/ && P50["ws-to-pipe"] != "") vs = vs sprintf("; %.1fx ws-to-pipe", median(P50[k]) / median(P50["ws-to-pipe"]))
		if (k == "http-to-pipe") vs = sprintf("%.1fx pipe + http: the two composed", median(P50[k]) / floor)
		if (k == "ws-to-pipe") vs = sprintf("%.1fx pipe + http: a WebSocket and the pipe composed", median(P50[k]) / floor)
		printf "| %s | %.3f | %.3f | %s | %s |\n", k, median(P50[k]), median(P99[k]), cpu, vs
	}
	# The same ratio run by run: each round measures the floors and
	# soma-worker a few seconds apart, so a load that drifts over the
	# rounds moves both (the medians above pair different rounds).
	if (runs["soma-worker"] > 0 && runs["soma-worker"] == runs["http-to-pipe"]) {
		list = ""; under = 0
		for (i = 1; i <= runs["soma-worker"]; i++) {
			x = RUN["soma-worker", i] / RUN["http-to-pipe", i]
			list = list sprintf(" %.2f", x)
			if (x <= 2) under++
		}
		printf "\nsoma-worker / http-to-pipe, round by round:%s (median %.2f; within 2x in %d of %d rounds)\n", list, median(list), under, runs["soma-worker"]
	}
}' "$tmp/rt.txt"
echo
echo "## soma-worker: forward of a large array vs the floors (SOMA_BENCH_MB=${SOMA_BENCH_MB:-100}; load average $(cut -d' ' -f1 /proc/loadavg))"
echo
awk '
/^Benchmark/ {
	name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
	ms = $3 / 1e6; p50 = ""; p99 = ""; mbs = ""
	for (i = 4; i < NF; i++) {
		if ($(i+1) == "p50-ms") p50 = $i
		if ($(i+1) == "p99-ms") p99 = $i
		if ($(i+1) == "MB/s") mbs = $i
	}
	if (p50 == "") p50 = sprintf("%.3f", ms)
	n[++rows] = name; P50[name] = p50; P99[name] = p99; MB[name] = mbs
}
END {
	print "| benchmark | p50 ms | p99 ms | MB/s | vs floor (p50) |"
	print "|---|---:|---:|---:|---|"
	for (r = 1; r <= rows; r++) {
		k = n[r]; vs = ""
		if (k == "Forward/blob" || k == "Forward/zarr") vs = sprintf("%.2fx store-read", P50[k] / P50["Forward/store-read"])
		if (k == "Forward/inline") vs = sprintf("%.2fx loopback-copy", P50[k] / P50["Forward/loopback-copy"])
		printf "| %s | %s | %s | %s | %s |\n", k, P50[k], P99[k], MB[k], vs
	}
}' "$tmp/out.txt"
echo
echo "## soma-worker: environment reuse (fresh worker and pool each time; p50 over N)"
echo
awk '
/^BenchmarkEnvReuse/ {
	for (i = 4; i < NF; i++) v[$(i+1)] = $i
	print "| plan | pip runs | ms (p50) |"
	print "|---|---:|---:|"
	printf "| first with the requirement | %s | %s |\n", v["first-pips"], v["first-p50-ms"]
	printf "| second, same requirements | %s | %s |\n", v["second-pips"], v["second-p50-ms"]
}' "$tmp/env.txt"
