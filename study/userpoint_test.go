package study

import (
	"strings"
	"testing"
)

// userSpace is the space the --point parser tests read against.
func userSpace(t testing.TB) *Space {
	t.Helper()
	sp, err := SpecFromFlags([]string{"lr=float:1e-5:1e-1:log", "batch=int:16:256:step=16", "opt=choice:adam,sgd,rms prop", "drop=float:0:0.5:step=0.1", "epochs=fixed:10"}, "minimize", "random", "", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sp.Space
}

func TestParseUserPoint(t *testing.T) {
	s := userSpace(t)
	tests := []struct {
		name, in string
		want     string // the point's text, or "" for an error
		err      string // a part of the error
	}{
		{"in order", "lr=0.01,batch=64,opt=adam,drop=0.2,epochs=10", "lr=0.01,batch=64,opt=adam,drop=0.2,epochs=10", ""},
		{"any order, fixed left out", "opt=sgd,drop=0.1,batch=16,lr=1e-3", "lr=0.001,batch=16,opt=sgd,drop=0.1,epochs=10", ""},
		{"spaces", " lr = 0.01 , batch= 64, opt =adam ,drop=0", "lr=0.01,batch=64,opt=adam,drop=0,epochs=10", ""},
		{"an option with a space", "lr=0.01,batch=64,opt=rms prop,drop=0", "lr=0.01,batch=64,opt=rms prop,drop=0,epochs=10", ""},
		{"off the step", "lr=0.01,batch=65,opt=adam,drop=0", "", `param "batch": 65 is not low 16 plus a whole number of steps 16 (a whole number in [16, 256], step 16)`},
		{"out of range", "lr=1,batch=64,opt=adam,drop=0", "", `param "lr": 1 is outside [1e-05, 0.1] (a number in [1e-05, 0.1])`},
		{"unknown option", "lr=0.01,batch=64,opt=adamw,drop=0", "", `param "opt": "adamw" is not one of the options adam, sgd, rms prop`},
		{"unknown knob, suggested", "lr=0.01,bacth=64,opt=adam,drop=0", "", `param "bacth" is not in the study's space (params lr, batch, opt, drop, epochs) (did you mean "batch"?)`},
		{"missing", "lr=0.01,opt=adam,drop=0", "", `param "batch" is missing`},
		{"twice", "lr=0.01,lr=0.02,batch=64,opt=adam,drop=0", "", `param "lr" given twice`},
		{"not name=value", "lr=0.01,64", "", `"64" is not name=value`},
		{"empty", "  ", "", "empty"},
		{"fixed, other value", "lr=0.01,batch=64,opt=adam,drop=0,epochs=11", "", `param "epochs": "11" is not the fixed value "10"`},
		{"not a number", "lr=abc,batch=64,opt=adam,drop=0", "", `param "lr": "abc" is not a finite number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.ParseUserPoint(tc.in)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ParseUserPoint(%q) = %v, want an error with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUserPoint(%q): %v", tc.in, err)
			}
			if got := s.FormatPoint(p); got != tc.want {
				t.Errorf("ParseUserPoint(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseCSVPoints(t *testing.T) {
	s := userSpace(t)
	tests := []struct {
		name, in string
		want     []string
		err      string
	}{
		{"header in any order", "opt,lr,batch,drop\nadam,0.01,64,0.2\nsgd,1e-3,16,0\n",
			[]string{"lr=0.01,batch=64,opt=adam,drop=0.2,epochs=10", "lr=0.001,batch=16,opt=sgd,drop=0,epochs=10"}, ""},
		{"empty rows skipped", "lr,batch,opt,drop\n\n0.01,64,adam,0.2\n\n", []string{"lr=0.01,batch=64,opt=adam,drop=0.2,epochs=10"}, ""},
		{"a bad value names the line and knob", "lr,batch,opt,drop\n0.01,64,adam,0.2\n0.01,64,adam,0.7\n", nil, `csv line 3: study: point "lr=0.01,batch=64,opt=adam,drop=0.7": param "drop": 0.7 is outside [0, 0.5]`},
		{"short row", "lr,batch,opt,drop\n0.01,64\n", nil, "csv line 2: 2 values for 4 columns"},
		{"empty", "", nil, "empty (want a header row of param names: lr,batch,opt,drop,epochs)"},
		{"header only", "lr,batch,opt,drop\n", nil, "no points after the header"},
		{"an = in a value", "lr,batch,opt,drop\n0.01,64,a=b,0\n", nil, `param "opt": value "a=b" holds`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ParseCSVPoints(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ParseCSVPoints = %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("ParseCSVPoints = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzParseUserPoint: the --point parser never panics; what it accepts
// is a point of the space, which reads back unchanged from its text
// form, through both ParsePoint (the records) and ParseUserPoint; what
// it refuses is a *PointError.
func FuzzParseUserPoint(f *testing.F) {
	for _, seed := range []string{
		"lr=0.01,batch=64,opt=adam,drop=0.2,epochs=10",
		"opt=sgd,drop=0.1,batch=16,lr=1e-3",
		" lr = 0.01 , batch= 64, opt =adam ,drop=0",
		"lr=0.01,batch=64,opt=rms prop,drop=0",
		"lr=1e-5,batch=256,opt=rms prop ,drop=0.5",
		"lr=0.01,batch=65,opt=adam,drop=0",
		"lr=,batch=,opt=,drop=",
		"=,=,=",
		"lr=0x1p-3,batch=64,opt=adam,drop=0",
		"lr=0.01,batch=064,opt=adam,drop=0",
		"lr=0.01,batch=64,opt=adam,drop=0.30000000000000004",
		",,,",
		"",
	} {
		f.Add(seed)
	}
	s := userSpace(f)
	f.Fuzz(func(t *testing.T, text string) {
		p, err := s.ParseUserPoint(text)
		if err != nil {
			if _, ok := err.(*PointError); !ok {
				t.Fatalf("ParseUserPoint(%q): %T %v, want a *PointError", text, err, err)
			}
			return
		}
		canon := s.FormatPoint(p)
		q, err := s.ParsePoint(canon)
		if err != nil || !q.Equal(p) {
			t.Fatalf("ParseUserPoint(%q) = %s, which ParsePoint reads as %v, %v", text, canon, q, err)
		}
		r, err := s.ParseUserPoint(canon)
		if err != nil || !r.Equal(p) {
			t.Fatalf("ParseUserPoint(%q) = %s, which reads back as %v, %v", text, canon, r, err)
		}
	})
}
