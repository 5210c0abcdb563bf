// Package benchfn holds what the sampler benchmarks (samplerbench,
// condbench, mobench) share: the standard test functions, whose formulas
// and constants must be the same in each (Optuna's side of each
// benchmark, in scripts/bench_*.py, computes them too), and the median
// their tables print. It was written three times, once per benchmark.
package benchfn

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

// Branin is the Branin-Hoo function on x0 ∈ [−5, 10], x1 ∈ [0, 15]; its
// minimum, BraninMin, is at (−π, 12.275), (π, 2.275) and (9.42478, 2.475).
func Branin(x0, x1 float64) float64 {
	b, c, r, t := 5.1/(4*math.Pi*math.Pi), 5/math.Pi, 6.0, 1/(8*math.Pi)
	d := x1 - b*x0*x0 + c*x0 - r
	return d*d + 10*(1-t)*math.Cos(x0) + 10
}

// BraninMin is Branin's minimum, 5/(4π).
const BraninMin = 5 / (4 * math.Pi)

var (
	hartA = [4][6]float64{{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}}
	hartP = [4][6]float64{{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
		{2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}}
	hartAlpha = [4]float64{1, 1.2, 3, 3.2}
)

// Hartmann6 is the 6-dimensional Hartmann function on [0, 1]⁶ (minimum
// −3.32237).
func Hartmann6(x []float64) float64 {
	s := 0.0
	for i := range 4 {
		e := 0.0
		for j := range 6 {
			d := x[j] - 1e-4*hartP[i][j]
			e += hartA[i][j] * d * d
		}
		s += hartAlpha[i] * math.Exp(-e)
	}
	return -s
}

// Median is the median of xs (NaN for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Format formats x with format, or says "n/a" for NaN (a peer that was
// not run).
func Format(format string, x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf(format, x)
}

// ReadLines reads the peer's results, one JSON object per line (what
// scripts/bench_*.py print), calling add for each. A path of "" reads
// nothing: the peer was not run.
func ReadLines[T any](path string, add func(T)) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r T
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		add(r)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
