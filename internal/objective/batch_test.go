package objective

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// batchLine writes a "reports" line as soma_report.py does.
func batchLine(steps []Step) string {
	s := make([]byte, 8*len(steps))
	v := make([]byte, 8*len(steps))
	for i, st := range steps {
		binary.LittleEndian.PutUint64(s[8*i:], uint64(st.Step))
		binary.LittleEndian.PutUint64(v[8*i:], math.Float64bits(st.Value))
	}
	return "reports " + base64.StdEncoding.EncodeToString(s) + " " + base64.StdEncoding.EncodeToString(v)
}

func sameSteps(a, b []Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].Value, b[i].Value
		if a[i].Step != b[i].Step || math.Float64bits(x) != math.Float64bits(y) && !(math.IsNaN(x) && math.IsNaN(y)) {
			return false
		}
	}
	return true
}

func TestParseBatch(t *testing.T) {
	want := []Step{{0, 0.5}, {-3, math.Inf(1)}, {math.MaxInt64, math.Copysign(0, -1)}, {7, 5e-324}}
	got, err := parseBatch(batchLine(want))
	if err != nil || !sameSteps(got, want) {
		t.Fatalf("parseBatch = %v, %v; want %v", got, err, want)
	}
	for line, msg := range map[string]string{
		"reports":                "two base64 fields",
		"reports AAAA":           "two base64 fields",
		"reports !!!! AAAA":      "steps are not base64",
		"reports AAAAAAAAAAA= *": "values are not base64",
		"reports AAAA AAAA":      "8 bytes each",
		"reports AAAAAAAAAAA= AAAAAAAAAAAAAAAAAAAAAA==": "8 bytes each", // 8 bytes of steps, 16 of values
	} {
		if _, err := parseBatch(line); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseBatch(%q) = %v, want an error saying %q", line, err, msg)
		}
	}
}

// FuzzParseBatch: any line is read or refused with an error, never a
// panic, and what a writer encodes reads back bit for bit.
func FuzzParseBatch(f *testing.F) {
	f.Add("reports  ", int64(0), 0.0)
	f.Add(batchLine([]Step{{1, 2}}), int64(-1), math.NaN())
	f.Add("reports AAAAAAAAAAA= AAAAAAAAAAA=", int64(math.MinInt64), math.Inf(-1))
	f.Fuzz(func(t *testing.T, line string, step int64, val float64) {
		_, _ = parseBatch(line)
		_, _, _, _ = parseLine(line)
		want := []Step{{step, val}, {step + 1, -val}}
		got, err := parseBatch(batchLine(want))
		if err != nil || !sameSteps(got, want) {
			t.Fatalf("round trip of %v: %v, %v", want, got, err)
		}
	})
}

// Issue 13 item 8: report(..., wait=False) sends its reports as binary
// batches; every value arrives exactly (nan, inf, -0.0, subnormals), in
// order, and values Python must convert (a numeric string, an int, a
// float step) are taken as report() always took them.
func TestBatchedReportsArriveExactly(t *testing.T) {
	body := `import math
vals = [0.1, float('nan'), float('inf'), -0.0, 5e-324, -1e308, 3, '0.25']
for i, v in enumerate(vals):
    report(i, v, wait=False)
report(8.0, 1.5, wait=False)
report(2**62, 2.5, wait=False)
final(1)
`
	r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool { return false }}, nil)
	want := []Step{{0, 0.1}, {1, math.NaN()}, {2, math.Inf(1)}, {3, math.Copysign(0, -1)}, {4, 5e-324}, {5, -1e308}, {6, 3}, {7, 0.25}, {8, 1.5}, {1 << 62, 2.5}}
	if r.Outcome != Done || !sameSteps(r.Curve, want) {
		t.Fatalf("outcome %s (%s %s), curve %v, want done with %v", r.Outcome, r.Reason, r.StderrTail, r.Curve, want)
	}
}

// A batch is judged step by step: the trial is pruned at the exact step
// the pruner named, not at the batch's end, and the batch's one verdict
// stops the loop.
func TestBatchPrunedAtItsStep(t *testing.T) {
	body := "i = 0\nwhile not report(i, 1.0, wait=False):\n  i += 1\nprint('stopped at', i)\n"
	judged := map[int64]int{}
	r := run(t, Options{Argv: py(t, body), Grace: 10e9, OnReport: func(step int64, v float64) bool {
		judged[step]++
		return step == 1234
	}}, nil)
	if r.Outcome != Pruned || r.PrunedAt != 1234 || r.ExitCode != 0 {
		t.Fatalf("outcome %s at %d, exit %d, want pruned at step 1234 and stopped by itself", r.Outcome, r.PrunedAt, r.ExitCode)
	}
	for s := int64(0); s <= 1234; s++ {
		if judged[s] != 1 {
			t.Fatalf("step %d judged %d times, want once", s, judged[s])
		}
	}
	if judged[1235] != 0 {
		t.Errorf("step 1235 judged after the prune")
	}
}

func TestBatchBadLineIsAProtocolError(t *testing.T) {
	body := "os.write(3, b'reports AAAA AAAA\\n')\nfinal(1)\n"
	r := run(t, Options{Argv: py(t, body), OnReport: func(int64, float64) bool { return false }}, nil)
	if r.Outcome != Failed || !strings.Contains(r.Reason, "8 bytes each") {
		t.Fatalf("outcome %s (%s), want failed naming the bad batch", r.Outcome, r.Reason)
	}
}

// LastStepOnly (soma-trial keeps the curve in its study run) keeps the
// last report only, from lines and batches alike; a pruned trial's score
// is still that last value.
func TestLastStepOnly(t *testing.T) {
	body := "for i in range(5000):\n  report(i, 1.0/(i+1), wait=False)\nreport(5000, 0.125)\nreport(5001, 0.0625, wait=False)\nfinal(1)\n"
	r := run(t, Options{Argv: py(t, body), LastStepOnly: true, OnReport: func(int64, float64) bool { return false }}, nil)
	if r.Outcome != Done || len(r.Curve) != 1 || r.Curve[0] != (Step{5001, 0.0625}) {
		t.Fatalf("outcome %s, curve %v, want done with only {5001 0.0625}", r.Outcome, r.Curve)
	}
	body = "i = 0\nwhile not report(i, 0.5 + i, wait=False):\n  i += 1\n"
	r = run(t, Options{Argv: py(t, body), LastStepOnly: true, Grace: 10e9, OnReport: func(step int64, _ float64) bool { return step == 300 }}, nil)
	if r.Outcome != Pruned || len(r.Curve) != 1 || r.Score != r.Curve[0].Value || r.Score < 300.5 {
		t.Fatalf("outcome %s, score %v, curve %v, want pruned with the last value reported as its score", r.Outcome, r.Score, r.Curve)
	}
}
