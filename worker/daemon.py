"""soma-worker's Python daemon: hosts a plan's filters in one interpreter.

soma-worker (Go) starts this file with the interpreter of a plan's
environment and talks to it over its stdin and stdout with length-prefixed
frames. It uses only Python's standard library, so it runs in any venv;
numpy is used for arrays when the environment has it.

A frame is a 12-byte prefix, then a UTF-8 JSON head, then a binary body:

    >I  length of the head
    >Q  length of the body
    head  {"op": ..., ...}; values refer to byte ranges of the body
    body  raw array and bytes payloads, concatenated

Values in a head:

    {"kind": "none"}
    {"kind": "array", "dtype": "float32", "shape": [2, 3], "off": 0, "len": 24}
    {"kind": "bytes", "off": 24, "len": 5}
    {"kind": "array", ..., "file": PATH, "len": N}   a blob's file, mapped copy-on-write
    {"kind": "object", "object": <JSON>}
    {"kind": "slot", "slot": "scale"}   a value the daemon kept (below)

Arrays are little-endian, C order. An incoming array is a numpy view of
the received body (no copy); an outgoing one is written from its buffer.

Requests (Go -> daemon) and their replies ({"ok": true, ...} or
{"ok": false, "error": ..., "traceback": ..., "cancelled": bool}):

    plan  {"plan", "dir", "seed", "nodes": [{"id","file","class","config"}]}
          loads the files from dir, builds each node; replies with
          {"nodes": {id: {"trainable": bool}}}
    put   {"slot", "value"}  keeps a value under a name for later calls
    call  {"node", "method", "args": [values], "keep": slot, "reply": bool}
          method is fit, forward, get_state or set_state; keeps the
          result under "keep" if given (so that data between filters
          stays in Python), and replies {"value": value} unless
          "reply" is false
    end   drops the plan's filters and flushes the log
    ping  replies {"pong": true}
    batch {"ops": [request, ...]}  runs several requests with one body,
          replying {"replies": [reply, ...]} (see op_batch)

At start the daemon sends {"ok": true, "hello": {"protocol": 1, ...}}.

The protocol owns the real stdin and stdout: at start they are moved to
other descriptors, descriptor 0 becomes /dev/null and descriptors 1 and 2
the daemon's log file (`--log PATH`, opened for append; without it, 1 is
a copy of 2), so that a filter's print (or a C library's printf, or
faulthandler's dump of a crash) can never corrupt a frame. They stay so
for the daemon's life: soma-worker reads each plan's output as the part
of the log written while the plan ran (it notes the size before and
after), so a plan costs no open, dup2 or close here. (Until pipe protocol
2, each plan's head named a log file of its own, opened and dup2'd over 1
and 2 per plan and restored after: 7 syscalls and about 20 us a plan, and
a file left behind per plan id.)

Warm reuse: soma-worker keeps a daemon for the next plan of the same
environment. The plan's files live in a folder named by their digests;
their modules stay imported while plans ship the same files, so that a
warm plan pays no import (module-level state carries over; filter
instances never do: each plan builds its own). A plan with other files
makes the daemon forget the old modules first.

SIGINT interrupts a call in progress (KeyboardInterrupt) and is answered
as a cancelled call; outside a call it is ignored, so a cancel that
arrives just after a call returned cannot tear a frame.
"""

import faulthandler
import importlib.util
import json
import mmap
import os
import random
import signal
import struct
import sys
import traceback

PROTOCOL = 2
PREFIX = struct.Struct(">IQ")
MAX_HEAD = 64 << 20

try:  # numpy is optional: without it arrays arrive as RawArray.
    import numpy
except Exception:  # pragma: no cover - depends on the environment
    numpy = None


class ProtocolError(Exception):
    """A frame that cannot be read: the daemon exits, Go replaces it."""


