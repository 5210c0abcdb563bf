package study

// Counter-based randomness: every draw is a pure function of (seed,
// trial, name, j), so any machine can compute trial t's draws without
// replaying trials 0..t-1 and without shared state.

// golden is SplitMix64's increment γ (Steele, Lea & Flood, OOPSLA 2014).
const golden = 0x9E3779B97F4A7C15

// mix64 is SplitMix64's output function (Vigna's splitmix64.c).
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xBF58476D1CE4E5B9
	z ^= z >> 27
	z *= 0x94D049BB133111EB
	z ^= z >> 31
	return z
}

// fnv1a is FNV-1a 64 of s; it keys streams by knob name, so a knob's draws
// do not depend on its position in the space.
func fnv1a(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}

// stream is a counter-based random stream keyed by (seed, trial, name).
// Draw j is mix64(key + (j+1)γ).
type stream struct{ key uint64 }

func newStream(seed uint64, trial int, name string) stream {
	return stream{key: mix64(mix64(mix64(seed+golden)^uint64(trial)) ^ fnv1a(name))}
}

// uint64 returns draw j.
func (s stream) uint64(j int) uint64 { return mix64(s.key + uint64(j+1)*golden) }

// float returns draw j as a uniform in [0, 1) with 53 random bits.
func (s stream) float(j int) float64 { return float64(s.uint64(j)>>11) * 0x1p-53 }

// open returns draw j as a uniform in (0, 1): never exactly 0 or 1, for
// inverse CDFs.
func (s stream) open(j int) float64 { return (float64(s.uint64(j)>>11) + 0.5) * 0x1p-53 }
