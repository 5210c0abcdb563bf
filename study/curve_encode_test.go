package study

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// encodeCurve is written by hand for speed (issue 13, item 8); its bytes
// must stay json.Marshal's, so that a blob of the same curve keeps its
// digest across versions.
func TestEncodeCurveIsMarshal(t *testing.T) {
	marshal := func(curve []Step, reason string) ([]byte, error) {
		if curve == nil {
			curve = []Step{}
		}
		return json.Marshal(curveBlob{Version: RecordVersion, Curve: curve, Reason: reason})
	}
	values := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 1e-6, 9.99e-7, 1e-7, -1e-7, 1.5e-10, 1e-300,
		5e-324, 1e20, 1e21, -1e21, 1.2345e22, math.MaxFloat64, -math.MaxFloat64, 123456789.125, 1e-5}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		values = append(values, math.Float64frombits(rng.Uint64()))
	}
	var curve []Step
	for i, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			curve = append(curve, Step{Step: int64(i) * 7, Value: v})
		}
	}
	tests := []struct {
		name   string
		curve  []Step
		reason string
	}{
		{"nil curve", nil, ""},
		{"empty curve", []Step{}, ""},
		{"one step", []Step{{0, 0.5}}, ""},
		{"reason with quotes and HTML", []Step{{3, 1}}, `pruned <at> "step" 3 & more ✓`},
		{"many values", curve, "done"},
		{"large steps", []Step{{math.MaxInt64, -2}, {-1, 2}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeCurve(tc.curve, tc.reason)
			want, werr := marshal(tc.curve, tc.reason)
			if err != nil || werr != nil {
				t.Fatalf("encodeCurve: %v, json.Marshal: %v", err, werr)
			}
			if string(got) != string(want) {
				t.Errorf("encodeCurve =\n%.300s\nwant json.Marshal's\n%.300s", got, want)
			}
		})
	}
	t.Run("not finite is Marshal's error", func(t *testing.T) {
		if _, err := encodeCurve([]Step{{0, 1}, {1, math.NaN()}}, ""); err == nil {
			t.Error("encodeCurve(NaN) = nil error, want json.Marshal's")
		}
	})
}

func BenchmarkEncodeCurve100k(b *testing.B) {
	curve := make([]Step, 100000)
	for i := range curve {
		curve[i] = Step{Step: int64(i), Value: 1 / float64(i+1)}
	}
	for b.Loop() {
		if _, err := encodeCurve(curve, ""); err != nil {
			b.Fatal(err)
		}
	}
}
