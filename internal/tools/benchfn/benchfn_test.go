package benchfn

import (
	"math"
	"testing"
)

// The test functions at their known minima, and the median's cases.
func TestFunctions(t *testing.T) {
	for _, x := range [][2]float64{{-math.Pi, 12.275}, {math.Pi, 2.275}, {9.42478, 2.475}} {
		if got := Branin(x[0], x[1]); math.Abs(got-BraninMin) > 1e-5 {
			t.Errorf("Branin%v = %v, want %v", x, got, BraninMin)
		}
	}
	opt := []float64{0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}
	if got := Hartmann6(opt); math.Abs(got+3.32237) > 1e-4 {
		t.Errorf("Hartmann6 at its minimiser = %v, want -3.32237", got)
	}
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if !math.IsNaN(Median(nil)) || Format("%.2f", math.NaN()) != "n/a" || Format("%.2f", 1) != "1.00" {
		t.Error("Median(nil) or Format is wrong")
	}
}
