"""Writes scikit-learn's bundled digits as .npy files for the plans here:
train_X.npy / train_y.npy (the first 1400 images) and test_X.npy /
test_y.npy (the other 397). Nothing is downloaded.

    /usr/bin/python3 examples/worker-digits/make_data.py [FOLDER]
"""

import os
import sys

import numpy as np
from sklearn.datasets import load_digits

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
X, y = load_digits(return_X_y=True)
X = X.astype(np.float32)
y = y.astype(np.int64)
n = 1400
for name, a in (("train_X", X[:n]), ("train_y", y[:n]), ("test_X", X[n:]), ("test_y", y[n:])):
    np.save(os.path.join(out, name + ".npy"), a)
print("wrote %d training and %d test images to %s" % (n, len(X) - n, out))
