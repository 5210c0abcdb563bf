#!/usr/bin/python3
"""zarr-python (Debian's python3-zarr 2.13) side of soma's zarr interop tests.

  zarr_helper.py make DIR     write arrays with zarr-python into DIR/<name>.zarr, the
                              expected full array as DIR/<name>.bin (little-endian,
                              C order) and DIR/manifest.json
  zarr_helper.py dump ARRAY.. read v2 arrays with zarr-python and print, one line each, JSON:
                              shape, dtype, sha256 of the little-endian C-order bytes,
                              fill_value, attributes
  zarr_helper.py dumpv3 ARRAY.. read v3 arrays with the fixtures' independent reader
                              (zarr-v3/check_v3.py) and print the same JSON
  zarr_helper.py append ARRAY N  append N rows of value row_index*1000+col (float64 cast
                              to the array's dtype) with zarr-python's z.append

Deterministic: values come from a seeded generator.
"""
import hashlib
import json
import os
import sys

import numpy as np
import numcodecs
import zarr
from numcodecs import GZip, Zlib, Zstd, Shuffle, Blosc

HERE = os.path.dirname(os.path.abspath(__file__))


def le_bytes(a):
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.byteswap().view(a.dtype.newbyteorder("<"))
    return a.tobytes()


def values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
        return rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64 if dt.kind == "i" else np.uint64).astype(dt)
    # floats: smooth-ish data with a few specials, as measurements look
    a = (np.cumsum(rng.normal(size=shape), axis=0) / 8).astype(dt)
    flat = a.reshape(-1)
    if flat.size > 10:
        flat[3] = np.nan
        flat[5] = np.inf
        flat[7] = -np.inf
        flat[9] = -0.0
    return a


def big_blosc_values(shape, seed):
    # compressible floats, so blosc really compresses (no memcpy frames)
    rng = np.random.default_rng(seed)
    return np.round(np.cumsum(rng.normal(size=shape), axis=0), 1).astype("<f4")


