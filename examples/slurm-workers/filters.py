"""A small numpy filter for the slurm-workers example."""
import os
import socket
import time

import numpy as np


class Scale:
    """Multiplies its input by factor, after sleeping seconds (so that
    several plans overlap and placement has to spread them)."""

    def __init__(self, factor=2.0, seconds=0.0):
        self.factor = float(factor)
        self.seconds = float(seconds)

    def forward(self, X):
        time.sleep(self.seconds)
        print("scaled on", socket.gethostname(), "pid", os.getpid())
        return np.asarray(X, dtype=np.float64) * self.factor
