"""Filters that misbehave, for worker's tests. Standard library only."""

import ctypes
import os
import signal
import sys
import time


class NoOp:
    def forward(self, x):
        return x


class Pid:
    def forward(self, x):
        return os.getpid()


class Printer:
    def forward(self, x):
        print("printed by the filter")
        sys.stdout.write("and written to sys.stdout\n")
        os.write(1, b"and to fd 1\n")
        print("and to stderr", file=sys.stderr)
        return x


class Raiser:
    def forward(self, x):
        raise ValueError("the filter refused its input")


class Exiter:
    def forward(self, x):
        os._exit(3)


class Segfault:
    def forward(self, x):
        ctypes.string_at(0)


class Sleeper:
    def forward(self, x):
        print("going to sleep", flush=True)
        time.sleep(3600)


class Stubborn:
    """Ignores SIGINT: only SIGKILL stops it."""

    def forward(self, x):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ignoring SIGINT", flush=True)
        time.sleep(3600)


class BadState:
    def fit(self, X, y):
        pass

    def forward(self, x):
        return x

    def get_state(self):
        return "not bytes"

    def set_state(self, b):
        pass


class Env:
    def forward(self, x):
        return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


class Shape:
    """Returns only the input's shape: a forward whose cost is the input."""

    def forward(self, x):
        return list(getattr(x, "shape", ()))


class HoldGPU:
    """Prints the GPUs it sees, then sleeps until cancelled."""

    def forward(self, x):
        print("holding", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
        time.sleep(3600)


class NaN:
    def forward(self, x):
        return {"loss": float("nan")}


class Gather:
    """Waits (up to a minute) until n plans have reached it, each marking
    the folder dir, then returns its daemon's pid: plans that overlap for
    sure, without sleeping for a guessed time."""

    def __init__(self, dir, n):
        self.dir, self.n = dir, n

    def forward(self, x):
        open(os.path.join(self.dir, str(os.getpid())), "w").close()
        deadline = time.time() + 60
        while len(os.listdir(self.dir)) < self.n and time.time() < deadline:
            time.sleep(0.01)
        return os.getpid()
