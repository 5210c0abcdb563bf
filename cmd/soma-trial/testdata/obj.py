"""Test objective: f = (x-1)^2 + (y+2)^2, reported over STEPS steps.

Writes <MARKS>/<trial>.<attempt>.start when it starts and
<MARKS>/<trial>.<attempt>.done (holding the score) when it finishes.
SLOW_TRIAL=n makes trial n (attempt 0 only) sleep SLOW_SECONDS per step.
Its $SOMA_TRIAL_DIR must exist, and be empty on attempt 0 (soma-trial
reuses emptied folders). CHECKPOINT_TRIAL=n: an attempt of trial n that finds
$SOMA_TRIAL_DIR/ckpt writes <MARKS>/<trial>.<attempt>.resumed with its
content; every attempt writes ckpt. KEEP_TRIAL=n: trial n leaves a file.
"""
import os, sys, time
from soma_report import report, final, params

p = params()
x, y = float(sys.argv[1]), float(sys.argv[2])
assert abs(x - p["x"]) < 1e-12 and abs(y - p["y"]) < 1e-12, (sys.argv, p)
trial, attempt = os.environ["SOMA_TRIAL"], os.environ["SOMA_ATTEMPT"]
marks = os.environ["MARKS"]
tdir = os.environ["SOMA_TRIAL_DIR"]
assert os.path.isdir(tdir), tdir
assert attempt != "0" or not os.listdir(tdir), (tdir, os.listdir(tdir))
if os.environ.get("CHECKPOINT_TRIAL") == trial:
    ckpt = os.path.join(tdir, "ckpt")
    if os.path.exists(ckpt):
        open(os.path.join(marks, f"{trial}.{attempt}.resumed"), "w").write(open(ckpt).read())
    open(ckpt, "w").write(f"{trial}.{attempt}")
if os.environ.get("KEEP_TRIAL") == trial:
    open(os.path.join(tdir, "keep"), "w").write(trial)
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
