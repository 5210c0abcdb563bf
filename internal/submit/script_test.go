package submit

import (
	"context"
	"strings"
	"testing"
)

// Issue 16: the script's comment said the trials' logs are
// logs/<study>/<trial>.<attempt>.out, though they are per worker, and a
// dry run said the study "was created or checked at submission" though
// it creates nothing. A submitted script says what happened; a dry run's
// says nothing was created.
func TestScriptCommentIsTrue(t *testing.T) {
	f := newFixture(t)
	client, _ := fakeSlurm(t)
	ctx := context.Background()
	res, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client }))
	if err != nil {
		t.Fatal(err)
	}
	dry, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client; o.DryRun = true }))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		script      []byte
		want, never string
	}{
		{"dry run", dry.Script, "# A dry run: nothing was created or submitted.", "was created or checked"},
		{"submitted", res.Script, "# The study was created or checked at submission", "dry run"},
	} {
		s := string(tc.script)
		if !strings.Contains(s, tc.want) || strings.Contains(s, tc.never) {
			t.Errorf("%s: script lacks %q or has %q:\n%s", tc.name, tc.want, tc.never, s)
		}
		if !strings.Contains(s, "/logs/spam/<host>.<pid>.<worker>.out and .err") || strings.Contains(s, "<trial>.<attempt>.out") {
			t.Errorf("%s: the objectives' logs are not said to be per worker:\n%s", tc.name, s)
		}
	}
}

// Issue 16: a {typo} in the objective was submitted, and every task of
// the array then failed on it. Submit refuses it, for a new study and an
// existing one, naming the parameters.
func TestSubmitRefusesAPlaceholderTypo(t *testing.T) {
	f := newFixture(t)
	client, _ := fakeSlurm(t)
	ctx := context.Background()
	for _, spec := range []bool{true, false} { // creating it, then joining it
		_, err := Submit(ctx, f.store, f.options(func(o *Options) {
			o.Slurm = client
			o.Objective = []string{"python3", "train.py", "--x", "{xx}"}
			if !spec {
				o.Spec = nil
			}
		}))
		if err == nil || !strings.Contains(err.Error(), "{xx} is not a parameter (parameters: x;") {
			t.Errorf("spec %v: %v, want {xx} refused", spec, err)
		}
		if spec {
			if _, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client })); err != nil {
				t.Fatal(err)
			}
		}
	}
}
