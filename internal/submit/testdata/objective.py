"""Objective of internal/submit's end-to-end tests (standard library only).

    objective.py MARKS MODE [N]

Prints the score x*x (x from SOMA_PARAM_X) as its last line. It leaves
marks in the folder MARKS, each holding the Slurm task it ran in ("4242_3",
or "4242" outside an array):

    <trial>.<attempt>.start     when it starts
    <trial>.<attempt>.done      when it finishes with a score
    <trial>.<attempt>.signal    the signal that stopped it (USR1, TERM...)
    victim                      trial 0's first attempt, in modes victim and
                                until-signal, once it is running

MODE
    barrier N     wait (at most 90 s) until objectives in N different Slurm
                  tasks have started, so that every task of an N-task array
                  runs at least one trial; then take 0.2 s
    victim        trial 0's first attempt sleeps until something ends it (at
                  most 120 s); every other attempt takes 0.3 s
    until-signal  as victim, and a signal (USR1, TERM, INT) ends it, leaving
                  the .signal mark
"""
import os
import signal
import sys
import time

marks, mode = sys.argv[1], sys.argv[2]
x = float(os.environ["SOMA_PARAM_X"])
trial, attempt = os.environ["SOMA_TRIAL"], os.environ["SOMA_ATTEMPT"]
job = os.environ.get("SLURM_JOB_ID", "")
if os.environ.get("SLURM_ARRAY_JOB_ID"):
    job = os.environ["SLURM_ARRAY_JOB_ID"] + "_" + os.environ["SLURM_ARRAY_TASK_ID"]
me = f"{trial}.{attempt}"


def mark(name, text=job):
    tmp = os.path.join(marks, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(marks, name))


def stopped(signum, frame):
    mark(me + ".signal", signal.Signals(signum).name.removeprefix("SIG"))
    sys.exit(1)


mark(me + ".start")
if mode == "barrier":
    want = int(sys.argv[3])
    deadline = time.time() + 90
    while time.time() < deadline:
        jobs = set()
        for name in os.listdir(marks):
            if name.endswith(".start"):
                with open(os.path.join(marks, name)) as f:
                    jobs.add(f.read())
        if len(jobs) >= want:
            break
        time.sleep(0.1)
    time.sleep(0.2)
elif mode in ("victim", "until-signal"):
    if trial == "0" and attempt == "0":
        if mode == "until-signal":
            for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
                signal.signal(s, stopped)
        mark("victim")
        time.sleep(120)
        sys.exit("objective.py: nothing stopped the victim within 120 s")
    time.sleep(0.3)
else:
    sys.exit(f"objective.py: unknown mode {mode!r}")
mark(me + ".done")
print(x * x)
