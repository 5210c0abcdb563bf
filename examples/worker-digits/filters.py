"""Two filters for soma-worker: a StandardScaler-like standardizer (numpy)
and a logistic-regression classifier (scikit-learn).

The filter contract: __init__(**config); forward(X) -> Y; and, for a
trainable filter, fit(X, y), get_state() -> bytes, set_state(bytes).
States here are .npy/.npz bytes (no pickle: loading a state runs no code).
"""

import io

import numpy as np


class Standardize:
    """Learns each pixel's mean and spread in fit; forward centres and scales."""

    def __init__(self, eps=1e-6):
        self.eps = eps
        self.mean = None
        self.scale = None

    def fit(self, X, y=None):
        self.mean = X.mean(axis=0)
        self.scale = X.std(axis=0) + self.eps

    def forward(self, X):
        if self.mean is None:
            raise RuntimeError("Standardize has no state: run the fit plan first and pass its state")
        return ((X - self.mean) / self.scale).astype(np.float32)

    def get_state(self):
        buf = io.BytesIO()
        np.save(buf, np.stack([self.mean, self.scale]))
        return buf.getvalue()

    def set_state(self, b):
        a = np.load(io.BytesIO(b), allow_pickle=False)
        self.mean, self.scale = a[0], a[1]


class Classifier:
    """scikit-learn's LogisticRegression; forward returns the predicted digits."""

    def __init__(self, C=1.0, max_iter=200):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression(C=C, max_iter=max_iter)

    def fit(self, X, y):
        self.model.fit(X, y)
        print("trained on %d images, training accuracy %.3f" % (len(y), self.model.score(X, y)))

    def forward(self, X):
        return self.model.predict(X).astype(np.int64)

    def get_state(self):
        m = self.model
        buf = io.BytesIO()
        np.savez(buf, coef=m.coef_, intercept=m.intercept_, classes=m.classes_)
        return buf.getvalue()

    def set_state(self, b):
        z = np.load(io.BytesIO(b), allow_pickle=False)
        self.model.coef_ = z["coef"]
        self.model.intercept_ = z["intercept"]
        self.model.classes_ = z["classes"]
