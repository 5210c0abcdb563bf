package report

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// TestReportDrawsTheFront: a study with several objectives gets a front
// plot first, every done trial a mark, the front's trials ringed.
func TestReportDrawsTheFront(t *testing.T) {
	ctx := context.Background()
	store, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.ParseSpec([]byte("direction = [\"min\", \"max\"]\nmetrics = [\"err\", \"speed\"]\nbudget = 4\nsampler = \"grid\"\n[param]\nx = \"int:0:3\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, store, "mo", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Front: 0 (1, 5) and 2 (0.5, 1); 1 (2, 2) and 3 (1, 4) are dominated by 0.
	scores := [][]float64{{1, 5}, {2, 2}, {0.5, 1}, {1, 4}}
	for range scores {
		run, err := st.Next(ctx, study.Me(""))
		if err != nil {
			t.Fatal(err)
		}
		if err := run.FinishScores(ctx, scores[run.Number()], ""); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	info, err := Write(ctx, &b, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Plots) == 0 || info.Plots[0] != "front" {
		t.Fatalf("plots %v, want front first", info.Plots)
	}
	page := b.String()
	_, svg, _ := strings.Cut(page, `data-plot="front"`)
	svg, _, _ = strings.Cut(svg, "</svg>")
	if got := strings.Count(svg, `class="mark front"`); got != 2 {
		t.Errorf("%d front marks, want 2", got)
	}
	if got := strings.Count(svg, `class="mark done"`); got != 2 {
		t.Errorf("%d other marks, want 2", got)
	}
	if !strings.Contains(svg, `<polyline class="front"`) || !strings.Contains(svg, "err (minimize)") {
		t.Errorf("front plot lacks the staircase or the axis label:\n%s", svg)
	}
}
