#!/usr/bin/python3
"""zarr-python side of scripts/bench-zarr.sh (issue 7's benchmark).

  bench_zarr.py make DIR              write DIR/noshuffle.zarr and DIR/shuffle.zarr with
                                      zarr-python 2.13: 200 000 x 256 float32, 4096-row chunks,
                                      zstd level 3, without / with shuffle, v2
  bench_zarr.py run DIR OUT.json      time zarr-python on them (single-threaded, as it is),
                                      plus the limits as Python sees them: numcodecs' zstd
                                      decode on one core, and a plain read of the chunk files
  bench_zarr.py table GO.txt,... PY.json,...
                                      print the side-by-side markdown table from the outputs of
                                      `go test -bench` (soma) and of `run`; with several rounds of
                                      each (comma-separated), every number is the best round, so
                                      that a busy machine penalizes both sides alike

The data is normally distributed at half precision (the low 13 mantissa bits zero), like
features stored from fp16 models; soma's benchmarks generate the same kind when run alone.
"""
import json
import os
import re
import shutil
import statistics
import sys
import time

import numpy as np
import numcodecs
import zarr
from numcodecs import Shuffle, Zstd

ROWS, COLS, CHUNK, READ, APPEND = 200_000, 256, 4096, 1000, 10_000
VARIANTS = {"noshuffle": None, "shuffle": [Shuffle(elementsize=4)]}


def data(rows, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, COLS), dtype=np.float32)
    return (a.view(np.uint32) & np.uint32(~((1 << 13) - 1) & 0xFFFFFFFF)).view(np.float32)


def create(path, filters, rows):
    return zarr.open(zarr.DirectoryStore(path), mode="w", shape=(rows, COLS), chunks=(CHUNK, COLS),
                     dtype="<f4", compressor=Zstd(level=3), filters=filters, fill_value=0.0)


def make(out):
    a = data(ROWS, 1)
    for name, filters in VARIANTS.items():
        z = create(os.path.join(out, name + ".zarr"), filters, ROWS)
        z[...] = a


def chunk_files(path):
    return sorted((os.path.join(path, f) for f in os.listdir(path) if not f.startswith(".")),
                  key=lambda p: int(os.path.basename(p).split(".")[0]))


def run(d, out):
    res = {}
    for name, filters in VARIANTS.items():
        path = os.path.join(d, name + ".zarr")
        z = zarr.open_array(zarr.DirectoryStore(path), mode="r")
        r = {}
        rng = np.random.default_rng(7)
        starts = rng.integers(0, ROWS - READ + 1, size=100)
        for s in starts:  # warm the page cache, as soma's runs are
            z[s:s + READ]
        lat = []
        for s in starts:
            t0 = time.perf_counter()
            z[s:s + READ]
            lat.append(time.perf_counter() - t0)
        r["random_p50_ms"] = statistics.median(lat) * 1e3
        r["random_MBps"] = READ * COLS * 4 / statistics.mean(lat) / 1e6
        best = min(timed(lambda: z[...]) for _ in range(3))
        r["scan_MBps"] = ROWS * COLS * 4 / best / 1e6
        # append: same setup as soma's BenchmarkAppend
        tmp = os.path.join(d, "append-" + name + ".zarr")
        za = create(tmp, filters, ROWS)
        last = ROWS // CHUNK * CHUNK
        za[last:] = data(ROWS - last, 2)
        add = data(APPEND, 3)
        r["append_p50_ms"] = statistics.median(timed(lambda: za.append(add)) for _ in range(5)) * 1e3
        shutil.rmtree(tmp)
        files = chunk_files(path)
        blobs = [open(f, "rb").read() for f in files]
        codec = Zstd()
        n = sum(len(codec.decode(b)) for b in blobs)
        best = min(timed(lambda: [codec.decode(b) for b in blobs]) for _ in range(3))
        r["limit_zstd_1core_MBps"] = n / best / 1e6
        best = min(timed(lambda: [open(f, "rb").read() for f in files]) for _ in range(3))
        r["limit_read_MBps"] = sum(len(b) for b in blobs) / best / 1e6
        r["compression_ratio"] = n / sum(len(b) for b in blobs)
        res[name] = r
    res["versions"] = {"zarr": zarr.__version__, "numcodecs": numcodecs.__version__, "numpy": np.__version__}
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def better(unit, a, b):
    """The better of two measurements: lower times, higher rates."""
    if a is None:
        return b
    return min(a, b) if "ms" in unit or unit.startswith("ns") else max(a, b)


def parse_go(paths):
    """Benchmark lines -> {name-without-cpu-suffix: {unit: best value}}."""
    out = {}
    for path in paths:
        for name, vals in parse_go_file(path).items():
            cur = out.setdefault(name, {})
            for unit, v in vals.items():
                cur[unit] = better(unit, cur.get(unit), v)
    return out


def parse_py(paths):
    out = {}
    for path in paths:
        res = json.load(open(path))
        for variant, vals in res.items():
            cur = out.setdefault(variant, {})
            for k, v in vals.items():
                if isinstance(v, str) or k == "compression_ratio":
                    cur[k] = v
                else:
                    cur[k] = better("ms" if k.endswith("_ms") else "MB/s", cur.get(k), v)
    return out


def parse_go_file(path):
    out = {}
    for line in open(path):
        if not line.startswith("Benchmark"):
            continue
        f = line.split()
        name = re.sub(r"-\d+$", "", f[0])[len("Benchmark"):]
        vals = {}
        for i in range(2, len(f) - 1, 2):
            try:
                vals[f[i + 1]] = float(f[i])
            except ValueError:
                pass
        out[name] = vals
    return out


