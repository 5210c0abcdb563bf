package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/study"
)

// TestBestListsTheParetoFront: soma best on a study with several
// objectives lists its Pareto front, as text and as JSON of FrontShape.
func TestBestListsTheParetoFront(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	store, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.ParseSpec([]byte("direction = [\"min\", \"min\"]\nmetrics = [\"a\", \"b\"]\nbudget = 3\nsampler = \"grid\"\n[param]\nx = \"int:0:2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, store, "mo", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range [][]float64{{1, 2}, {2, 1}, {3, 3}} {
		run, err := st.Next(ctx, study.Me(""))
		if err != nil {
			t.Fatal(err)
		}
		if err := run.FinishScores(ctx, sc, ""); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := soma("best", root, "--study", "mo")
	if code != exitOK || !strings.Contains(out, "Pareto front of mo: 2 of 3 done trials") {
		t.Fatalf("soma best: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = soma("best", root, "--study", "mo", "--format", "json")
	if code != exitOK {
		t.Fatalf("soma best --format json: exit %d\n%s", code, errOut)
	}
	for _, e := range studytest.CheckShape(status.FrontShape, []byte(out)) {
		t.Errorf("front json: %s", e)
	}
	if code, _, errOut = soma("best", root, "--study", "mo", "--format", "args"); code == exitOK || !strings.Contains(errOut, "has a front of 2") {
		t.Errorf("soma best --format args: exit %d, %s", code, errOut)
	}
}
