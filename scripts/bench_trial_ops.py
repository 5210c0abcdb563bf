"""Counts the file-server operations in strace logs (scripts/bench-trial-ops.sh).

    bench_trial_ops.py DIR N floor.log soma.log

Each log is `strace -f -y -o LOG` of one runner doing N trials in DIR. A
call counts when the file it acts on is under DIR: its absolute path
argument, or else the folder or file its first descriptor names (-y
prints it: fsync(5</DIR/names/x>)). So the objective's own loader and
libraries, and soma's reads of /proc and /etc, are not counted: only what
reaches the store's filesystem (on NFS, the file server). Prints one
markdown table of operations per trial, floor beside soma.
"""
import collections
import re
import sys

KINDS = [
    # (kind, syscalls)
    ("create", None),  # an open with O_CREAT
    ("open", ("open", "openat", "openat2")),
    ("link", ("link", "linkat")),
    ("rename", ("rename", "renameat", "renameat2")),
    ("unlink", ("unlink", "unlinkat", "rmdir")),
    ("mkdir", ("mkdir", "mkdirat")),
    ("fsync", ("fsync", "fdatasync")),
    ("readdir", ("getdents64", "getdents")),
    ("stat", ("stat", "lstat", "fstat", "newfstatat", "fstatat64", "statx")),
    ("setattr", ("utimensat", "futimesat", "utimes", "chmod", "fchmod", "fchmodat")),
]
KIND_OF = {sc: k for k, scs in KINDS if scs for sc in scs}

CALL = re.compile(r"^(?:\[pid\s+)?\d+\]?\s+([a-z0-9_]+)\((.*)$")


def target(args):
    """The file a call acts on: its path argument if absolute, else the
    folder or file its first descriptor names (-y), joined with a
    relative path argument; None if neither is known."""
    m = re.match(r'\s*"([^"]*)"', args)
    if m:
        return m.group(1) if m.group(1).startswith("/") else None
    m = re.match(r'\s*(?:AT_FDCWD|-?\d+)<([^>]*)>(?:,\s*"([^"]*)")?', args)
    if not m:
        return None
    fd_path, rel = m.group(1), m.group(2)
    if rel is None or rel == "":
        return fd_path
    if rel.startswith("/"):
        return rel
    return fd_path + "/" + rel


def count(path, top):
    c = collections.Counter()
    with open(path, errors="replace") as f:
        for line in f:
            m = CALL.match(line)
            if not m:
                continue  # "<... resumed>", signals, exits
            sc, args = m.group(1), m.group(2)
            kind = KIND_OF.get(sc)
            if kind is None:
                continue
            t = target(args)
            if t is None or not (t == top or t.startswith(top + "/")):
                continue
            if kind == "open" and "O_CREAT" in args:
                kind = "create"
            c[kind] += 1
    return c


def main():
    top, n, floor_log, soma_log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    fl, so = count(floor_log, top), count(soma_log, top)
    print("| operation | floor per trial | soma-trial per trial | soma - floor |")
    print("|---|---:|---:|---:|")
    tf = ts = 0
    for k, _ in KINDS:
        a, b = fl[k] / n, so[k] / n
        tf, ts = tf + a, ts + b
        print(f"| {k} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")
    print(f"| **all** | **{tf:.2f}** | **{ts:.2f}** | **{ts - tf:+.2f}** |")


if __name__ == "__main__":
    main()
