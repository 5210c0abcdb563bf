"""Test objective: f = (x-1)^2 + (y+2)^2, reported over STEPS steps.

Writes <MARKS>/<trial>.<attempt>.start when it starts and
<MARKS>/<trial>.<attempt>.done (holding the score) when it finishes.
SLOW_TRIAL=n makes trial n (attempt 0 only) sleep SLOW_SECONDS per step.
"""
import os, sys, time
from soma_report import report, final, params

p = params()
x, y = float(sys.argv[1]), float(sys.argv[2])
assert abs(x - p["x"]) < 1e-12 and abs(y - p["y"]) < 1e-12, (sys.argv, p)
trial, attempt = os.environ["SOMA_TRIAL"], os.environ["SOMA_ATTEMPT"]
marks = os.environ["MARKS"]
open(os.path.join(marks, f"{trial}.{attempt}.start"), "w").write(str(os.getpid()))
slow = os.environ.get("SLOW_TRIAL") == trial and attempt == "0"
score = (x - 1) ** 2 + (y + 2) ** 2
steps = int(os.environ.get("STEPS", "3"))
for s in range(steps):
    time.sleep(float(os.environ.get("SLOW_SECONDS", "1")) if slow else 0.01)
    if report(s, score + (steps - s)):
        sys.exit(0)
final(score)
open(os.path.join(marks, f"{trial}.{attempt}.done"), "w").write(repr(score))
