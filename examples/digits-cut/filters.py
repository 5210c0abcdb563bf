"""The filters of the digits-cut plan, one per place it runs.

Standardize runs in a bare venv (the standard library only: no numpy, no
torch) on the worker tagged cpu; it checks that torch is not there. Embed
is a small torch network on the worker tagged torch (Debian's
python3-torch). Classifier and Accuracy run on the client, in soma run's
own Python. The filter contract: __init__(**config); forward(X) -> Y; and,
for a trainable filter, fit(X, y), get_state() -> bytes, set_state(bytes).

Every trainable filter trains on the first rows only and leaves the last
`holdout` rows out, so that Accuracy's score is on images no filter was
trained on (Standardize uses no labels, and skips them too).
"""

import io
import json
import struct


class Standardize:
    """Per-pixel mean and spread, in plain Python: this env has no numpy.

    The input arrives as the daemon's RawArray (dtype, shape, bytes)
    because numpy is absent; forward returns one of the same class.
    """

    def __init__(self, holdout=397, eps=1e-3):
        try:
            import torch  # noqa: F401
        except ImportError as e:
            print("Standardize: import torch fails here (%s)" % e)
        else:
            raise RuntimeError("torch is importable in Standardize's env; it must run without torch")
        self.holdout = holdout
        self.eps = eps
        self.mean = None
        self.scale = None

    @staticmethod
    def _rows(X):
        if X.dtype != "float32" or len(X.shape) != 2:
            raise TypeError("want float32 rows of pixels, got %s%s" % (X.dtype, list(X.shape)))
        n, d = X.shape
        flat = struct.unpack("<%df" % (n * d), bytes(X.data))
        return n, d, flat

    def fit(self, X, y=None):
        n, d, flat = self._rows(X)
        m = n - self.holdout
        if m < 2:
            raise ValueError("%d rows and holdout %d: nothing left to fit on" % (n, self.holdout))
        cols = [flat[j:m * d:d] for j in range(d)]
        self.mean = [sum(c) / m for c in cols]
        self.scale = [(sum((v - mu) ** 2 for v in c) / m) ** 0.5 + self.eps for c, mu in zip(cols, self.mean)]

    def forward(self, X):
        if self.mean is None:
            raise RuntimeError("Standardize has no state: run the fit plan first and pass its state")
        n, d, flat = self._rows(X)
        mean, scale = self.mean * n, self.scale * n
        out = struct.pack("<%df" % (n * d), *[(v - mu) / s for v, mu, s in zip(flat, mean, scale)])
        return type(X)("float32", [n, d], out)

    def get_state(self):
        return json.dumps({"mean": self.mean, "scale": self.scale}).encode()

    def set_state(self, b):
        s = json.loads(b)
        self.mean, self.scale = s["mean"], s["scale"]


class Embed:
    """A small torch network (64 -> hidden -> dim, and a 10-way head while
    training); forward returns the dim-wide embedding of each image."""

    def __init__(self, dim=16, hidden=64, epochs=10, lr=0.01, holdout=397, seed=0):
        import torch

        torch.manual_seed(seed)
        torch.set_num_threads(1)
        self.torch = torch
        self.epochs, self.lr, self.holdout = epochs, lr, holdout
        nn = torch.nn
        self.body = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.ReLU())
        self.head = nn.Linear(dim, 10)

    def fit(self, X, y):
        torch = self.torch
        m = len(X) - self.holdout
        x = torch.from_numpy(X[:m].copy())
        t = torch.from_numpy(y[:m].astype("int64"))
        params = list(self.body.parameters()) + list(self.head.parameters())
        opt = torch.optim.Adam(params, lr=self.lr)
        g = torch.Generator().manual_seed(0)
        for _ in range(self.epochs):
            for idx in torch.randperm(m, generator=g).split(128):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.head(self.body(x[idx])), t[idx])
                loss.backward()
                opt.step()
        print("Embed: torch %s, %d epochs on %d images, last loss %.3f" % (torch.__version__, self.epochs, m, loss.item()))

    def forward(self, X):
        with self.torch.no_grad():
            return self.body(self.torch.from_numpy(X.copy())).numpy()

    def get_state(self):
        buf = io.BytesIO()
        self.torch.save({"body": self.body.state_dict(), "head": self.head.state_dict()}, buf)
        return buf.getvalue()

    def set_state(self, b):
        s = self.torch.load(io.BytesIO(b))
        self.body.load_state_dict(s["body"])
        self.head.load_state_dict(s["head"])


class Classifier:
    """scikit-learn's LogisticRegression on the embedding; forward returns
    the predicted digits."""

    def __init__(self, C=1.0, holdout=397):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression(C=C, max_iter=1000)
        self.holdout = holdout

    def fit(self, X, y):
        m = len(X) - self.holdout
        self.model.fit(X[:m], y[:m])

    def forward(self, X):
        return self.model.predict(X).astype("int64")

    def get_state(self):
        import numpy as np

        m = self.model
        buf = io.BytesIO()
        np.savez(buf, coef=m.coef_, intercept=m.intercept_, classes=m.classes_)
        return buf.getvalue()

    def set_state(self, b):
        import numpy as np

        a = np.load(io.BytesIO(b), allow_pickle=False)
        m = self.model
        m.coef_, m.intercept_, m.classes_ = a["coef"], a["intercept"], a["classes"]


class Accuracy:
    """The share of the last `holdout` rows predicted right: fit compares
    the predictions with the labels, forward returns that number (the
    score soma run --score prints)."""

    def __init__(self, holdout=397):
        self.holdout = holdout
        self.accuracy = None

    def fit(self, pred, y):
        p, t = pred[-self.holdout:], y[-self.holdout:]
        self.accuracy = float((p == t).mean())
        print("Accuracy: %.4f on %d held-out images" % (self.accuracy, self.holdout))

    def forward(self, pred):
        if self.accuracy is None:
            raise RuntimeError("Accuracy is measured in a fit plan (it needs the labels)")
        return self.accuracy

    def get_state(self):
        return json.dumps(self.accuracy).encode()

    def set_state(self, b):
        self.accuracy = json.loads(b)
