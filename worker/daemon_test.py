"""Unit tests of daemon.py (run by TestDaemonPythonUnittest in Go, so
`make test` runs them): python3 -m unittest daemon_test, from worker/."""

import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import daemon

try:
    import numpy
except Exception:  # pragma: no cover
    numpy = None


def frame(head, body=b""):
    hb = json.dumps(head).encode()
    return struct.pack(">IQ", len(hb), len(body)) + hb + body


class FrameTest(unittest.TestCase):
    def test_round_trip(self):
        buf = io.BytesIO()
        daemon.write_frame(buf, {"op": "x", "n": 1}, [b"abc", memoryview(b"de")])
        buf.seek(0)
        head, body = daemon.read_frame(buf)
        self.assertEqual(head, {"op": "x", "n": 1})
        self.assertEqual(bytes(body), b"abcde")
        self.assertIsNone(daemon.read_frame(buf))

    def test_truncated(self):
        whole = frame({"op": "ping"}, b"12345")
        for cut in (3, 12, len(whole) - 1):
            with self.subTest(cut=cut):
                with self.assertRaises(daemon.ProtocolError):
                    daemon.read_frame(io.BytesIO(whole[:cut]))

    def test_head_not_json(self):
        bad = struct.pack(">IQ", 3, 0) + b"{x}"
        with self.assertRaises(daemon.ProtocolError):
            daemon.read_frame(io.BytesIO(bad))

    def test_head_too_large(self):
        bad = struct.pack(">IQ", daemon.MAX_HEAD + 1, 0)
        with self.assertRaises(daemon.ProtocolError):
            daemon.read_frame(io.BytesIO(bad))


