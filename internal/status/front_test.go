package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/study"
)

// TestFront writes a two-objective study into a real store and checks the
// Pareto front soma best shows, as text and as JSON of FrontShape.
func TestFront(t *testing.T) {
	ctx := context.Background()
	store, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.ParseSpec([]byte(`direction = ["minimize", "maximize"]
metrics = ["error", "speed"]
budget = 5
sampler = "grid"
[param]
opt = "choice:a,b,c,d"
m = "int:1:2 if opt == a"
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, store, "mo", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FindFront(ctx, st); !errors.Is(err, study.ErrNoResult) {
		t.Fatalf("FindFront with nothing done = %v, want ErrNoResult", err)
	}
	// error, speed per trial: 0 (1, 5) front; 1 (2, 2) dominated by 0;
	// 2 (0.5, 1) front; 3 (0.8, 3) front; 4 (1, 5) equal to 0: front.
	scores := [][]float64{{1, 5}, {2, 2}, {0.5, 1}, {0.8, 3}, {1, 5}}
	for range scores {
		run, err := st.Next(ctx, study.Me(""))
		if err != nil {
			t.Fatal(err)
		}
		if err := run.FinishScores(ctx, scores[run.Number()], ""); err != nil {
			t.Fatal(err)
		}
	}
	f, err := FindFront(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, m := range f.Front {
		got = append(got, m.Trial)
	}
	if want := []int{0, 2, 3, 4}; !equalInts(got, want) || f.Done != 5 {
		t.Fatalf("front %v of %d done, want %v of 5", got, f.Done, want)
	}
	var text bytes.Buffer
	if err := WriteFront(&text, f, BestText); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Pareto front of mo: 4 of 5 done trials; error (minimize), speed (maximize)", "trial  error  speed  point", "0      1      5      opt=a m=1", "3      0.8    3      opt=c"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := WriteFront(&js, f, BestJSON); err != nil {
		t.Fatal(err)
	}
	for _, e := range studytest.CheckShape(FrontShape, js.Bytes()) {
		t.Errorf("JSON vs FrontShape: %s\n%s", e, js.String())
	}
	var back Front
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var pt map[string]any
	if err := json.Unmarshal(back.Front[2].Point, &pt); err != nil || len(pt) != 1 || pt["opt"] != "c" {
		t.Errorf("trial 3's point in JSON = %s (%v), want {\"opt\":\"c\"}", back.Front[2].Point, err)
	}
	if err := WriteFront(&js, f, BestArgs); err == nil || !strings.Contains(err.Error(), "has a front of 4") {
		t.Errorf("args: %v, want a refusal", err)
	}

	// soma trials: one score column per metric, and null for the absent
	// conditional knob m.
	var tj bytes.Buffer
	if _, err := WriteTrials(ctx, st, &tj, TrialsOptions{Format: FormatJSON}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(tj.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || rows[3]["score_error"] != 0.8 || rows[3]["score_speed"] != 3.0 || rows[3]["params_m"] != nil || rows[0]["params_m"] != 1.0 {
		t.Errorf("trials JSON rows: %v", rows)
	}
	var tc bytes.Buffer
	if _, err := WriteTrials(ctx, st, &tc, TrialsOptions{Format: FormatCSV}); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := strings.Cut(tc.String(), "\n"); !strings.HasSuffix(h, ",params_opt,params_m,score_error,score_speed") {
		t.Errorf("trials CSV header %q", h)
	}

	// soma status: the front's size and hypervolume. References: error
	// 2 + 1.5/10 = 2.15, speed 1 − 4/10 = 0.6; the front's boxes (speed
	// negated) cover 1.15·2 + 1.35·2 + 1.65·0.4 = 5.66.
	sv, err := Open(store.Root())
	if err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		var b bytes.Buffer
		if err := NewViewer(sv, StatusOptions{Study: "mo", JSON: asJSON}).Render(ctx, &b); err != nil {
			t.Fatal(err)
		}
		if asJSON {
			for _, e := range studytest.CheckShape(JSONShape, b.Bytes()) {
				t.Errorf("status JSON: %s", e)
			}
			if !strings.Contains(b.String(), `"hypervolume": 5.66`) && !strings.Contains(b.String(), `"hypervolume":5.66`) {
				t.Errorf("status JSON lacks hypervolume 5.66:\n%s", b.String())
			}
			continue
		}
		for _, want := range []string{
			"front    4 trials on the Pareto front of error, speed (soma best lists them) · hypervolume 5.66 up to (2.15, 0.6)",
			"study    mo · minimize error, maximize speed · grid sampler",
		} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("status text lacks %q:\n%s", want, b.String())
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
