package objective

import (
	"slices"
	"strings"
	"testing"
)

// TestAbsentParam: a knob absent from the point (its condition false) is
// in neither the environment nor SOMA_PARAMS, and {name?} is empty.
func TestAbsentParam(t *testing.T) {
	argv := append(py(t, `
p = params()
assert p == {"opt": "adam"}, p
assert "SOMA_PARAM_MOMENTUM" not in os.environ
assert os.environ["SOMA_PARAM_OPT"] == "adam"
assert sys.argv[1:] == ["--opt=adam", "", "--m="], sys.argv
final(1)
`), "--opt={opt}", "{momentum?}", "--m={momentum?}")
	r := run(t, Options{
		Argv:       argv,
		Params:     []Param{{Name: "opt", Text: "adam"}, {Name: "momentum", Absent: true}},
		ParamsJSON: []byte(`{"opt":"adam"}`),
	}, nil)
	if r.Outcome != Done {
		t.Fatalf("outcome %s: %s\n%s", r.Outcome, r.Reason, r.StderrTail)
	}
}

func TestSubstituteAbsent(t *testing.T) {
	params := []Param{{Name: "opt", Text: "sgd"}, {Name: "momentum", Text: "0.9"}, {Name: "beta", Absent: true}}
	tests := []struct {
		in   []string
		want []string
		err  string
	}{
		{in: []string{"{momentum?}", "{momentum}", "x{beta?}y", "{opt?}{trial?}"}, want: []string{"0.9", "0.9", "xy", "sgd3"}},
		{in: []string{"--b={beta}"}, err: "param beta is absent from this point (its condition is false); write {beta?}"},
		{in: []string{"--b={gamma?}"}, err: "{gamma} is not a parameter"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.in, " "), func(t *testing.T) {
			got, err := Substitute(tc.in, params, map[string]string{"trial": "3"})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Substitute(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Substitute(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestCheckArgs(t *testing.T) {
	params := []string{"opt", "momentum", "lr"}
	cond := map[string]string{"momentum": "opt == 'sgd'"}
	vars := []string{"study", "trial", "attempt", "trial_dir"}
	tests := []struct {
		argv []string
		err  string
	}{
		{argv: []string{"train.py", "--lr", "{lr}", "--opt={opt}", "{momentum?}", "{trial_dir}", "{lr?}"}},
		{argv: []string{"train.py", "--momentum={momentum}"}, err: "param momentum is absent where its condition (opt == 'sgd') is false; write {momentum?}, which is empty there"},
		{argv: []string{"train.py", "{mom}"}, err: "{mom} is not a parameter (parameters: opt, momentum, lr;"},
		{argv: []string{"train.py", "{mom?}"}, err: "{mom} is not a parameter"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.argv, " "), func(t *testing.T) {
			err := CheckArgs(tc.argv, params, cond, vars)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("CheckArgs(%q) = %v, want nil", tc.argv, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("CheckArgs(%q) = %v, want an error saying %q", tc.argv, err, tc.err)
			}
		})
	}
}
