#!/usr/bin/env python3
"""Helpers for scripts/bench-status.sh: the Optuna side of the benchmark.

  bench_status.py journal PATH N     write an Optuna 3.1 JournalFileStorage file
                                     holding one study of N finished trials
  bench_status.py optuna PATH        load it as a user would; print timings (JSON)
  bench_status.py time K CMD...      run CMD K times; print the median wall time (s)

The journal is written line by line in the format JournalStorage writes
(optuna/storages/_journal/storage.py): per trial, CREATE_TRIAL, one
SET_TRIAL_PARAM per knob, three intermediate values and the final state,
as Study.optimize leaves them; it is read back by Optuna itself, so a
format mistake fails the benchmark.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time


def journal(path, n):
    worker = "bench-worker-1"
    dists = {
        "lr": json.dumps({"name": "FloatDistribution", "attributes": {"step": None, "low": 1e-05, "high": 0.1, "log": True}}),
        "layers": json.dumps({"name": "IntDistribution", "attributes": {"log": False, "step": 1, "low": 1, "high": 8}}),
        "opt": json.dumps({"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "sgd", "adamw"]}}),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        w = f.write
        w(json.dumps({"op_code": 0, "worker_id": worker, "study_name": "bench", "directions": [1]}) + "\n")
        for i in range(n):
            start = "2026-01-01T00:00:%02d.000000" % (i % 60)
            w(json.dumps({"op_code": 4, "worker_id": worker, "study_id": 0, "datetime_start": start}) + "\n")
            lr = 10 ** (-5 + 4 * ((i * 0.618034) % 1))
            vals = {"lr": lr, "layers": float(1 + i % 8), "opt": i % 3}
            for name, v in vals.items():
                w(json.dumps({"op_code": 5, "worker_id": worker, "trial_id": i, "param_name": name,
                              "param_value_internal": v, "distribution": dists[name]}) + "\n")
            score = 0.1 + abs(math.sin(i * 12.9898)) * 2
            for step in range(3):
                w(json.dumps({"op_code": 7, "worker_id": worker, "trial_id": i, "step": step,
                              "intermediate_value": score + 1.0 / (step + 1)}) + "\n")
            state, values = 1, [score]  # COMPLETE
            if i % 20 == 19:
                state, values = 3, None  # FAIL
            elif i % 7 == 3:
                state, values = 2, None  # PRUNED
            w(json.dumps({"op_code": 6, "worker_id": worker, "trial_id": i, "state": state, "values": values,
                          "datetime_complete": start}) + "\n")
    os.replace(tmp, path)


def load(path):
    t0 = time.perf_counter()
    import optuna  # noqa: E402  (timed)
    import warnings

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t1 = time.perf_counter()
    storage = optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(path))
    study = optuna.load_study(study_name="bench", storage=storage)
    trials = study.trials
    t2 = time.perf_counter()
    out = open(os.devnull, "w")
    print(study.best_trial, file=out)
    df = study.trials_dataframe()
    print(df, file=out)
    t3 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "best_df_s": t3 - t2,
                      "total_s": t3 - t0, "trials": len(trials), "version": optuna.__version__}))


def time_cmd(k, cmd):
    walls = []
    for _ in range(k):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    print("%.4f" % statistics.median(walls))


def main():
    what = sys.argv[1]
    if what == "journal":
        journal(sys.argv[2], int(sys.argv[3]))
    elif what == "optuna":
        load(sys.argv[2])
    elif what == "time":
        time_cmd(int(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit("bench_status.py: unknown command %r" % what)


if __name__ == "__main__":
    main()
