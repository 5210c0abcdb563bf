#!/usr/bin/python3
"""Optuna 3.1 side of scripts/bench-conditional.sh.

Minimises the conditional objective of internal/tools/condbench (momentum
and damp count only under opt = sgd, beta1 and beta2 only under opt =
adam) with Optuna's TPESampler, written define-by-run (momentum is
suggested only under sgd),
in two settings: the default (independent) and multivariate=True,
group=True (the group decomposition). Prints one JSON object per run:
{"mode": ..., "seed": ..., "best": ...}.
"""
import argparse
import json
import math
import multiprocessing
import sys
import warnings

import optuna

BRANIN_MIN = 5 / (4 * math.pi)


def branin(x1, x2):
    b, c, r, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - r) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def objective(trial):
    opt = trial.suggest_categorical("opt", ["adam", "sgd"])
    x0 = trial.suggest_float("x0", -5.0, 10.0)
    x1 = trial.suggest_float("x1", 0.0, 15.0)
    s = (branin(x0, x1) - BRANIN_MIN) / 10
    if opt == "sgd":
        knobs, centre, offset = ("momentum", "damp"), (0.83, 0.3), 0.0
    else:
        knobs, centre, offset = ("beta1", "beta2"), (0.2, 0.65), 0.2
    for k, c in zip(knobs, centre):
        s += 8 * (trial.suggest_float(k, 0.0, 1.0) - c) ** 2
    return s + offset


def run(args):
    mode, seed, trials = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    if mode == "group":
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(objective, n_trials=trials)
    return {"mode": mode, "seed": seed, "best": study.best_value}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=0)
    a = ap.parse_args()
    work = [(m, s, a.trials) for m in ("independent", "group") for s in range(a.seeds)]
    with multiprocessing.Pool(a.jobs or None) as pool:
        for r in pool.imap(run, work):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
