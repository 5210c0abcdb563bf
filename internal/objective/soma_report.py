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
(report(step, value, wait=False) writes its reports and reads the verdicts that have
 come, without waiting, every 64 reports or 10 ms: a write and a look at fd 4 on every
 step cost a fast loop more than its step)
"""

import atexit
import os
import select
import time

__all__ = ["report", "final", "params"]

_out = None
_in = None  # fd $SOMA_CONTROL_FD, read raw (select() must see what is unread)
_buf = b""
_pending = 0  # reports whose verdict has not been read yet
_last = ""  # the last verdict read
_pruned = False  # a verdict said prune
_looked = 0.0  # when report(wait=False) last looked for verdicts (time.monotonic())
_since = 0  # reports since then
_held = []  # report lines held back by report(wait=False), not written yet

# report(wait=False) looks for verdicts after _LOOK_EVERY reports or
# _LOOK_AFTER seconds, whichever comes first: a loop slower than that looks
# on every step, as before; a fast one sees a prune at most this late.
_LOOK_EVERY = 64
_LOOK_AFTER = 0.010


def _fds():
    global _out, _in
    if _out is None and os.environ.get("SOMA_REPORT_FD"):
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
    """Write the reports held back by report(wait=False), in one write(2)."""
    global _held, _pending
    if not _held:
        return
    b, n = b"".join(_held), len(_held)
    _held = []
    fd = _out.fileno()
    while b:
        b = b[os.write(fd, b) :]
    if _in is not None:
        _pending += n


def report(step, value, wait=True):
    """Report an intermediate value at an integer step; return True if the trial should stop.

    With wait=False, report() does not wait for this step's verdict: it
    returns True once any verdict that has come says prune (a step or a
    few later than wait=True would). It also holds the report back and
    writes the reports together, with a look for verdicts, every 64
    reports or 10 ms (and at final(), a report(wait=True), or the
    interpreter's exit): a write(2) and a select(2) per step cost a fast
    loop more than its own step (issue 13). So a fast loop learns of a
    prune up to that late, and a process killed by a signal loses up to
    that many reports. A loop that reports every step then never waits
    for soma-trial."""
    out, inp = _fds()
    value = float(value)
    if out is None:
        return False
    global _looked, _since
    # %r of a float in bytes is its repr: the shortest form that reads back
    # the same, and nan/inf/-inf as they are.
    _held.append(b"report %d %r\n" % (int(step), value))
    if wait:
        _send()
        if inp is None:
            return False
        _verdicts(True)
        return _last == "prune"
    _since += 1
    if _since >= _LOOK_EVERY or time.monotonic() - _looked >= _LOOK_AFTER:
        _send()
        if inp is not None:
            _verdicts(False)
        _looked, _since = time.monotonic(), 0
    return _pruned


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
