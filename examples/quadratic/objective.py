#!/usr/bin/env python3
"""A noisy quadratic "trained" over 10 epochs. Python standard library only.

soma-trial runs it as:  python3 objective.py --x {x} --y {y} --noise {noise}
It reports the loss after each epoch (the pruner may stop it early) and the
final loss at the end. Run by hand, it just prints the final loss.
"""
import argparse
import math
import os
import random
import time

from soma_report import final, report  # put on PYTHONPATH by soma-trial

ap = argparse.ArgumentParser()
ap.add_argument("--x", type=float, required=True)
ap.add_argument("--y", type=float, required=True)
ap.add_argument("--noise", choices=["low", "high"], default="low")
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--sleep", type=float, default=0.05, help="seconds per epoch")
a = ap.parse_args()

rng = random.Random(hash((a.x, a.y)) ^ int(os.environ.get("SOMA_TRIAL", "0")))
sigma = 0.05 if a.noise == "low" else 0.3
target = (a.x - 1.5) ** 2 + (a.y + 0.5) ** 2 + 0.1
loss = target + 10.0
for epoch in range(a.epochs):
    time.sleep(a.sleep)
    # the loss decays towards the target, with noise
    loss = target + 10.0 * math.exp(-0.6 * (epoch + 1)) + rng.gauss(0, sigma) * 0.1
    if report(epoch, loss):
        print(f"pruned at epoch {epoch}")
        raise SystemExit(0)
final(loss)
