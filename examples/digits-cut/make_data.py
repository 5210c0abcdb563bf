"""Writes scikit-learn's bundled digits (1797 images of 8x8 pixels, nothing
downloaded) next to plan.toml: digits_X.npy (float32 pixels) and
digits_y.npy (int64 labels). The filters train on the first 1400 and the
plan's score is the accuracy on the last 397 (holdout = 397).

    /usr/bin/python3 examples/digits-cut/make_data.py [FOLDER]
"""

import os
import sys

import numpy as np
from sklearn.datasets import load_digits

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
X, y = load_digits(return_X_y=True)
np.save(os.path.join(out, "digits_X.npy"), X.astype(np.float32))
np.save(os.path.join(out, "digits_y.npy"), y.astype(np.int64))
print("wrote %d images to %s" % (len(X), out))
