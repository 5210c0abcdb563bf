#!/usr/bin/env python3
"""Handwritten digits with a linear SGD classifier, trained epoch by epoch.

scikit-learn's bundled digits (1797 8x8 images, 10 classes; Debian's
python3-sklearn, no download) are split once, the same way for every
trial, into 75 % training and 25 % validation. Each epoch is one
shuffled pass of SGDClassifier.partial_fit over the training set; the
validation accuracy after it is reported to soma-trial, whose pruner may
stop a weak trial there. soma-trial runs it as

    python3 objective.py --loss {loss} --alpha {alpha} --learning-rate {learning_rate} \
        --eta0 {eta0} --epochs {epochs}

Run by hand (outside soma-trial) it prints the final accuracy.
"""
import argparse
import os
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from soma_report import final, report  # put on PYTHONPATH by soma-trial

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--loss", default="log_loss", choices=["hinge", "log_loss", "modified_huber"])
ap.add_argument("--alpha", type=float, default=1e-4, help="L2 regularisation strength")
ap.add_argument("--learning-rate", default="invscaling", choices=["constant", "invscaling", "optimal"])
ap.add_argument("--eta0", type=float, default=0.01, help="initial step size (constant, invscaling)")
ap.add_argument("--epochs", type=int, default=20)
a = ap.parse_args()

X, y = load_digits(return_X_y=True)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
scaler = StandardScaler().fit(X_train)
X_train, X_val = scaler.transform(X_train), scaler.transform(X_val)

seed = int(os.environ.get("SOMA_TRIAL", "0"))
rng = np.random.default_rng(seed)
clf = SGDClassifier(loss=a.loss, alpha=a.alpha, learning_rate=a.learning_rate, eta0=a.eta0, random_state=seed)
classes = np.unique(y)
warnings.simplefilter("ignore", ConvergenceWarning)

acc = 0.0
for epoch in range(1, a.epochs + 1):
    order = rng.permutation(len(X_train))
    with np.errstate(all="ignore"):  # a diverging step size is a bad trial, not a crash
        clf.partial_fit(X_train[order], y_train[order], classes=classes)
        acc = float(np.mean(clf.predict(X_val) == y_val))
    # The step is the number of epochs trained. The last epoch is not
    # offered to the pruner: stopping after it would save nothing.
    if epoch < a.epochs and report(epoch, acc):
        print(f"pruned after epoch {epoch} of {a.epochs} (validation accuracy {acc:.4f})")
        raise SystemExit(0)
final(acc)
