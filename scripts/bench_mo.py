#!/usr/bin/python3
"""Optuna 3.1 side of scripts/bench-mo.sh.

Minimises ZDT1 and ZDT2 (30 variables) and a two-objective Hartmann6
problem (f1 = hartmann6(x), f2 = hartmann6(1 - x)) with Optuna's
NSGAIISampler and multi-objective TPESampler (MOTPE), and prints one JSON
object per run: {"func", "sampler", "seed", "hv"}: the hypervolume of
every trial's scores up to the reference point (scripts/bench-mo.sh
documents them), computed by optuna._hypervolume.WFG.
"""
import argparse
import json
import math
import multiprocessing
import sys
import warnings

import numpy as np
import optuna
from optuna._hypervolume import WFG

HART_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                   [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
HART_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                          [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
HART_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x):
    x = np.asarray(x)
    return float(-np.sum(HART_ALPHA * np.exp(-np.sum(HART_A * (x - HART_P) ** 2, axis=1))))


def zdt(x, two):
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    r = x[0] / g
    return [x[0], g * (1 - (r * r if two else math.sqrt(r)))]


FUNCS = {
    "zdt1": (30, lambda x: zdt(x, False), [1.1, 11.0]),
    "zdt2": (30, lambda x: zdt(x, True), [1.1, 11.0]),
    "hartmann6x2": (6, lambda x: [hartmann6(x), hartmann6([1 - v for v in x])], [0.0, 0.0]),
}


def run(args):
    func, sampler_name, seed, trials = args
    n, f, ref = FUNCS[func]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    if sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    pts = []

    def objective(trial):
        v = f([trial.suggest_float("x%d" % i, 0.0, 1.0) for i in range(n)])
        pts.append(v)
        return tuple(v)

    study.optimize(objective, n_trials=trials)
    inside = [p for p in pts if p[0] < ref[0] and p[1] < ref[1]]
    hv = WFG().compute(np.array(inside), np.array(ref)) if inside else 0.0
    return {"func": func, "sampler": sampler_name, "seed": seed, "hv": float(hv)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--samplers", default="nsga2,motpe")
    a = ap.parse_args()
    work = [(fn, s, seed, a.trials) for fn in FUNCS for s in a.samplers.split(",") for seed in range(a.seeds)]
    with multiprocessing.Pool(a.jobs or None) as pool:
        for r in pool.imap(run, work):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