class ValueTest(unittest.TestCase):
    def round_trip(self, x):
        enc = daemon.Encoder()
        v = enc.value(x)
        body = b"".join(bytes(p) for p in enc.parts)
        return daemon.decode_value(json.loads(json.dumps(v)), bytearray(body))

    def test_plain(self):
        for x in (None, b"\x00\x01", {"a": [1, 2.5, "s"]}, 3):
            with self.subTest(x=x):
                self.assertEqual(self.round_trip(x), x)

    def test_raw_array(self):
        a = daemon.RawArray("int16", [2], b"\x01\x00\x02\x00")
        got = self.round_trip(a)
        if numpy is None:
            self.assertEqual(got, a)
        else:
            self.assertEqual(got.tolist(), [1, 2])

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_numpy(self):
        for a in (numpy.arange(12, dtype="float32").reshape(3, 4),
                  numpy.arange(6, dtype=">i4").reshape(2, 3),     # big-endian: converted
                  numpy.arange(12, dtype="float64").reshape(3, 4)[:, ::2],  # not contiguous
                  numpy.zeros((0, 3), dtype="uint8"),
                  numpy.array([True, False])):
            with self.subTest(dtype=a.dtype, shape=a.shape):
                got = self.round_trip(a)
                self.assertEqual(got.shape, a.shape)
                self.assertEqual(got.dtype, a.dtype.newbyteorder("<"))
                numpy.testing.assert_array_equal(got, a)

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_object_array_refused(self):
        with self.assertRaises(TypeError):
            daemon.Encoder().value(numpy.array(["a", "b"]))

    def test_nan_object_refused(self):
        # Regression: NaN in a plain object went out as JSON NaN, which Go
        # cannot parse: the reply frame was refused and the worker killed
        # the daemon as if it had crashed.
        with self.assertRaises(ValueError):
            daemon.Encoder().value({"loss": float("nan")})

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_mapped_file(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(numpy.arange(6, dtype="<f4").tobytes())
            f.flush()
            a = daemon.decode_value({"kind": "array", "dtype": "float32", "shape": [2, 3],
                                     "file": f.name, "len": 24}, b"")
            numpy.testing.assert_array_equal(a, numpy.arange(6, dtype="f4").reshape(2, 3))
            a[0, 0] = 42  # copy-on-write: the filter may write, the file stays
            f.seek(0)
            self.assertEqual(numpy.frombuffer(f.read(4), "<f4")[0], 0)
            with self.assertRaises(ValueError):
                daemon.decode_value({"kind": "bytes", "file": f.name, "len": 25}, b"")

    def test_slot(self):
        self.assertEqual(daemon.decode_value({"kind": "slot", "slot": "x"}, b"", {"x": 5}), 5)
        with self.assertRaises(daemon.ProtocolError):
            daemon.decode_value({"kind": "slot", "slot": "y"}, b"", {"x": 5})

    def test_out_of_body(self):
        with self.assertRaises(daemon.ProtocolError):
            daemon.decode_value({"kind": "bytes", "off": 2, "len": 5}, b"abc")


FILTERS = '''
import os, sys
class Echo:
    def __init__(self, greeting="hi"):
        self.greeting = greeting
    def forward(self, x):
        print(self.greeting, "from print")
        os.write(1, b"raw fd 1\\n")
        return x
class Boom:
    def forward(self, x):
        raise ValueError("boom")
'''


class DaemonProcessTest(unittest.TestCase):
    """The daemon as Go runs it: a subprocess speaking frames on stdin/stdout."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(self.tmp.name, "filters.py"), "w") as f:
            f.write(FILTERS)
        self.log = os.path.join(self.tmp.name, "plan.log")
        self.proc = subprocess.Popen([sys.executable, daemon.__file__, "--log", self.log],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        head, _ = daemon.read_frame(self.proc.stdout)
        self.assertEqual(head["hello"]["protocol"], daemon.PROTOCOL)

    def tearDown(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.tmp.cleanup()

    def ask(self, head, parts=()):
        daemon.write_frame(self.proc.stdin, head, parts)
        return daemon.read_frame(self.proc.stdout)

    def test_print_goes_to_log_not_protocol(self):
        r, _ = self.ask({"op": "plan", "plan": "p", "dir": self.tmp.name, "seed": 1,
                         "nodes": [{"id": "e", "file": "filters.py", "class": "Echo",
                                    "config": {"greeting": "hello"}}]})
        self.assertTrue(r["ok"], r)
        r, body = self.ask({"op": "call", "node": "e", "method": "forward",
                            "args": [{"kind": "bytes", "off": 0, "len": 3}]}, [b"abc"])
        self.assertTrue(r["ok"], r)
        self.assertEqual(bytes(body), b"abc")
        r, _ = self.ask({"op": "end"})
        self.assertTrue(r["ok"])
        with open(self.log) as f:
            log = f.read()
        self.assertIn("hello from print", log)
        self.assertIn("raw fd 1", log)

    def test_each_plan_appends_to_the_log_without_leaking_descriptors(self):
        # The log is opened once, at start: a plan opens and dup2s
        # nothing, three plans leave as many open descriptors as one, and
        # the part of the log written while a plan ran (what soma-worker
        # reads, by the sizes before and after) is that plan's output only.
        fds = lambda: len(os.listdir("/proc/%d/fd" % self.proc.pid))
        counts = []
        for i in range(3):
            before = os.path.getsize(self.log)
            r, _ = self.ask({"op": "batch", "ops": [
                {"op": "plan", "plan": "p%d" % i, "dir": self.tmp.name, "seed": 1,
                 "nodes": [{"id": "e", "file": "filters.py", "class": "Echo",
                            "config": {"greeting": "plan %d" % i}}]},
                {"op": "call", "node": "e", "method": "forward", "args": [{"kind": "none"}]},
                {"op": "end", "always": True}]})
            self.assertTrue(all(x["ok"] for x in r["replies"]), r)
            with open(self.log) as f:
                f.seek(before)
                self.assertEqual(f.read(), "plan %d from print\nraw fd 1\n" % i)
            counts.append(fds())
        self.assertEqual(counts[0], counts[2], "descriptors leak per plan")

    def test_bad_arguments_refused(self):
        p = subprocess.run([sys.executable, daemon.__file__, "--bogus"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"usage: daemon.py [--log PATH]", p.stderr)

    def test_exception_has_traceback(self):
        r, _ = self.ask({"op": "plan", "plan": "p", "dir": self.tmp.name, "seed": 1,
                         "nodes": [{"id": "b", "file": "filters.py", "class": "Boom"}]})
        self.assertTrue(r["ok"], r)
        r, _ = self.ask({"op": "call", "node": "b", "method": "forward", "args": [{"kind": "none"}]})
        self.assertFalse(r["ok"])
        self.assertEqual(r["error"], "ValueError: boom")
        self.assertIn("filters.py", r["traceback"])
        self.assertIn("raise ValueError", r["traceback"])
        r, _ = self.ask({"op": "ping"})
        self.assertTrue(r["pong"])

    def test_batch_stops_at_failure_but_ends(self):
        r, body = self.ask({"op": "batch", "ops": [
            {"op": "plan", "plan": "p", "dir": self.tmp.name, "seed": 1,
             "nodes": [{"id": "e", "file": "filters.py", "class": "Echo"},
                       {"id": "b", "file": "filters.py", "class": "Boom"}]},
            {"op": "put", "slot": "input", "value": {"kind": "bytes", "off": 0, "len": 2}},
            {"op": "call", "node": "e", "method": "fit", "args": [], "if_trainable": True},
            {"op": "call", "node": "e", "method": "forward", "args": [{"kind": "slot", "slot": "input"}], "keep": "e"},
            {"op": "call", "node": "b", "method": "forward", "args": [{"kind": "slot", "slot": "e"}]},
            {"op": "call", "node": "e", "method": "forward", "args": [{"kind": "slot", "slot": "input"}]},
            {"op": "end", "always": True},
        ]}, [b"hi"])
        self.assertTrue(r["ok"], r)
        got = [(x["ok"], x.get("skipped", False), x.get("not_run", False)) for x in r["replies"]]
        self.assertEqual(got, [(True, False, False), (True, False, False), (True, True, False),
                               (True, False, False), (False, False, False), (False, False, True),
                               (True, False, False)])
        v = r["replies"][3]["value"]
        self.assertEqual(bytes(body[v["off"]:v["off"] + v["len"]]), b"hi")
        self.assertEqual(r["replies"][4]["error"], "ValueError: boom")

    def test_unknown_class_and_method(self):
        r, _ = self.ask({"op": "plan", "plan": "p", "dir": self.tmp.name, "seed": 1,
                         "nodes": [{"id": "x", "file": "filters.py", "class": "Nope"}]})
        self.assertFalse(r["ok"])
        self.assertIn("has no class Nope", r["error"])
        r, _ = self.ask({"op": "call", "node": "x", "method": "forward", "args": []})
        self.assertFalse(r["ok"])
        self.assertIn("no node", r["error"])


if __name__ == "__main__":
    unittest.main()
