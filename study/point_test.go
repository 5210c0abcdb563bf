package study

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestPointRoundTrip writes and reads back points of every kind, from every
// sampler and at the edges of every knob, and wants the same bits back.
func TestPointRoundTrip(t *testing.T) {
	s := testSpace(t)
	var points []Point
	rs, sb := NewRandomSampler(7), NewSobolSampler(7)
	for trial := range 300 {
		p, err := rs.Ask(s, trial, History{})
		if err != nil {
			t.Fatal(err)
		}
		q, err := sb.Ask(s, trial, History{})
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, p, q)
	}
	// Edges: u = 0 and u just below 1 on every knob, and awkward floats.
	for _, u := range []float64{0, 0.5, math.Nextafter(1, 0)} {
		v := make([]float64, s.Len())
		for i := range v {
			v[i] = s.fromUnit(i, u)
		}
		points = append(points, Point{v: v})
	}
	odd := []float64{1e-5, math.Nextafter(1e-5, 1), 0.1, math.Nextafter(0.1, 0), 1.0 / 30, 0.099999999999999992}
	for _, x := range odd {
		v := make([]float64, s.Len())
		for i := range v {
			v[i] = s.fromUnit(i, 0.25)
		}
		v[0] = x
		v[1] = math.Min(x*9, 0.99)
		points = append(points, Point{v: v})
	}
	for _, p := range points {
		text := s.FormatPoint(p)
		q, err := s.ParsePoint(text)
		if err != nil {
			t.Fatalf("ParsePoint(%q) error: %v", text, err)
		}
		if !q.Equal(p) {
			t.Fatalf("ParsePoint(FormatPoint(p)) = %v, want %v (text %q)", q.v, p.v, text)
		}
		if again := s.FormatPoint(q); again != text {
			t.Fatalf("FormatPoint after a round trip = %q, want %q", again, text)
		}
		b, err := s.PointJSON(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("PointJSON = %s, not JSON: %v", b, err)
		}
		if lr := m["lr"].(float64); math.Float64bits(lr) != math.Float64bits(p.v[0]) {
			t.Fatalf("PointJSON lr = %v, want %v bit for bit", lr, p.v[0])
		}
	}
}

func TestPointForms(t *testing.T) {
	s := testSpace(t)
	p, err := s.ParsePoint("lr=0.001,mom=0.9,drop=0.3,batch=64,layers=4,depth=-2,opt=rms prop,width=128,epochs=10,tag=run:α/β")
	if err != nil {
		t.Fatal(err)
	}
	wantText := "lr=0.001,mom=0.9,drop=0.3,batch=64,layers=4,depth=-2,opt=rms prop,width=128,epochs=10,tag=run:α/β"
	if got := s.FormatPoint(p); got != wantText {
		t.Errorf("FormatPoint = %q, want %q", got, wantText)
	}
	b, _ := s.PointJSON(p)
	wantJSON := `{"lr":0.001,"mom":0.9,"drop":0.3,"batch":64,"layers":4,"depth":-2,"opt":"rms prop","width":128,"epochs":10,"tag":"run:α/β"}`
	if string(b) != wantJSON {
		t.Errorf("PointJSON = %s, want %s", b, wantJSON)
	}
	vals := s.Values(p)
	if len(vals) != 10 || vals[6] != (KV{Name: "opt", Text: "rms prop"}) || vals[3] != (KV{Name: "batch", Text: "64"}) {
		t.Errorf("Values = %v", vals)
	}
	if p.IsZero() || !(Point{}).IsZero() {
		t.Errorf("IsZero wrong")
	}
}

