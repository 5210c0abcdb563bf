"""soma_report: talk to soma-trial from a Python objective. Standard library only.

    from soma_report import report, final

    for epoch in range(epochs):
        acc = train_one_epoch()
        if report(epoch, acc):      # True: soma-trial's pruner says stop
            break
    final(acc)

Outside soma-trial (no SOMA_REPORT_FD), report() returns False and final()
prints the score, so the same script runs by hand.

The protocol, for other languages (one line each, UTF-8, newline-ended):
  on fd $SOMA_REPORT_FD you write   "report <step> <value>"  or  "final <score>"
  after each report, on fd $SOMA_CONTROL_FD you read one line: "continue" or "prune"
  (a batch of reports may go as one line, "reports <steps> <values>": the
  base64 of n little-endian int64 steps, then of their n little-endian
  float64 values; it gets one verdict, "prune" if any of its steps pruned)

report(step, value, wait=False) keeps its reports in two arrays and sends
them as one "reports" line, with a look for verdicts, every 10 ms: a
write(2), a select(2) and a float's text on every step cost a fast loop
more than its own step (issue 13 item 8).
"""

import atexit
import binascii
import os
import select
import sys
import time
from array import array

__all__ = ["report", "final", "params"]

_checked = False  # the environment was read (_fds)
_out = None
_in = None  # fd $SOMA_CONTROL_FD, read raw (select() must see what is unread)
_buf = b""
_pending = 0  # lines whose verdict has not been read yet
_last = ""  # the last verdict read
_pruned = False  # a verdict said prune
_steps = array("q")  # reports held back by report(wait=False), not sent yet
_values = array("d")
_step_append = _steps.append  # bound once: the fast path's two calls
_value_append = _values.append
_sent = 0.0  # when the held reports were last sent (time.monotonic())
_ticked = 0.0  # when report(wait=False) last looked at the clock
_calls = 0  # report(wait=False) calls since then
_every = 1  # calls between looks at the clock

# report(wait=False) sends what it holds, and looks for verdicts, once
# _SEND_AFTER has passed (or _HOLD_MAX reports are held: a line of 87 KB,
# under malloc's mmap threshold, so its buffers are reused rather than
# page-faulted in afresh on every send). It looks at the
# clock only every _every calls, _every chosen so that those calls take
# about _TICK: a loop slower than that looks on every step, as before; a
# fast one does not pay for a clock read per step. A loop that slows down
# suddenly is late by at most _EVERY_MAX steps.
_SEND_AFTER = 0.010
_TICK = 0.001
_EVERY_MAX = 64
_HOLD_MAX = 4096


def _fds():
    global _out, _in, _checked
    if not _checked:
        # Looked up once: os.environ.get on every report cost a loop run
        # by hand (no soma-trial) ~0.5 us a step.
        _checked = True
        if os.environ.get("SOMA_REPORT_FD"):
            _out = os.fdopen(int(os.environ["SOMA_REPORT_FD"]), "w", buffering=1)
            if os.environ.get("SOMA_CONTROL_FD"):
                _in = int(os.environ["SOMA_CONTROL_FD"])
            atexit.register(_send)  # what report(wait=False) held back
    return _out, _in


def params():
    """The trial's point as a dict (from SOMA_PARAMS), or {} outside soma."""
    import json

    return json.loads(os.environ.get("SOMA_PARAMS", "{}"))


def _verdicts(block):
    """Read the verdicts of earlier reports: all of them if block, else
    those already there."""
    global _buf, _pending, _last, _pruned
    while _pending:
        i = _buf.find(b"\n")
        if i >= 0:
            _last, _buf = _buf[:i].strip().decode(), _buf[i + 1 :]
            _pending -= 1
            _pruned = _pruned or _last == "prune"
            continue
        if not block and not select.select([_in], [], [], 0)[0]:
            return
        chunk = os.read(_in, 4096)
        if not chunk:  # fd 4 closed: no more verdicts
            _pending, _last = 0, ""
            return
        _buf += chunk


def _send():
    """Send the reports held back by report(wait=False) as one line."""
    global _pending
    if not _steps:
        return
    if sys.byteorder != "little":
        _steps.byteswap()
        _values.byteswap()
    b = b"".join(
        [
            b"reports ",
            binascii.b2a_base64(memoryview(_steps).cast("B"), newline=False),
            b" ",
            binascii.b2a_base64(memoryview(_values).cast("B")),
        ]
    )
    # Emptied in place: _step_append and _value_append stay bound to them.
    del _steps[:]
    del _values[:]
    fd = _out.fileno()
    while b:
        b = b[os.write(fd, b) :]
    if _in is not None:
        _pending += 1


def _tick():
    """report(wait=False)'s look at the clock, every _every calls."""
    global _sent, _ticked, _calls, _every
    now = time.monotonic()
    per = (now - _ticked) / _calls
    _every = max(1, min(_EVERY_MAX, int(_TICK / per) if per > 0 else _EVERY_MAX))
    _ticked, _calls = now, 0
    if now - _sent >= _SEND_AFTER or len(_steps) >= _HOLD_MAX:
        _send()
        if _in is not None:
            _verdicts(False)
        _sent = now


def report(step, value, wait=True):
    """Report an intermediate value at an integer step; return True if the trial should stop.

    With wait=False, report() does not wait for this step's verdict: it
    returns True once any verdict that has come says prune. It holds the
    report back and sends the held ones together, with a look for
    verdicts, every 10 ms (and at final(), a report(wait=True), or the
    interpreter's exit): a write(2), a select(2) and a float's text per
    step cost a fast loop more than its own step (issue 13). So a loop
    learns of a prune up to 10 ms (or, for a loop that suddenly slows
    down, 64 steps) late, and a process killed by a signal loses the
    reports of up to that long. A loop that reports every step then
    never waits for soma-trial."""
    global _calls, _pending
    if not wait and _out is not None:
        # The fast path: two appends (the arrays check the types: an
        # integer step, a number for the value) and a count.
        try:
            _step_append(step)
        except TypeError:
            _step_append(int(step))
        try:
            _value_append(value)
        except TypeError:
            _value_append(float(value))
        _calls += 1
        if _calls >= _every:
            _tick()
        return _pruned
    out, inp = _fds()
    value = float(value)
    step = int(step)
    if out is None:
        return False
    if not wait:
        return report(step, value, wait=False)
    _send()
    # %r of a float in bytes is its repr: the shortest form that reads back
    # the same, and nan/inf/-inf as they are.
    b = b"report %d %r\n" % (step, value)
    fd = out.fileno()
    while b:
        b = b[os.write(fd, b) :]
    if inp is None:
        return False
    _pending += 1
    _verdicts(True)
    return _last == "prune"


def final(score, *more):
    """Report the trial's final score (call once, at the end).

    A study with several objectives takes one score per metric, in the
    spec's order: final(error, latency_ms).
    """
    out, _ = _fds()
    text = " ".join("%r" % float(x) for x in (score,) + more)
    if out is None:
        print(text)
        return
    _send()
    out.write("final %s\n" % text)
    out.flush()
