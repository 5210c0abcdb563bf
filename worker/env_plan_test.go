package worker

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// countPips makes tw's pool count its pip runs.
func countPips(tw *testWorker) *atomic.Int32 {
	var pips atomic.Int32
	tw.w.o.Envs.pipStarted = func(string, int) { pips.Add(1) }
	return &pips
}

// envPlan is a no-op plan whose environment needs the test wheel.
func envPlan(t testing.TB, id, wheels string) *Plan {
	p := behaviourPlan(t, id, "NoOp")
	p.Env = EnvRequest{Requirements: []string{"soma_test-pkg==1.0"}, NoIndex: true, FindLinks: []string{wheels}}
	return p
}

// Issue 14: "a second plan with the same requirements runs pip 0 times",
// asserted through the worker (plans over HTTP), not the pool alone.
func TestPlansShareEnvironment(t *testing.T) {
	wheels := buildWheel(t)
	tw := newTestWorker(t, testOptions{})
	pips := countPips(tw)
	ctx := context.Background()
	for i, id := range []string{"first", "second"} {
		res, err := tw.client.Run(ctx, envPlan(t, id, wheels))
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, res)
		if got := pips.Load(); got != 1 {
			t.Fatalf("after plan %d (%s): pip ran %d times, want 1", i+1, id, got)
		}
	}
}

// BenchmarkEnvReuse: the first plan with a requirement builds its venv
// (pip once); a second plan with the same requirements runs pip 0 times.
// Each iteration uses a fresh worker and pool, so both plans are timed.
func BenchmarkEnvReuse(b *testing.B) {
	wheels := buildWheel(b)
	var first, second latencies
	var pips1, pips2 int32
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		tw := newTestWorker(b, testOptions{})
		pips := countPips(tw)
		b.StartTimer()
		for j, l := range []*latencies{&first, &second} {
			l.time(func() {
				res, err := tw.client.Run(ctx, envPlan(b, fmt.Sprintf("p%d-%d", i, j), wheels))
				if err != nil || res.State != StateSucceeded {
					b.Fatal(err, res)
				}
			})
			if j == 0 {
				pips1 += pips.Load()
			} else {
				pips2 += pips.Load() - 1
			}
		}
	}
	n := float64(len(first))
	b.ReportMetric(ms(first), "first-p50-ms")
	b.ReportMetric(ms(second), "second-p50-ms")
	b.ReportMetric(float64(pips1)/n, "first-pips")
	b.ReportMetric(float64(pips2)/n, "second-pips")
}

// ms is the median of l in milliseconds.
func ms(l latencies) float64 {
	s := slices.Clone(l)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
