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
  zarr_helper.py makeblosc DIR  write the blosc shuffle/bitshuffle arrays (BLOSC_ARRAYS: v2
                              with zarr-python, v3 by hand with numcodecs' Blosc) into
                              DIR/<name>.zarr and DIR/expected.json (testdata/blosc is
                              its committed output)

Deterministic: values come from a seeded generator.
"""
import hashlib
import json
import os
import sys

import numpy as np
import numcodecs
import numcodecs.blosc
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
                         "unsupported": False})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


# Blosc shuffle and bitshuffle across element sizes, chunk lengths that are
# and are not multiples of 8 elements, and block sizes that leave a short
# last block or blocks whose element count is not a multiple of 8 (which
# c-blosc 1.x copies instead of bit-transposing). Shapes are 1-d, a chunk
# and a half, so the edge chunk is padded with the fill value.
#
# c-blosc 1.21 honours a forced blocksize only below 128 elements per
# block (above that it enlarges the block for splitting), so 1-byte types
# get several blocks only from a big chunk: zstd at clevel 1 picks 32 KiB.
BLOSC_DTYPES = ["|u1", "|i1", "|b1", "<u2", "<i4", "<f4", "<f8"]
BLOSC_LAYOUTS = [
    # suffix, chunk length, blocksize (0 = auto), cname, clevel, for which element sizes
    ("c800", 800, 0, "lz4", 5, lambda es: True),             # one block, 800 elements (split when es > 1)
    ("c401", 401, 0, "lz4", 5, lambda es: True),             # one block of 401 elements: copied, not transposed
    ("c600_b128", 600, 128, "blosclz", 5, lambda es: es > 1),  # 128-byte blocks (64 u2, 16 f8) and a short last one
    ("c601_b200", 601, 200, "lz4", 5, lambda es: es > 1),    # 200-byte blocks (100 u2, 25 f8): copied
    ("c40000_zstd1", 40000, 0, "zstd", 1, lambda es: es == 1),  # 32 KiB blocks + 7232 bytes
    ("c40001_zstd1", 40001, 0, "zstd", 1, lambda es: es == 1),  # 32 KiB blocks + 7233 bytes (copied)
]


def blosc_values(dtype, n, seed):
    """Values that compress (so blosc really compresses) and use every bit."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return (np.cumsum(rng.integers(0, 9, size=n)) // 32 % 2).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        walk = np.cumsum(rng.integers(-1, 2, size=n))
        walk = walk // 16 if dt.itemsize == 1 else walk + int(info.max) // 3  # every byte in use
        span = int(info.max) - int(info.min) + 1
        return ((walk - int(info.min)) % span + int(info.min)).astype(dt)
    return (np.round(np.cumsum(rng.normal(size=n)) * 4) / 4 - 1000.25).astype(dt)


def blosc_cases():
    cases = []
    for shuffle, sname in ((Blosc.BITSHUFFLE, "bitshuffle"), (Blosc.SHUFFLE, "shuffle")):
        for dt in BLOSC_DTYPES:
            for suffix, chunk, bs, cname, clevel, sizes in BLOSC_LAYOUTS:
                # 1-byte shuffle is no shuffle: the big layouts only for bitshuffle
                if sizes(np.dtype(dt).itemsize) and not (shuffle == Blosc.SHUFFLE and chunk > 10000):
                    name = "v2_%s_%s_%s" % (np.dtype(dt).name, sname, suffix)
                    cases.append((name, dt, chunk, Blosc(cname=cname, clevel=clevel, shuffle=shuffle, blocksize=bs), None))
    # A Shuffle filter hands blosc uint8 bytes: typesize 1, bitshuffled.
    for dt in ["<u2", "<i4", "<f4", "<f8"]:
        for suffix, chunk, bs, cname, clevel, _ in BLOSC_LAYOUTS[:2]:
            name = "v2_%s_shufflefilter_bitshuffle_%s" % (np.dtype(dt).name, suffix)
            cases.append((name, dt, chunk, Blosc(cname=cname, clevel=clevel, shuffle=Blosc.BITSHUFFLE, blocksize=bs),
                          [Shuffle(elementsize=np.dtype(dt).itemsize)]))
    return cases


# v3 arrays as zarr-python 3 writes them: blosc is a bytes->bytes codec with
# an explicit typesize (the element size), and zarr-python 3 picks
# bitshuffle for 1-byte types. Hand-made: the chunks are numcodecs' Blosc
# applied to the element array, so the frame's typesize is the element size.
V3_TYPES = {"|u1": "uint8", "|i1": "int8", "|b1": "bool", "<u2": "uint16", "<i4": "int32", "<f4": "float32", "<f8": "float64"}
V3_CASES = [
    # dtype, chunk, blocksize, cname, clevel, shuffle
    ("|u1", 800, 0, "lz4", 5, "bitshuffle"),
    ("|u1", 40001, 0, "zstd", 1, "bitshuffle"),
    ("|i1", 401, 0, "blosclz", 5, "bitshuffle"),
    ("|i1", 40000, 0, "zstd", 1, "bitshuffle"),
    ("|b1", 401, 0, "lz4", 5, "bitshuffle"),
    ("|b1", 800, 0, "lz4", 5, "bitshuffle"),
    ("<u2", 600, 128, "lz4", 5, "bitshuffle"),
    ("<f4", 800, 0, "blosclz", 5, "bitshuffle"),
    ("<f8", 601, 200, "zstd", 5, "bitshuffle"),
    ("<f4", 600, 128, "lz4", 5, "shuffle"),
]


def write_v3_blosc(path, dtype, n, chunk, bs, cname, clevel, shuffle, data):
    dt = np.dtype(dtype)
    os.makedirs(path)
    codec = Blosc(cname=cname, clevel=clevel, shuffle={"bitshuffle": Blosc.BITSHUFFLE, "shuffle": Blosc.SHUFFLE}[shuffle], blocksize=bs)
    fill = False if dt.kind == "b" else 0
    meta = {
        "zarr_format": 3, "node_type": "array", "shape": [n], "data_type": V3_TYPES[dtype],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}} if dt.itemsize > 1 else {"name": "bytes"},
                   {"name": "blosc", "configuration": {"cname": cname, "clevel": clevel, "shuffle": shuffle,
                                                       "typesize": dt.itemsize, "blocksize": bs}}],
        "attributes": {"made_by": "zarr_helper.py"},
    }
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(meta, f, indent=1)
    os.makedirs(os.path.join(path, "c"))
    for i in range(0, n, chunk):
        c = np.full(chunk, fill, dtype=dt)
        part = data[i:i + chunk]
        c[:len(part)] = part
        enc = codec.encode(c)
        check_compressed(path, enc)
        with open(os.path.join(path, "c", str(i // chunk)), "wb") as f:
            f.write(enc)


def check_compressed(what, frame):
    """A blosc frame that was copied, not compressed, tests no shuffle."""
    if frame[2] & 0x02:
        raise SystemExit("%s: blosc stored the chunk uncompressed (make the values compressible)" % what)


def blosc_head(a):
    return [v.item() if not isinstance(v.item(), float) else repr(v.item()) for v in a[:16]]


def makeblosc(out):
    arrays = {}
    for i, (name, dtype, chunk, comp, filters) in enumerate(blosc_cases()):
        n = chunk * 3 // 2
        data = blosc_values(dtype, n, i)
        z = zarr.open(zarr.DirectoryStore(os.path.join(out, name + ".zarr")), mode="w", shape=(n,), chunks=(chunk,),
                      dtype=dtype, fill_value=0, compressor=comp, filters=filters)
        z[...] = data
        assert np.array_equal(z[...], data), name
        for k in sorted(os.listdir(z.store.path)):
            if not k.startswith("."):
                check_compressed(name + "/" + k, z.store[k])
        arrays[name + ".zarr"] = {"dtype": np.dtype(dtype).str, "shape": [n], "blosc": comp.get_config(),
                                  "filters": [f.get_config() for f in filters or []],
                                  "sha256_le_c": hashlib.sha256(le_bytes(data)).hexdigest(), "head": blosc_head(data)}
    for i, (dtype, chunk, bs, cname, clevel, shuffle) in enumerate(V3_CASES):
        n = chunk * 3 // 2
        name = "v3_%s_%s_%s%d_c%d_b%d" % (V3_TYPES[dtype], shuffle, cname, clevel, chunk, bs)
        data = blosc_values(dtype, n, 100 + i)
        write_v3_blosc(os.path.join(out, name + ".zarr"), dtype, n, chunk, bs, cname, clevel, shuffle, data)
        arrays[name + ".zarr"] = {"dtype": np.dtype(dtype).str, "shape": [n],
                                  "sha256_le_c": hashlib.sha256(le_bytes(data)).hexdigest(), "head": blosc_head(data)}
    # The report's case: u1, lz4 bitshuffle, arange(4000) % 4 (soma read 170 170 170 ...).
    name = "v2_uint8_bitshuffle_arange4000mod4"
    data = (np.arange(4000) % 4).astype("u1")
    z = zarr.open(zarr.DirectoryStore(os.path.join(out, name + ".zarr")), mode="w", shape=(4000,), chunks=(4000,),
                  dtype="u1", compressor=Blosc("lz4", 5, Blosc.BITSHUFFLE))
    z[...] = data
    arrays[name + ".zarr"] = {"dtype": "|u1", "shape": [4000], "sha256_le_c": hashlib.sha256(data.tobytes()).hexdigest(),
                              "head": blosc_head(data)}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"generator": {"script": "zarr_helper.py makeblosc", "zarr": zarr.__version__,
                                 "numcodecs": numcodecs.__version__, "blosc": numcodecs.blosc.VERSION_STRING},
                   "arrays": arrays}, f, indent=1, sort_keys=True)


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
    elif cmd == "makeblosc":
        makeblosc(sys.argv[2])
    elif cmd == "append":
        append(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("unknown command " + cmd)
