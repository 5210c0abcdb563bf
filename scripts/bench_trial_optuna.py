#!/usr/bin/python3
"""Optuna 3.1 side of scripts/bench-trial.sh: trial throughput of P worker
processes sharing one JournalFileStorage file and one budget of N trials.

    bench_trial_optuna.py --journal FILE --n N --p P --mode exec|inproc [-- ARGV...]

Each worker is a process of this script (`worker` mode): it imports
optuna, loads the study, says "ready", and waits; the parent starts the
clock when every worker is ready (so the interpreter's start and
`import optuna`, about a second each, are not counted) and stops it when
the last one exits. The budget is shared the way Optuna documents it,
with MaxTrialsCallback(N) on every worker: a worker stops after a trial
once N trials are complete, so the others' trials still running finish
too and the study overshoots by up to P-1.

mode exec: the objective runs ARGV with subprocess (the same executable as
soma-trial's objective) and returns the last line of its stdout as the
score. mode inproc: the objective returns the suggested x in the process.
Both suggest one float x in [0, 1] from RandomSampler, as soma's side does.

Prints one JSON object: trials/s (trials that ran / wall seconds), the
trials each worker ran, the journal's count, and the crashed workers (a
non-zero exit, e.g. the JSONDecodeError of optuna#5138) with their error.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback


def load(journal, name):
    import warnings

    import optuna

    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(journal))
    return optuna, storage


def worker(a):
    optuna, storage = load(a.journal, a.study)
    study = optuna.load_study(study_name=a.study, storage=storage, sampler=optuna.samplers.RandomSampler(seed=a.seed))
    argv = a.argv
    ran = 0

    def objective(trial):
        nonlocal ran
        ran += 1
        x = trial.suggest_float("x", 0.0, 1.0)
        if a.mode == "inproc":
            return x
        out = subprocess.run(argv, stdout=subprocess.PIPE, check=True).stdout
        return float(out.decode().strip().splitlines()[-1])

    print("ready", flush=True)
    sys.stdin.readline()
    try:
        # n_trials bounds a runaway worker; the shared budget is the callback.
        study.optimize(objective, n_trials=a.n, callbacks=[optuna.study.MaxTrialsCallback(a.n)])
    except BaseException:
        print(json.dumps({"ran": ran}), flush=True)
        traceback.print_exc()
        sys.exit(1)
    print(json.dumps({"ran": ran}), flush=True)


def parent(a):
    optuna, storage = load(a.journal, a.study)
    optuna.create_study(study_name=a.study, storage=storage, direction="minimize")
    base = [sys.executable, os.path.abspath(__file__), "--journal", a.journal, "--study", a.study,
            "--n", str(a.n), "--mode", a.mode, "--worker"]
    procs = []
    for i in range(a.p):
        procs.append(subprocess.Popen(base + ["--seed", str(i), "--"] + a.argv, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    ready = [p.stdout.readline().strip() == b"ready" for p in procs]
    t0 = time.monotonic()
    for p in procs:
        try:
            p.stdin.write(b"go\n")
            p.stdin.close()
        except BrokenPipeError:
            pass
        p.stdin = None  # communicate() must not flush it again
    outs = [p.communicate() for p in procs]
    secs = time.monotonic() - t0
    ran, crashes, errors = 0, 0, []
    for i, (p, (so, se)) in enumerate(zip(procs, outs)):
        for line in so.decode().splitlines():
            if line.startswith("{"):
                ran += json.loads(line)["ran"]
        if p.returncode != 0 or not ready[i]:
            crashes += 1
            last = se.decode().strip().splitlines()
            errors.append("worker %d: exit %d: %s" % (i, p.returncode, last[-1] if last else ""))
    try:
        study = optuna.load_study(study_name=a.study, storage=storage)
        states = {}
        for t in study.get_trials(deepcopy=False):
            states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
        journal_trials, complete = sum(states.values()), states.get("complete", 0)
    except Exception as e:  # a corrupt journal: say so, do not crash the table
        journal_trials, complete, states = -1, -1, {}
        errors.append("reading the journal: %r" % e)
    print(json.dumps({
        "kind": "optuna-" + a.mode, "p": a.p, "n": a.n, "seconds": secs, "ran": ran,
        "per_s": ran / secs if secs > 0 else 0, "trials": journal_trials, "complete": complete,
        "states": states, "exact": journal_trials == a.n and complete == a.n and ran == a.n,
        "crashes": crashes, "errors": errors,
    }))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--journal", required=True)
    ap.add_argument("--study", default="bench")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--p", type=int, default=1)
    ap.add_argument("--mode", choices=["exec", "inproc"], default="exec")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("argv", nargs="*", default=["/bin/echo", "1"])
    a = ap.parse_args()
    if not a.argv:
        a.argv = ["/bin/echo", "1"]
    (worker if a.worker else parent)(a)


if __name__ == "__main__":
    main()