ARRAYS = [
    # name, dtype, shape, chunks, fill, compressor, filters, order, sep
    ("bool_zstd", "|b1", (37, 6), (8, 4), True, Zstd(level=1), None, "C", "."),
    ("int8_zstd", "|i1", (37, 6), (8, 4), -3, Zstd(level=1), None, "C", "."),
    ("uint8_raw", "|u1", (37, 6), (8, 4), 200, None, None, "C", "."),
    ("int16_gzip", "<i2", (37, 6), (8, 4), -300, GZip(level=6), None, "C", "."),
    ("uint16_zlib", "<u2", (37, 6), (8, 4), 65535, Zlib(level=3), None, "C", "."),
    ("int32_shuffle_zstd", "<i4", (37, 6), (8, 4), 0, Zstd(level=3), [Shuffle(elementsize=4)], "C", "."),
    ("uint32_zstd_big", ">u4", (37, 6), (8, 4), 7, Zstd(level=3), None, "C", "."),
    ("int64_zstd_F", "<i8", (37, 6, 3), (8, 4, 2), -1, Zstd(level=3), None, "F", "."),
    ("uint64_zstd_nested", "<u8", (37, 6), (8, 4), 2**63 + 5, Zstd(level=3), None, "C", "/"),
    ("float32_shuffle_zstd", "<f4", (300, 70), (64, 32), "NaN", Zstd(level=3), [Shuffle(elementsize=4)], "C", "."),
    ("float64_zstd_bigF", ">f8", (41, 9), (16, 4), -1.5, Zstd(level=5), None, "F", "."),
    ("float32_blosc_lz4_shuffle", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("float32_blosc_lz4_noshuffle", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="lz4", clevel=9, shuffle=Blosc.NOSHUFFLE), None, "C", "."),
    ("float32_blosc_lz4hc", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="lz4hc", clevel=5, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("float32_blosc_blosclz", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="blosclz", clevel=9, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("float64_blosc_blosclz_noshuffle", "<f8", (3000, 8), (1500, 8), 0.0,
     Blosc(cname="blosclz", clevel=5, shuffle=Blosc.NOSHUFFLE), None, "C", "."),
    ("float32_blosc_zstd", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("float32_blosc_zlib", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="zlib", clevel=3, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("float32_blosc_snappy", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="snappy", clevel=3, shuffle=Blosc.SHUFFLE), None, "C", "."),
    ("int16_blosc_lz4_small_blocks", "<i2", (5000, 3), (2500, 3), 0,
     Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE, blocksize=256), None, "C", "."),
    ("float32_blosc_bitshuffle", "<f4", (4000, 16), (2000, 16), 0.0,
     Blosc(cname="lz4", clevel=5, shuffle=Blosc.BITSHUFFLE), None, "C", "."),
]


def make(out):
    manifest = []
    for i, (name, dtype, shape, chunks, fill, comp, filters, order, sep) in enumerate(ARRAYS):
        path = os.path.join(out, name + ".zarr")
        fv = float("nan") if fill == "NaN" else fill
        z = zarr.open(zarr.DirectoryStore(path, dimension_separator=sep), mode="w", shape=shape,
                      chunks=chunks, dtype=dtype, fill_value=fv, compressor=comp, filters=filters, order=order)
        if "blosc" in name:
            data = big_blosc_values(shape, i).astype(dtype)
            z[...] = data
            full = data
        else:
            data = values(dtype, shape, i)
            # leave the second chunk row unwritten: it must read as the fill value
            full = np.full(shape, fv, dtype=dtype)
            rows = [r for r in range(shape[0]) if not (chunks[0] <= r < 2 * chunks[0])]
            z[rows[0]:chunks[0]] = data[:chunks[0]]
            z[2 * chunks[0]:] = data[2 * chunks[0]:]
            full[:chunks[0]] = data[:chunks[0]]
            full[2 * chunks[0]:] = data[2 * chunks[0]:]
        z.attrs["made_by"] = "zarr_helper.py"
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(le_bytes(full))
        manifest.append({"name": name, "shape": list(shape), "dtype": dtype,
                         "unsupported": "bitshuffle" in name})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def describe(a, fill, attrs):
    if isinstance(fill, np.generic):
        fill = fill.item()
    if isinstance(fill, float) and np.isnan(fill):
        fill = "NaN"
    elif isinstance(fill, float) and np.isinf(fill):
        fill = "Infinity" if fill > 0 else "-Infinity"
    return {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": hashlib.sha256(le_bytes(a)).hexdigest(),
            "fill_value": fill, "attributes": attrs}


def dump(path):
    z = zarr.open_array(zarr.DirectoryStore(path), mode="r")
    fill = z.fill_value
    if fill is not None and not isinstance(fill, (bool, int, float, str)):
        fill = fill.item()
    print(json.dumps(describe(z[...], fill, dict(z.attrs))))


def dumpv3(path):
    sys.path.insert(0, os.path.join(HERE, "zarr-v3"))
    from check_v3 import read_array
    a = read_array(path)
    meta = json.load(open(os.path.join(path, "zarr.json")))
    print(json.dumps(describe(a, meta["fill_value"], meta.get("attributes", {}))))


def append(path, n):
    z = zarr.open_array(zarr.DirectoryStore(path), mode="r+")
    shape = (n,) + z.shape[1:]
    rows = np.arange(z.shape[0], z.shape[0] + n, dtype=np.float64).reshape((n,) + (1,) * (len(shape) - 1))
    cols = np.arange(int(np.prod(shape[1:])), dtype=np.float64).reshape((1,) + shape[1:])
    z.append((rows * 1000 + cols).astype(z.dtype))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "dump":
        for p in sys.argv[2:]:
            dump(p)
    elif cmd == "dumpv3":
        for p in sys.argv[2:]:
            dumpv3(p)
    elif cmd == "append":
        append(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("unknown command " + cmd)
