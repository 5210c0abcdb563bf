#!/bin/sh
# bench-zarr.sh: issue 7's benchmark, soma's zarr package side by side with
# zarr-python 2.13 (Debian's python3-zarr) and the limits measured in the
# same run, printed as one markdown table.
#
# The arrays (200 000 x 256 float32, 4096-row chunks, zstd 3, with and
# without shuffle, v2 so that both can read them) are written by
# zarr-python into a temporary folder under $TMPDIR and removed at the end.
#
# Usage: scripts/bench-zarr.sh            (from the repository root)
# Env:   SOMA_PYTHON  interpreter with zarr and numpy (default /usr/bin/python3)
#        ROUNDS=n     interleaved rounds of both sides (default 2; best round wins)
#        KEEP=1       keep the temporary folder and the raw outputs
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
py=${SOMA_PYTHON:-/usr/bin/python3}
helper="$root/zarr/testdata/bench_zarr.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/soma-bench-zarr.XXXXXX")
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$tmp"' EXIT

"$py" -c 'import zarr, numpy' 2>/dev/null || {
	echo "bench-zarr: $py cannot import zarr and numpy (apt-get install python3-zarr python3-numpy)" >&2
	exit 1
}

echo "bench-zarr: writing the arrays with zarr-python in $tmp" >&2
"$py" "$helper" make "$tmp"

echo "bench-zarr: building and running soma's benchmarks" >&2
(cd "$root" && go test -c -o "$tmp/zarr.test" ./zarr)
run() { # benchtime pattern
	ZARR_BENCH_DIR="$tmp" "$tmp/zarr.test" -test.run '^$' -test.benchtime "$1" -test.bench "$2"
}
# Rounds alternate soma and zarr-python, and the table keeps each side's
# best round, so that other load on the machine penalizes both alike.
rounds=${ROUNDS:-2}
gos= pys=
i=1
while [ "$i" -le "$rounds" ]; do
	echo "bench-zarr: round $i/$rounds: soma" >&2
	{
		run 100x 'RandomRows|LimitCachedBytes'
		run 3x 'Scan|LimitZstd|LimitReadFiles'  # LimitZstd also runs LimitZstdParallel
		run 5x 'Append'
	} >"$tmp/go.$i.txt"
	echo "bench-zarr: round $i/$rounds: zarr-python" >&2
	"$py" "$helper" run "$tmp" "$tmp/py.$i.json"
	gos="$gos${gos:+,}$tmp/go.$i.txt"
	pys="$pys${pys:+,}$tmp/py.$i.json"
	i=$((i + 1))
done

"$py" "$helper" table "$gos" "$pys"