// TestSixtyFour: the space, not the text, says whether 64 is a number or
// the option "64".
func TestSixtyFour(t *testing.T) {
	asInt, _ := NewSpace([]Knob{{Name: "batch", Kind: KnobInt, Low: 1, High: 512}})
	asOpt, _ := NewSpace([]Knob{{Name: "batch", Kind: KnobChoice, Choices: []string{"32", "64"}}})
	asWord, _ := NewSpace([]Knob{{Name: "batch", Kind: KnobChoice, Choices: []string{"small", "64"}}})
	tests := []struct {
		name     string
		space    *Space
		text     string
		wantV    float64
		wantJSON string
		wantErr  string
	}{
		{"int", asInt, "batch=64", 64, `{"batch":64}`, ""},
		{"option among numbers", asOpt, "batch=64", 1, `{"batch":64}`, ""},
		{"option among words", asWord, "batch=64", 1, `{"batch":"64"}`, ""},
		{"int refuses 64.0", asInt, "batch=64.0", 0, "", "not a whole number"},
		{"int refuses +64", asInt, "batch=+64", 0, "", "not a whole number"},
		{"int refuses 064", asInt, "batch=064", 0, "", "not a whole number"},
		{"option refuses 64.0", asOpt, "batch=64.0", 0, "", "not one of the options"},
		{"int refuses word", asInt, "batch=small", 0, "", "not a whole number"},
		{"int out of range", asInt, "batch=513", 0, "", "outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.space.ParsePoint(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParsePoint(%q) = %v, %v; want error %q", tc.text, p.v, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.v[0] != tc.wantV {
				t.Errorf("ParsePoint(%q) holds %v, want %v", tc.text, p.v[0], tc.wantV)
			}
			if b, _ := tc.space.PointJSON(p); string(b) != tc.wantJSON {
				t.Errorf("PointJSON = %s, want %s", b, tc.wantJSON)
			}
		})
	}
}

// TestParsePointRefusesWhole: a record written against another space is
// refused as a whole, with a *PointError and no partial point.
func TestParsePointRefusesWhole(t *testing.T) {
	s, _ := NewSpace([]Knob{
		{Name: "lr", Kind: KnobFloat, Low: 0, High: 1},
		{Name: "batch", Kind: KnobInt, Low: 1, High: 512},
		{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd"}},
		{Name: "epochs", Kind: KnobFixed, Value: "10"},
	})
	tests := []struct{ name, text, want string }{
		{"missing knob", "lr=0.5,batch=64,epochs=10", `param "opt" is missing`},
		{"extra knob", "lr=0.5,batch=64,opt=sgd,epochs=10,mom=0.9", `"mom" is not in this space`},
		{"renamed knob", "rate=0.5,batch=64,opt=sgd,epochs=10", `"rate" is not in this space`},
		{"other kind", "lr=0.5,batch=adam,opt=sgd,epochs=10", `param "batch"`},
		{"other fixed", "lr=0.5,batch=64,opt=sgd,epochs=20", "not the fixed value"},
		{"other option", "lr=0.5,batch=64,opt=rmsprop,epochs=10", "not one of the options"},
		{"out of range", "lr=1.5,batch=64,opt=sgd,epochs=10", "outside"},
		{"nan", "lr=NaN,batch=64,opt=sgd,epochs=10", "not a decimal number"},
		{"inf", "lr=Inf,batch=64,opt=sgd,epochs=10", "not a decimal number"},
		{"hex float", "lr=0x1p-2,batch=64,opt=sgd,epochs=10", "not a decimal number"},
		{"twice", "lr=0.5,lr=0.5,batch=64,opt=sgd,epochs=10", "given twice"},
		{"no equals", "lr=0.5,batch,opt=sgd,epochs=10", "not name=value"},
		{"empty", "", "empty"},
		{"trailing comma", "lr=0.5,batch=64,opt=sgd,epochs=10,", "not name=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.ParsePoint(tc.text)
			var pe *PointError
			if !errors.As(err, &pe) {
				t.Fatalf("ParsePoint(%q) = %v, %v; want a *PointError", tc.text, p.v, err)
			}
			if !p.IsZero() {
				t.Errorf("ParsePoint(%q) returned a partial point %v", tc.text, p.v)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParsePoint(%q) error = %q, want it to contain %q", tc.text, err, tc.want)
			}
		})
	}
	// Any order is accepted; the text form is canonical.
	p, err := s.ParsePoint("epochs=10,opt=sgd,batch=64,lr=0.5")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.FormatPoint(p); got != "lr=0.5,batch=64,opt=sgd,epochs=10" {
		t.Errorf("FormatPoint = %q", got)
	}
}

func TestParsePointSnapsStep(t *testing.T) {
	s, _ := NewSpace([]Knob{{Name: "drop", Kind: KnobFloat, Low: 0, High: 0.5, Step: 0.1}})
	tests := []struct {
		text    string
		want    float64
		wantErr bool
	}{
		{"drop=0.3", 0.3, false},
		{"drop=0.30000000000000004", 0.3, false},
		{"drop=0.29999999999", 0.3, false},
		{"drop=0.5", 0.5, false},
		{"drop=0.35", 0, true},
		{"drop=0.6", 0, true},
		{"drop=-0.1", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			p, err := s.ParsePoint(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParsePoint(%q) error = %v, want error %v", tc.text, err, tc.wantErr)
			}
			if err == nil && p.v[0] != tc.want {
				t.Errorf("ParsePoint(%q) = %v, want %v", tc.text, p.v[0], tc.want)
			}
		})
	}
}

