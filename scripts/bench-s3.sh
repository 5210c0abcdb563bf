#!/usr/bin/env bash
# The bucket store (s3store) on the local S3 server (scripts/s3-local.sh),
# side by side in one run (issue 17):
#   1. Claim, Bind and Resolve of one name, and Scan of SOMA_BENCH_NAMES
#      names (10000), against the floor: the same raw S3 requests through
#      the same client (s3store/bench_test.go). Medians of COUNT runs.
#   2. soma-trial throughput, P processes sharing a budget of N trials
#      with the objective /bin/echo 1, on the bucket and on a folder.
# Goal: soma within 1.3x of the raw requests.
#
#   bash scripts/bench-s3.sh                       # COUNT=4 (even: each side first as often), N=200, P in 1 4 8
#   COUNT=3 N=100 PS="1 8" bash scripts/bench-s3.sh
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
COUNT=${COUNT:-4}
N=${N:-200}
PS=${PS:-1 4 8}

bash scripts/s3-local.sh start >/dev/null 2>&1 || {
	echo "bench-s3: no local S3 server (scripts/s3-local.sh start failed); skipped" >&2
	exit 0
}
eval "$(bash scripts/s3-local.sh env 2>/dev/null)"

top=$(mktemp -d "${TMPDIR:-/tmp}/soma-bench-s3.XXXXXX")
trap 'rm -rf "$top"' EXIT

# median: for each benchmark name, the median ns/op of its runs, with its
# requests per operation (req/op, the same in every run).
median() {
	awk '$1 ~ /^Benchmark/ && $4 == "ns/op" {
		n[$1]++; v[$1, n[$1]] = $3
		if ($6 == "req/op") r[$1] = $5
		if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 }
	}
	END {
		for (i = 1; i <= k; i++) {
			b = order[i]; m = n[b]
			for (x = 1; x <= m; x++) a[x] = v[b, x] + 0
			for (x = 2; x <= m; x++) { t = a[x]; y = x - 1; while (y >= 1 && a[y] > t) { a[y + 1] = a[y]; y-- } a[y + 1] = t }
			printf "%s\t1\t%.0f ns/op\t%s req/op\n", b, a[int((m + 1) / 2)], r[b]
		}
	}'
}

echo "## s3store on versitygw ($AWS_ENDPOINT_URL): soma vs the same raw requests through the same client (median of $COUNT; last column: ratio of times)"
# One run of everything COUNT times, rather than -count: go test -count
# runs each sub-benchmark COUNT times in a row (all of soma, then all of
# raw), and on a shared machine whatever else runs then lands on one side.
"$GO" test -c -o "$top/s3store.test" ./s3store/
# Odd runs put the raw side first (SOMA_BENCH_RAW_FIRST): the second side
# of a run was measured slower, whichever it was.
for ((i = 0; i < COUNT; i++)); do
	export SOMA_BENCH_RAW_FIRST=$((i % 2))
	"$top/s3store.test" -test.run '^$' -test.bench 'Bucket(Claim|Bind|Resolve)$' -test.benchtime 300x
	"$top/s3store.test" -test.run '^$' -test.bench 'BucketScan$' -test.benchtime 2x
done 2>&1 | median >"$top/bench.txt"
"$GO" run ./internal/tools/benchtable <"$top/bench.txt"
echo
echo "HTTP requests per operation (counted, so not subject to the machine's noise):"
awk '{ printf "  %-30s %s\n", $1, $5 }' "$top/bench.txt"

"$GO" build -o "$top/bin/" ./cmd/soma-trial
# run ROOT P: P soma-trial processes over a budget of N; prints trials/s.
run() {
	local root=$1 p=$2 t0 t1 ran i
	t0=$(date +%s.%N)
	for ((i = 0; i < p; i++)); do
		"$top/bin/soma-trial" --root "$root" --study b --local "$top/local" --param x=float:0:1 \
			--direction minimize --sampler random --budget "$N" -- /bin/echo 1 >/dev/null 2>"$top/log.$i" &
	done
	wait
	t1=$(date +%s.%N)
	ran=$(cat "$top"/log.* | sed -n 's/.*: ran \([0-9]*\) trials.*/\1/p' | awk '{s += $1} END {print s + 0}')
	[[ $ran == "$N" ]] || echo "bench-s3: $root P=$p ran $ran trials, want $N" >&2
	rm -f "$top"/log.*
	awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }'
}

echo
echo "## soma-trial on a bucket vs a folder: N=$N trials, objective /bin/echo 1, $(nproc) CPUs (trials/s)"
echo
echo "| P | folder | bucket | bucket/folder |"
echo "|---|---|---|---|"
for p in $PS; do
	f=$(run "$top/folder-$p" "$p")
	b=$(run "s3://$SOMA_TEST_BUCKET/bench-$$-$p" "$p")
	echo "| $p | $f | $b | $(awk -v a="$b" -v c="$f" 'BEGIN { printf "%.2f", a / c }') |"
done
echo
echo "Load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is only as quiet as the machine)."