def table(go_paths, py_paths):
    g = parse_go(go_paths.split(","))
    p = parse_py(py_paths.split(","))
    rounds = len(go_paths.split(","))
    cores = int(next((v["cores"] for k, v in g.items() if "cores" in v), 1))

    def gv(name, unit):
        return g.get(name, {}).get(unit, float("nan"))

    def ratio(a, b):
        return "—" if not (a == a and b == b and b) else f"{a / b:.2f}x"

    def speedup(py, soma):
        return "—" if not (py == py and soma == soma and soma) else f"soma {py / soma:.2f}x as fast"

    def vs_limit(limit_rate, soma_rate):
        return "—" if not (limit_rate == limit_rate and soma_rate == soma_rate and soma_rate) else f"{limit_rate / soma_rate:.2f}x the limit's time"

    def scan_vs_limit(v, mode, lmode=None):
        # Time and CPU (user + system per op: what other load on the
        # machine does not inflate as much) against the plain parallel decode.
        lname = f"LimitZstdParallel/{v}/{lmode or mode}"
        lim, soma = gv(lname, "MB/s"), gv(f"Scan/{v}/{mode}", "MB/s")
        lc, sc = gv(lname, "cpu-ms/op"), gv(f"Scan/{v}/{mode}", "cpu-ms/op")
        cpu = "—" if not (lc == lc and sc == sc and lc) else f"{sc / lc:.2f}x its CPU ({sc:.0f} vs {lc:.0f} ms/op)"
        return vs_limit(lim, soma) + ", " + cpu

    rows = []
    for v in VARIANTS:
        pv = p[v]
        lim_go = gv(f"LimitZstd/{v}", "MB/s")
        lim_py = pv["limit_zstd_1core_MBps"]
        cached_lim = gv(f"LimitCachedBytes/{v}", "MB/s")
        rows += [
            (f"random 1000-row read, p50 ms ({v})", "no chunk cache", f"{gv(f'RandomRows/{v}/nocache', 'p50-ms'):.2f}",
             f"{pv['random_p50_ms']:.2f}", "", speedup(pv["random_p50_ms"], gv(f"RandomRows/{v}/nocache", "p50-ms"))),
            ("", "warm chunk cache", f"{gv(f'RandomRows/{v}/cached', 'p50-ms'):.3f}", "", "",
             speedup(pv["random_p50_ms"], gv(f"RandomRows/{v}/cached", "p50-ms"))),
            ("", "warm cache, reused buffer", f"{gv(f'RandomRows/{v}/cached-into', 'p50-ms'):.3f}", "", "",
             speedup(pv["random_p50_ms"], gv(f"RandomRows/{v}/cached-into", "p50-ms"))),
            (f"random 1000-row read, MB/s ({v})", "no chunk cache", f"{gv(f'RandomRows/{v}/nocache', 'MB/s'):.0f}",
             f"{pv['random_MBps']:.0f}", "", ""),
            ("", "warm chunk cache", f"{gv(f'RandomRows/{v}/cached', 'MB/s'):.0f}", "",
             f"{cached_lim:.0f} (pread of the cached rows)", vs_limit(cached_lim, gv(f"RandomRows/{v}/cached", "MB/s"))),
            ("", "warm cache, reused buffer", f"{gv(f'RandomRows/{v}/cached-into', 'MB/s'):.0f}", "",
             f"{cached_lim:.0f}", vs_limit(cached_lim, gv(f"RandomRows/{v}/cached-into", "MB/s"))),
            (f"full scan, MB/s ({v})", f"{cores} cores, new buffer", f"{gv(f'Scan/{v}/alloc', 'MB/s'):.0f}",
             f"{pv['scan_MBps']:.0f} (1 core)",
             f"{gv(f'LimitZstdParallel/{v}/alloc', 'MB/s'):.0f} (klauspost zstd on {cores} goroutines, new buffer)",
             scan_vs_limit(v, "alloc")),
            ("", f"{cores} cores, reused buffer", f"{gv(f'Scan/{v}/into', 'MB/s'):.0f}", "",
             f"{gv(f'LimitZstdParallel/{v}/into', 'MB/s'):.0f} (same, reused buffer)", scan_vs_limit(v, "into")),
            ("", "", "", "", f"{gv(f'LimitZstdParallel/{v}/files', 'MB/s'):.0f} (same, reading each chunk file too)",
             scan_vs_limit(v, "into", "files")),
            (f"zstd decode, 1 core, MB/s ({v})", "klauspost / numcodecs (libzstd)", f"{lim_go:.0f}", f"{lim_py:.0f}", "", ""),
            (f"read chunk files, MB/s ({v})", "", f"{gv(f'LimitReadFiles/{v}', 'MB/s'):.0f}", f"{pv['limit_read_MBps']:.0f}", "", ""),
            (f"append 10 000 rows, p50 ms ({v})", "crash-safe (fsync)", f"{gv(f'Append/{v}', 'p50-ms'):.1f}",
             f"{pv['append_p50_ms']:.1f}", "", speedup(pv["append_p50_ms"], gv(f"Append/{v}", "p50-ms"))),
        ]
    print(f"Array: {ROWS} x {COLS} float32, {CHUNK}-row chunks, zstd 3, v2; compression ratio "
          f"{p['noshuffle']['compression_ratio']:.2f} (no shuffle), {p['shuffle']['compression_ratio']:.2f} (shuffle). "
          f"zarr-python {p['versions']['zarr']}, numcodecs {p['versions']['numcodecs']}; soma on {cores} cores; "
          f"best of {rounds} interleaved rounds.")
    print()
    print("| measure | soma mode | soma | zarr-python | limit | comparison |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "run":
        run(sys.argv[2], sys.argv[3])
    elif cmd == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("unknown command " + cmd)