// TestParsePointWideRanges: every level of a grid reads back from its
// text, and whole numbers are compared exactly. Bugs it names: on
// [-1.7e308, 1.7e308] with step 1e307, x − low overflowed and the top
// levels did not read back (issue 13 item 3); near 2e16 with step 7
// (floats 4 apart) the quotient (x − low)/step rounded to the wrong level
// (found by FuzzSamplers); and on an int knob reaching 2^53, the text
// 9007199254740993 read as 2^53, a point whose text differs.
func TestParsePointWideRanges(t *testing.T) {
	const p53 = 1 << 53
	for _, k := range []Knob{
		{Name: "x", Kind: KnobFloat, Low: -1.7e308, High: 1.7e308, Step: 1e307},
		{Name: "x", Kind: KnobFloat, Low: -math.MaxFloat64, High: math.MaxFloat64, Step: math.MaxFloat64},
		{Name: "x", Kind: KnobFloat, Low: -9.007199254740992e+15, High: 2.7021597764223184e+16, Step: 7},
		{Name: "x", Kind: KnobInt, Low: -p53, High: p53 - 1, Step: 3},
	} {
		s, err := NewSpace([]Knob{k})
		if err != nil {
			t.Fatal(err)
		}
		n := s.count[0]
		for _, j := range []int{0, 1, 2, n / 3, n / 2, n - 3, n - 2, n - 1} {
			p := Point{v: []float64{s.level(0, j)}}
			text := s.FormatPoint(p)
			back, err := s.ParsePoint(text)
			if err != nil {
				t.Errorf("%+v: level %d: ParsePoint(%q): %v", k, j, text, err)
			} else if !back.Equal(p) {
				t.Errorf("%+v: level %d: ParsePoint(%q) = %v", k, j, text, back.v[0])
			}
		}
	}
	s, _ := NewSpace([]Knob{{Name: "n", Kind: KnobInt, Low: -p53, High: p53}})
	for _, text := range []string{"n=9007199254740993", "n=-9007199254740993", "n=9223372036854775807"} {
		if p, err := s.ParsePoint(text); err == nil {
			t.Errorf("ParsePoint(%q) = %s, want outside the range", text, s.FormatPoint(p))
		}
	}
	if _, err := s.ParsePoint("n=9007199254740992"); err != nil {
		t.Errorf("ParsePoint(2^53): %v", err)
	}
}

// FuzzParsePoint: whatever ParsePoint accepts, it writes back in a form
// that reads to the same bits, and the canonical text is a fixed point.
func FuzzParsePoint(f *testing.F) {
	s := testSpace(f)
	for _, seed := range []string{
		"lr=0.001,mom=0.9,drop=0.3,batch=64,layers=4,depth=-2,opt=rms prop,width=128,epochs=10,tag=run:α/β",
		"lr=1e-05,mom=0,drop=0,batch=16,layers=2,depth=-3,opt=adam,width=64,epochs=10,tag=run:α/β",
		"lr=0.1,mom=0.99,drop=0.5,batch=256,layers=8,depth=3,opt=sgd,width=64,epochs=10,tag=run:α/β",
		"tag=run:α/β,epochs=10,width=64,opt=sgd,depth=0,layers=6,batch=17,drop=0.1,mom=0.5,lr=0.0001",
		"lr=0.001", "", ",", "=", "lr==1", "lr=1e-3,lr=1e-3", "batch=64,batch=64",
		"lr=0.001,mom=0.9,drop=0.3,batch=64,layers=5,depth=-2,opt=sgd,width=128,epochs=10,tag=run:α/β",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := s.ParsePoint(text)
		if err != nil {
			if !p.IsZero() {
				t.Fatalf("ParsePoint(%q) failed but returned a point", text)
			}
			return
		}
		canon := s.FormatPoint(p)
		q, err := s.ParsePoint(canon)
		if err != nil {
			t.Fatalf("ParsePoint(FormatPoint(ParsePoint(%q))) error: %v", text, err)
		}
		if !q.Equal(p) || s.FormatPoint(q) != canon {
			t.Fatalf("round trip of %q changed the point: %q vs %q", text, canon, s.FormatPoint(q))
		}
		if _, err := s.PointJSON(p); err != nil {
			t.Fatal(err)
		}
	})
}
