package study

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// BenchmarkTakeFinish measures the trial hand-out of one process: Next
// (a snapshot, a claim by link) and Finish (a rebind by rename), each
// fsync'd, with no objective at all.
func BenchmarkTakeFinish(b *testing.B) {
	ctx := context.Background()
	st := recStore(b)
	s := recOpen(b, st, "s", recSpec(b, recContinuous, "minimize", "random", "none", 1<<30), 0)
	for b.Loop() {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			b.Fatal(err)
		}
		if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trials/s")
}

// benchStudy writes n ended trials straight into a new store, in
// parallel, as many runners would have left them.
func benchStudy(b testing.TB, n int) (*fsstore.Store, *Study) {
	b.Helper()
	ctx := context.Background()
	st := recStore(b)
	s := recOpen(b, st, "s", recSpec(b, recContinuous, "minimize", "random", "none", n), 0)
	empty, err := s.blobForEmpty(ctx)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	errs := make([]error, n)
	forEach(ctx, n, 32, func(i int) {
		p, _ := NewRandomSampler(7).Ask(s.Space(), i, History{})
		f := fields{state: StateDone, pointText: s.Space().FormatPoint(p), dir: Minimize,
			score: float64(i), hasScore: true, step: -1, who: recWho, start: now, from: -1}
		_, errs[i] = st.Claim(ctx, s.names.attempt(i, 0), empty, f.meta())
	})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return st, s
}

// BenchmarkFinished measures History (the sampler's query) on studies of
// 1k and 10k ended trials: cold (a process that has read nothing: every
// record opened), packed-cold (the same after Pack: a few packs opened),
// and warm (ended trials cached: one listing).
func BenchmarkFinished(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000} {
		st, _ := benchStudy(b, n)
		b.Run(strconv.Itoa(n)+"/cold", func(b *testing.B) {
			for b.Loop() {
				s, err := Open(ctx, st, "s", nil, Options{})
				if err != nil {
					b.Fatal(err)
				}
				h, err := s.History(ctx)
				if err != nil || len(h.Trials) != n {
					b.Fatal(len(h.Trials), err)
				}
			}
		})
		b.Run(strconv.Itoa(n)+"/packed-cold", func(b *testing.B) {
			s := recOpen(b, st, "s", nil, 0)
			if _, err := s.Pack(ctx, PackOptions{}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				s, err := Open(ctx, st, "s", nil, Options{})
				if err != nil {
					b.Fatal(err)
				}
				h, err := s.History(ctx)
				if err != nil || len(h.Trials) != n {
					b.Fatal(len(h.Trials), err)
				}
			}
		})
		b.Run(strconv.Itoa(n)+"/warm", func(b *testing.B) {
			s := recOpen(b, st, "s", nil, 0)
			for b.Loop() {
				h, err := s.History(ctx)
				if err != nil || len(h.Trials) != n {
					b.Fatal(len(h.Trials), err)
				}
			}
		})
	}
}
