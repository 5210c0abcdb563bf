package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/trialrun"
	"github.com/soma-hpc/soma/study"
)

// Issue 13, item 1. Bug: after a stray trial/46/0 ("hello") in a study of
// budget 45 was run by soma-trial, soma status said "46 of 45 ended · 46
// done". Names outside the budget are foreign: counted apart and listed
// by name, in the text and in --json, never as trials.
func TestStatusNamesForeignTrials(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.SpecFromFlags([]string{"x=float:0:1"}, "minimize", "random", "none", 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	trials := filepath.Join(root, "names", "study", "s", "trial")
	for _, p := range []string{"46/0", "3/0", "007/0"} {
		p = filepath.Join(trials, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(p), 0o777)
		if err := os.WriteFile(p, []byte("hello\n"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := trialrun.Run(ctx, st, root, trialrun.Options{Argv: []string{"/bin/echo", "1"}, Trial: -1, Who: study.Me(""), Guard: "/proc/self/exe"}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := soma("status", root, "--study", "s", "--verbose")
	if code != exitOK {
		t.Fatalf("status: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"3 of 3 ended · 3 done", "3 foreign names", "study/s/trial/46: trial 46 is outside the budget", "study/s/trial/3: trial 3 is outside the budget", "study/s/trial/007: "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = soma("status", root, "--study", "s", "--json")
	if code != exitOK {
		t.Fatalf("status --json: exit %d\n%s", code, errOut)
	}
	for _, e := range studytest.CheckShape(status.JSONShape, []byte(out)) {
		t.Errorf("status --json: %s", e)
	}
	var doc status.Document
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	v := doc.Studies[0]
	if c := v.Counts; c.Ended != 3 || c.Done != 3 || c.Total != 3 || c.Foreign != 3 || len(v.Foreign) != 3 || !strings.Contains(strings.Join(v.Foreign, "\n"), "study/s/trial/46:") {
		t.Errorf("status --json: counts %+v, foreign %q; want 3 ended of 3 and the 3 foreign names", c, v.Foreign)
	}
}
