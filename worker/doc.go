// Package worker is soma's per-node daemon: it runs plans of Python
// filters where the hardware is, in pooled virtual environments, with the
// GPUs it finds through NVML.
//
// A Plan names filters (Python classes in files shipped with the plan),
// their inputs, an input value, a mode (Fit or Forward) and the resources
// it asks for. A Worker runs plans: each in an out-of-process Python
// daemon (daemon.py, embedded; the anti-corruption layer between the
// worker and user code) started from the plan's environment and kept warm
// for the next plan of the same environment. A Server serves a Worker
// over HTTP (one-shot plans) and WebSocket (plans fed in chunks); a Client
// talks to it. protocol.go is the wire's compatibility surface.
//
// Values are numeric arrays (dtype, shape, raw little-endian bytes),
// bytes, plain objects or None; large ones travel as references (a blob of
// the store under --root, or rows of a Zarr array) so that they never
// cross the wire.
//
// The filter contract (README, "Writing filters"):
//
//	class Filter:
//	    def __init__(self, **config): ...
//	    def fit(self, X, y): ...           # optional: makes the node trainable
//	    def forward(self, X): return Y
//	    def get_state(self): return bytes  # with fit
//	    def set_state(self, b): ...        # loads what get_state returned
package worker
