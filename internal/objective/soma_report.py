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
"""

import math
import os

__all__ = ["report", "final", "params"]

_out = None
_in = None


def _fds():
    global _out, _in
    if _out is None and os.environ.get("SOMA_REPORT_FD"):
        _out = os.fdopen(int(os.environ["SOMA_REPORT_FD"]), "w", buffering=1)
        if os.environ.get("SOMA_CONTROL_FD"):
            _in = os.fdopen(int(os.environ["SOMA_CONTROL_FD"]), "r")
    return _out, _in


def params():
    """The trial's point as a dict (from SOMA_PARAMS), or {} outside soma."""
    import json

    return json.loads(os.environ.get("SOMA_PARAMS", "{}"))


def report(step, value):
    """Report an intermediate value at an integer step; return True if the trial should stop."""
    out, inp = _fds()
    value = float(value)
    if out is None:
        return False
    out.write("report %d %s\n" % (int(step), repr(value) if math.isfinite(value) else str(value)))
    out.flush()
    if inp is None:
        return False
    verdict = inp.readline().strip()
    return verdict == "prune"


def final(score):
    """Report the trial's final score (call once, at the end)."""
    out, _ = _fds()
    score = float(score)
    if out is None:
        print(score)
        return
    out.write("final %r\n" % score)
    out.flush()