class RawArray:
    """An array without numpy: dtype, shape and little-endian bytes."""

    def __init__(self, dtype, shape, data):
        self.dtype = dtype
        self.shape = tuple(shape)
        self.data = data

    def __eq__(self, other):
        return (isinstance(other, RawArray) and self.dtype == other.dtype
                and self.shape == other.shape and bytes(self.data) == bytes(other.data))

    def __repr__(self):
        return "RawArray(%r, %r, %d bytes)" % (self.dtype, self.shape, len(self.data))


# --- frames -----------------------------------------------------------------

def read_exact(f, n):
    """Reads exactly n bytes into a bytearray, or raises ProtocolError."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise ProtocolError("truncated frame: %d of %d bytes" % (got, n))
        got += k
    return buf


def read_frame(f):
    """Returns (head, body) or None at a clean end of input."""
    first = f.read(1)
    if not first:
        return None
    rest = read_exact(f, PREFIX.size - 1)
    hlen, blen = PREFIX.unpack(bytes(first) + bytes(rest))
    if hlen > MAX_HEAD:
        raise ProtocolError("frame head of %d bytes (limit %d)" % (hlen, MAX_HEAD))
    head = read_exact(f, hlen)
    body = read_exact(f, blen)
    try:
        obj = json.loads(head.decode("utf-8"))
    except ValueError as e:
        raise ProtocolError("frame head is not JSON: %s" % e)
    if not isinstance(obj, dict):
        raise ProtocolError("frame head is not a JSON object")
    return obj, body


def write_frame(f, head, parts=()):
    """Writes head and the buffers parts (whose offsets head refers to)."""
    hb = json.dumps(head, separators=(",", ":")).encode("utf-8")
    total = sum(len(p) for p in parts)
    f.write(PREFIX.pack(len(hb), total))
    f.write(hb)
    for p in parts:
        f.write(p)
    f.flush()


# --- values -----------------------------------------------------------------

def decode_value(v, body, slots=None):
    kind = v.get("kind")
    if kind == "slot":
        if slots is None or v.get("slot") not in slots:
            raise ProtocolError("no slot %r" % v.get("slot"))
        return slots[v["slot"]]
    if kind == "none":
        return None
    if kind == "object":
        return v.get("object")
    if v.get("file"):
        data = map_file(v["file"], int(v["len"]))
    else:
        data = body_range(v, body)
    if kind == "bytes":
        return bytes(data)
    if kind == "array":
        dtype, shape = v["dtype"], v["shape"]
        if numpy is None:
            return RawArray(dtype, shape, data)
        return numpy.frombuffer(data, dtype=numpy.dtype(dtype).newbyteorder("<")).reshape(shape)
    raise ProtocolError("unknown value kind %r" % kind)


def map_file(path, n):
    """Maps a blob's file copy-on-write (soma-worker has checked its digest;
    blob files never change): a large input by reference costs no copy,
    and a filter may still write into its array (the file never changes)."""
    if n == 0:
        return memoryview(b"")
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    if len(mm) != n:
        raise ValueError("%s has %d bytes, want %d" % (path, len(mm), n))
    return memoryview(mm)


def body_range(v, body):
    off, n = int(v["off"]), int(v["len"])
    if off < 0 or n < 0 or off + n > len(body):
        raise ProtocolError("value [%d:%d] outside a body of %d bytes" % (off, off + n, len(body)))
    return memoryview(body)[off:off + n]


class Encoder:
    """Collects the body buffers of one outgoing frame."""

    def __init__(self):
        self.parts = []
        self.off = 0

    def _add(self, buf):
        off = self.off
        self.parts.append(buf)
        self.off += len(buf)
        return off

    def value(self, x):
        if x is None:
            return {"kind": "none"}
        if isinstance(x, (bytes, bytearray, memoryview)) and not isinstance(x, RawArray):
            b = memoryview(x).cast("B")
            return {"kind": "bytes", "off": self._add(b), "len": len(b)}
        if isinstance(x, RawArray):
            b = memoryview(x.data).cast("B")
            return {"kind": "array", "dtype": x.dtype, "shape": list(x.shape),
                    "off": self._add(b), "len": len(b)}
        if numpy is not None and isinstance(x, numpy.generic):
            x = numpy.asarray(x)
        if numpy is not None and isinstance(x, numpy.ndarray):
            if x.dtype.kind not in "biuf":
                raise TypeError("array of dtype %s cannot cross the wire (numeric and bool only)" % x.dtype)
            x = numpy.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
            b = memoryview(x).cast("B") if x.size else b""
            return {"kind": "array", "dtype": x.dtype.name, "shape": list(x.shape),
                    "off": self._add(b), "len": len(b)}
        try:
            # allow_nan=False: Go's JSON refuses NaN, which would tear the
            # reply frame and make the daemon look dead.
            json.dumps(x, allow_nan=False)
        except ValueError:
            raise ValueError("a value with NaN or Infinity cannot cross as a plain object; return a numpy array")
        return {"kind": "object", "object": x}


# --- the daemon -------------------------------------------------------------

class Daemon:
    def __init__(self, rfile, wfile):
        self.rfile = rfile
        self.wfile = wfile
        self.plan = None
        self.nodes = {}
        self.slots = {}
        self.loaded_dir = None  # the folder whose modules are imported
        self.modules = {}
        self.in_call = False

    # signals

    def on_sigint(self, signum, frame):
        if self.in_call:
            raise KeyboardInterrupt()

    # log

    def flush_log(self):
        """Writes what the plan printed out to the log before the reply,
        so that soma-worker finds all of it there."""
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass

    # ops

    def op_ping(self, head, body, enc):
        return {"pong": True}

    def op_plan(self, head, body, enc):
        self.op_end(head, body, enc)
        self.plan = head["plan"]
        if head["dir"] != self.loaded_dir:
            self.forget_modules()
            self.loaded_dir = head["dir"]
        seed = int(head.get("seed") or 0)
        random.seed(seed)
        if numpy is not None:
            numpy.random.seed(seed % (1 << 32))
        info = {}
        for n in head["nodes"]:
            fname = n["file"]
            if fname not in self.modules:
                # Importing runs the user's module code: interruptible too.
                self.modules[fname] = self.call_user(lambda: load_module(head["dir"], fname))
            mod = self.modules[fname]
            cls = getattr(mod, n["class"], None)
            if cls is None:
                raise LookupError("file %s has no class %s" % (fname, n["class"]))
            obj = self.call_user(lambda: cls(**(n.get("config") or {})))
            self.nodes[n["id"]] = obj
            info[n["id"]] = {"trainable": self.trainable(n["id"])}
        return {"nodes": info}

    def op_call(self, head, body, enc):
        node = self.nodes.get(head["node"])
        if node is None:
            raise LookupError("no node %r in the current plan" % head["node"])
        method = head["method"]
        if method not in ("fit", "forward", "get_state", "set_state"):
            raise ValueError("method %r is not part of the filter contract" % method)
        fn = getattr(node, method, None)
        if fn is None:
            raise AttributeError("filter %s has no method %s" % (type(node).__name__, method))
        args = [decode_value(a, body, self.slots) for a in head.get("args", [])]
        out = self.call_user(lambda: fn(*args))
        if method == "get_state" and not isinstance(out, (bytes, bytearray, memoryview)):
            raise TypeError("get_state of %s returned %s, want bytes" % (type(node).__name__, type(out).__name__))
        if head.get("keep"):
            self.slots[head["keep"]] = out
        if head.get("reply", True) is False:
            return {"value": {"kind": "none"}}
        return {"value": enc.value(out)}

    def op_put(self, head, body, enc):
        self.slots[head["slot"]] = decode_value(head["value"], body, self.slots)
        return {}

    def op_end(self, head, body, enc):
        self.nodes = {}
        self.slots = {}
        self.plan = None
        self.flush_log()
        return {}

    def forget_modules(self):
        """Forgets the imported plan modules, so that a plan with other
        files (maybe other versions of the same names) imports its own."""
        if self.loaded_dir is None:
            return
        prefix = os.path.join(self.loaded_dir, "")
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None) or ""
            if f.startswith(prefix):
                del sys.modules[name]
        while self.loaded_dir in sys.path:
            sys.path.remove(self.loaded_dir)
        self.modules = {}
        self.loaded_dir = None

    def call_user(self, fn):
        self.in_call = True
        try:
            return fn()
        finally:
            self.in_call = False
            self.flush_log()

    def op_batch(self, head, body, enc):
        """Runs head["ops"] in order with one body and one reply, so that
        a plan costs one round trip on the pipe. After an op fails, the
        rest are not run, except those marked "always" (end). A call
        marked "if_trainable" is skipped for a node without fit and
        get_state."""
        replies = []
        failed = False
        for sub in head["ops"]:
            if failed and not sub.get("always"):
                replies.append({"ok": False, "not_run": True})
                continue
            if sub.get("if_trainable") and not self.trainable(sub.get("node")):
                replies.append({"ok": True, "skipped": True})
                continue
            r = self.handle_with(sub, body, enc)
            failed = failed or not r["ok"]
            replies.append(r)
        return {"replies": replies}

    def trainable(self, node_id):
        node = self.nodes.get(node_id)
        return callable(getattr(node, "fit", None)) and callable(getattr(node, "get_state", None))

    def handle(self, head, body):
        enc = Encoder()
        reply = self.handle_with(head, body, enc)
        return reply, enc.parts

    def handle_with(self, head, body, enc):
        """Runs one op; its reply's values refer to enc's buffers."""
        op = head.get("op")
        fn = getattr(self, "op_" + str(op), None)
        try:
            if fn is None:
                raise ValueError("unknown op %r" % op)
            reply = fn(head, body, enc)
            reply["ok"] = True
            return reply
        except KeyboardInterrupt:
            return {"ok": False, "cancelled": True, "error": "interrupted"}
        except ProtocolError:
            raise
        except BaseException as e:  # SystemExit from a filter too
            tb = traceback.format_exc()
            try:
                sys.stderr.write(tb)
                sys.stderr.flush()
            except Exception:
                pass
            return {"ok": False, "error": "%s: %s" % (type(e).__name__, e), "traceback": tb}

    def serve(self):
        write_frame(self.wfile, {"ok": True, "hello": {
            "protocol": PROTOCOL, "python": sys.version.split()[0], "pid": os.getpid(),
            "numpy": getattr(numpy, "__version__", None)}})
        while True:
            frame = read_frame(self.rfile)
            if frame is None:
                return
            head, body = frame
            reply, parts = self.handle(head, body)
            write_frame(self.wfile, reply, parts)


def load_module(folder, fname):
    """Imports folder/fname under a name of its own."""
    if os.path.basename(fname) != fname or not fname.endswith(".py"):
        raise ValueError("file name %r: want a plain NAME.py" % fname)
    path = os.path.join(folder, fname)
    name = "soma_plan_%s_%s" % (os.path.basename(folder), fname[:-3])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the plan's other files import each other
    spec.loader.exec_module(mod)
    return mod


def main():
    # Move the protocol off descriptors 0 and 1 before any user code runs.
    rfile = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    wfile = os.fdopen(os.dup(1), "wb", buffering=1 << 16)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--log":
        # Created here, not by soma-worker: what this process fails to say
        # before this point still reaches the worker's stderr.
        log = os.open(args[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    elif args:
        sys.stderr.write("soma daemon: usage: daemon.py [--log PATH], not %r\n" % args)
        sys.exit(2)
    else:
        os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr)
    d = Daemon(rfile, wfile)
    signal.signal(signal.SIGINT, d.on_sigint)
    try:
        d.serve()
    except ProtocolError as e:
        sys.stderr.write("soma daemon: %s\n" % e)
        sys.exit(3)


if __name__ == "__main__":
    main()
