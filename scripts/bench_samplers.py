#!/usr/bin/python3
"""Optuna 3.1 side of scripts/bench-samplers.sh.

Runs optuna.samplers.TPESampler (defaults; constant_liar=True when
parallel) on Branin, Hartmann6 and Styblinski-Tang 10-d with the same
budgets, seeds and parallel simulation as soma's side
(internal/tools/samplerbench), and prints one JSON object per run:
{"func": ..., "mode": ..., "seed": ..., "best": ...}.

Parallel simulation: trial t is asked while trials t-3, t-2, t-1 are still
running (their points visible, their values not), i.e. 4 workers that
take equally long per trial.
"""
import argparse
import json
import math
import multiprocessing
import sys

import warnings

import numpy as np
import optuna


def branin(x):
    x1, x2 = x
    b, c, r, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - r) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


HART_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                   [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
HART_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                          [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
HART_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x):
    x = np.asarray(x)
    return float(-np.sum(HART_ALPHA * np.exp(-np.sum(HART_A * (x - HART_P) ** 2, axis=1))))


def styblinski_tang(x):
    x = np.asarray(x)
    return float(0.5 * np.sum(x**4 - 16 * x**2 + 5 * x))


FUNCS = {
    "branin": (branin, [(-5.0, 10.0), (0.0, 15.0)]),
    "hartmann6": (hartmann6, [(0.0, 1.0)] * 6),
    "styblinski_tang10": (styblinski_tang, [(-5.0, 5.0)] * 10),
}


def run(args):
    func, mode, seed, trials = args
    f, bounds = FUNCS[func]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    parallel = mode == "parallel4"
    sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=parallel)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    workers = 4 if parallel else 1
    pending = []
    best = math.inf
    for t in range(trials):
        if len(pending) == workers:
            tr, v = pending.pop(0)
            study.tell(tr, v)
        tr = study.ask()
        x = [tr.suggest_float("x%d" % i, lo, hi) for i, (lo, hi) in enumerate(bounds)]
        v = f(x)
        best = min(best, v)
        pending.append((tr, v))
    for tr, v in pending:
        study.tell(tr, v)
    return {"func": func, "mode": mode, "seed": seed, "best": best}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--funcs", default=",".join(FUNCS))
    a = ap.parse_args()
    work = [(f, m, s, a.trials) for f in a.funcs.split(",") for m in ("sequential", "parallel4") for s in range(a.seeds)]
    with multiprocessing.Pool(a.jobs or None) as pool:
        for r in pool.imap(run, work):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
