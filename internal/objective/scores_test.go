package objective

import (
	"slices"
	"strings"
	"testing"
)

// TestSeveralScores: with several metrics, the objective reports one
// score per metric on the final line or as the last line of stdout, and a
// run that misses one fails naming it.
func TestSeveralScores(t *testing.T) {
	metrics := []string{"error", "latency_ms"}
	tests := []struct {
		name    string
		body    string
		metrics []string
		want    []float64 // nil: failed
		reason  string
	}{
		{"final", "final(0.12, 35.1)\n", metrics, []float64{0.12, 35.1}, ""},
		{"fd 3 by hand", "os.write(3, b'final 0.5 7\\n')\n", metrics, []float64{0.5, 7}, ""},
		{"stdout", "print('noise')\nprint('0.25 40')\n", metrics, []float64{0.25, 40}, ""},
		{"missing", "os.write(3, b'final 0.12\\n')\n", metrics, nil, "no score for latency_ms: the final line has 1 of the 2 scores (write them in this order: error latency_ms)"},
		{"missing on stdout", "print('0.12')\n", metrics, nil, "no score for latency_ms: the last line of stdout has 1 of the 2 scores"},
		{"too many", "print('1 2 3')\n", metrics, nil, "the last line of stdout has 3 values for 2 metrics"},
		{"nan", "print('0.1 nan')\n", metrics, nil, `score for latency_ms is "nan" in the last line of stdout, not a finite number`},
		{"one objective, two values", "os.write(3, b'final 1 2\\n')\n", nil, nil, "final gave 2 values, but the study has one objective"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, Options{Argv: py(t, tc.body), Metrics: tc.metrics, ParamsJSON: []byte("{}")}, nil)
			if tc.want == nil {
				if r.Outcome != Failed || !strings.Contains(r.Reason, tc.reason) {
					t.Fatalf("outcome %s (%q), want failed saying %q", r.Outcome, r.Reason, tc.reason)
				}
				return
			}
			if r.Outcome != Done || !slices.Equal(r.Scores, tc.want) || r.Score != tc.want[0] {
				t.Fatalf("outcome %s (%s), scores %v score %v; want done with %v\n%s", r.Outcome, r.Reason, r.Scores, r.Score, tc.want, r.StderrTail)
			}
		})
	}
}
