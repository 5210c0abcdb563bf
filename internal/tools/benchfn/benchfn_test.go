package benchfn

import (
	"math"
	"os"
	"path/filepath"
	"strings"
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

// The peer's JSON lines are read whole; a bad line names the file.
func TestReadLines(t *testing.T) {
	type row struct {
		Mode string  `json:"mode"`
		Best float64 `json:"best"`
	}
	p := filepath.Join(t.TempDir(), "optuna.jsonl")
	os.WriteFile(p, []byte(`{"mode":"a","best":1.5}`+"\n"+`{"mode":"b","best":2}`+"\n"), 0o644)
	var got []row
	if err := ReadLines(p, func(r row) { got = append(got, r) }); err != nil || len(got) != 2 || got[1].Best != 2 {
		t.Errorf("ReadLines = %+v, %v", got, err)
	}
	if err := ReadLines("", func(row) { t.Error("read from no file") }); err != nil {
		t.Error(err)
	}
	os.WriteFile(p, []byte("{not json\n"), 0o644)
	if err := ReadLines(p, func(row) {}); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a bad line: %v, want an error naming %s", err, p)
	}
}
