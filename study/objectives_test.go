package study

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
)

const moSpec = `direction = ["minimize", "maximize"]
metrics = ["error", "throughput"]
budget = 6
sampler = "random"
[param]
x = "float:0:1"
`

func TestSpecSeveralObjectives(t *testing.T) {
	s, err := ParseSpec([]byte(moSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Objectives() != 2 || !slices.Equal(s.Directions, []Direction{Minimize, Maximize}) || !slices.Equal(s.Metrics, []string{"error", "throughput"}) {
		t.Fatalf("spec = %+v", s)
	}
	c := s.Canonical()
	if !strings.Contains(string(c), `"directions": [`) {
		t.Errorf("canonical form lacks directions:\n%s", c)
	}
	back, err := ParseCanonical(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Canonical(), c) || DiffSpec(s, back) != "" {
		t.Errorf("canonical round trip changed the spec:\n%s\n%s", c, back.Canonical())
	}
	one, err := ParseSpec([]byte("direction = \"min\"\nbudget = 2\n[param]\nx = \"float:0:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffSpec(one, s); !strings.Contains(d, "directions: (none) → [minimize maximize]") {
		t.Errorf("DiffSpec = %q", d)
	}
	if c := string(one.Canonical()); strings.Contains(c, "directions") || strings.Contains(c, "metrics") {
		t.Errorf("a one-objective spec's canonical form changed:\n%s", c)
	}
	p, err := ParseSpec([]byte(strings.Replace(moSpec, `sampler = "random"`, `sampler = "random"`+"\n"+`pruner = "median:metric=error"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pruner.Metric != "error" || p.pruneDirection() != Minimize {
		t.Errorf("pruner = %+v, direction %v", p.Pruner, p.pruneDirection())
	}
}

func TestSpecSeveralObjectivesRefuses(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"one direction", `direction = ["minimize", "maximize"]`, `direction = ["minimize"]`, `direction has one entry (write direction = "minimize" for one objective)`},
		{"bad direction", `"maximize"]`, `"up"]`, `direction[1] "up": want "minimize" or "maximize"`},
		{"metric count", `metrics = ["error", "throughput"]`, `metrics = ["error"]`, "2 directions but 1 metrics"},
		{"no metrics", `metrics = ["error", "throughput"]`, ``, "2 directions but 0 metrics"},
		{"twice", `"throughput"]`, `"error"]`, `metric "error" listed twice`},
		{"space", `"throughput"]`, `"through put"]`, "has no spaces"},
		{"pruner without metric", `sampler = "random"`, `sampler = "random"` + "\npruner = \"asha\"", `pruner asha with several objectives: name the metric it judges (pruner.metric = "error"`},
		{"pruner unknown metric", `sampler = "random"`, `sampler = "random"` + "\npruner = \"median:metric=eror\"", `pruner.metric "eror" is not one of the metrics error, throughput (did you mean "error"?)`},
		{"metrics alone", `direction = ["minimize", "maximize"]`, `direction = "minimize"`, "needs a direction per metric"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(moSpec, tc.old, tc.new, 1)
			_, err := ParseSpec([]byte(text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseSpec:\n%s\n= %v, want an error saying %q", text, err, tc.want)
			}
		})
	}
	if _, err := ParseSpec([]byte("direction = \"min\"\nbudget = 2\npruner = \"median:metric=x\"\n[param]\nx = \"float:0:1\"\n")); err == nil || !strings.Contains(err.Error(), "pruner.metric \"x\" is for studies with several objectives") {
		t.Errorf("pruner.metric with one objective: %v", err)
	}
}

// TestFinishScores runs trials of a two-objective study in a real store:
// the scores are recorded, read back (also from a pack), and a plain
// Finish of a done trial is refused.
func TestFinishScores(t *testing.T) {
	ctx := context.Background()
	spec, err := ParseSpec([]byte(moSpec))
	if err != nil {
		t.Fatal(err)
	}
	s := recOpen(t, recStore(t), "mo", spec, 0)
	want := map[int][]float64{}
	for i := range 6 {
		run, err := s.Next(ctx, Me(""))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := run.Finish(ctx, StateDone, 1, ""); err == nil || !strings.Contains(err.Error(), "finish it with FinishScores") {
				t.Fatalf("Finish of a two-objective trial = %v, want a refusal", err)
			}
			if err := run.FinishScores(ctx, []float64{1}, ""); err == nil {
				t.Fatalf("FinishScores with one score: nil error")
			}
		}
		sc := []float64{float64(i % 3), float64(i)}
		if err := run.FinishScores(ctx, sc, ""); err != nil {
			t.Fatal(err)
		}
		want[run.Number()] = sc
	}
	check := func(what string) {
		t.Helper()
		recs, err := recOpen(t, s.store, "mo", nil, 0).Finished(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 6 {
			t.Fatalf("%s: %d finished, want 6", what, len(recs))
		}
		for _, r := range recs {
			if !slices.Equal(r.Scores, want[r.Number]) || r.Score != r.Scores[0] {
				t.Errorf("%s: trial %d: scores %v (score %v), want %v", what, r.Number, r.Scores, r.Score, want[r.Number])
			}
		}
		// error = n%3 (minimise), throughput = n (maximise): trials 3 (0, 3)
		// and 5 (2, 5) and 4 (1, 4) are not dominated; 0, 1, 2 are.
		var front []int
		for _, r := range ParetoFront(recs, spec.Directions) {
			front = append(front, r.Number)
		}
		if !slices.Equal(front, []int{3, 4, 5}) {
			t.Errorf("%s: Pareto front %v, want [3 4 5]", what, front)
		}
	}
	check("records")
	if _, err := s.Pack(ctx, PackOptions{}); err != nil {
		t.Fatal(err)
	}
	check("packed")
}

func TestParetoFront(t *testing.T) {
	dirs := []Direction{Minimize, Minimize}
	recs := []Record{
		{Number: 0, State: StateDone, Scores: []float64{1, 5}},
		{Number: 1, State: StateDone, Scores: []float64{2, 2}},
		{Number: 2, State: StateDone, Scores: []float64{3, 3}}, // dominated by 1
		{Number: 3, State: StateDone, Scores: []float64{2, 2}}, // equal to 1: both stay
		{Number: 4, State: StatePruned, Scores: []float64{0, 0}},
		{Number: 5, State: StateDone, Scores: []float64{5, 1}},
		{Number: 6, State: StateDone, Scores: []float64{1, 6}}, // dominated by 0
	}
	var got []int
	for _, r := range ParetoFront(recs, dirs) {
		got = append(got, r.Number)
	}
	if !slices.Equal(got, []int{0, 1, 3, 5}) {
		t.Errorf("ParetoFront = %v, want [0 1 3 5]", got)
	}
}

func TestHypervolume(t *testing.T) {
	minmin := []Direction{Minimize, Minimize}
	tests := []struct {
		name   string
		points [][]float64
		dirs   []Direction
		ref    []float64
		want   float64
	}{
		{"one box", [][]float64{{1, 1}}, minmin, []float64{3, 4}, 6},
		{"staircase", [][]float64{{1, 3}, {2, 2}, {3, 1}}, minmin, []float64{4, 4}, 3 + 2 + 1},
		{"dominated adds nothing", [][]float64{{1, 1}, {2, 2}}, minmin, []float64{3, 3}, 4},
		{"outside ref adds nothing", [][]float64{{1, 1}, {5, 0}}, minmin, []float64{3, 3}, 4},
		{"maximise", [][]float64{{1, 3}}, []Direction{Minimize, Maximize}, []float64{2, 1}, 2},
		{"3-d", [][]float64{{0, 0, 1}, {1, 1, 0}}, []Direction{Minimize, Minimize, Minimize}, []float64{2, 2, 2}, 4 + 2 - 1},
		{"empty", nil, minmin, []float64{1, 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Hypervolume(tc.points, tc.dirs, tc.ref); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Hypervolume = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPrunerJudgesItsMetric: with several objectives, a pruner compares
// the reports in the direction of the metric it names, on both paths a
// runner uses (Report, and Add then Judge). Bug: Judge handed the pruner
// the study's direction, unknown with several objectives, and every
// judgement failed with "the study has no direction".
func TestPrunerJudgesItsMetric(t *testing.T) {
	ctx := context.Background()
	spec, err := ParseSpec([]byte(`direction = ["maximize", "minimize"]
metrics = ["acc", "ms"]
budget = 4
sampler = "random"
pruner = "median:metric=acc,startup=1"
[param]
x = "float:0:1"
`))
	if err != nil {
		t.Fatal(err)
	}
	s := recOpen(t, recStore(t), "mo", spec, 0)
	first, err := s.Next(ctx, Me(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Report(ctx, 0, 0.9); err != nil {
		t.Fatal(err)
	}
	if err := first.FinishScores(ctx, []float64{0.9, 10}, ""); err != nil {
		t.Fatal(err)
	}
	// acc is maximised: 0.1 is worse than the median 0.9, 0.95 better.
	r, err := s.Next(ctx, Me(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(0, 0.1); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Judge(ctx, 0); err != nil || !got {
		t.Errorf("Judge after acc 0.1 = %v, %v; want true", got, err)
	}
	r2, err := s.Next(ctx, Me(""))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r2.Report(ctx, 0, 0.95); err != nil || got {
		t.Errorf("Report of acc 0.95 = %v, %v; want false", got, err)
	}
}
