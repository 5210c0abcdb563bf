package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPlacedPlans measures plans per second end to end with 8
// concurrent senders and a no-op plan (one Python filter that returns its
// input) on 2 real workers of 4 slots each, behind loopback HTTP:
//
//   - placed: each plan is placed through the folder (Place with Wait),
//     sent to the chosen worker, and its lease released;
//   - placer: the same through one Placer shared by the senders (the
//     registry and the leases read once a second, kept up to date by
//     its own claims and releases), keeping released leases for its next
//     placement; placer-claim-each: one that claims a lease for every
//     plan; placers-8: one keeping Placer per sender, as 8 processes;
//   - direct: the same plans sent straight to known workers (sender g
//     always uses worker g%2, so 4 per worker: its slots), which is the
//     peer placement is measured against: what it costs is the
//     difference.
//
// Each worker keeps a warm Python daemon per slot, all started before the
// clock. With the worker's default of 2 idle daemons for 4 slots, and a
// sequential warm-up that started only one, the sub-benchmark that ran
// first (placed) paid for starting Python with numpy several times per
// round, and placement, which spreads plans over both workers, kept
// killing idle daemons on one and starting new ones on the other: 6 to 16
// daemon starts per 300 placed plans against 5 to 7 direct, each a Python
// start-up on a 2-core machine. That measured the pool, not placement.
// daemon-starts/op says whether any start fell inside the clock.
//
// Reports plans/s (scripts/bench-place.sh prints both side by side).
func BenchmarkPlacedPlans(b *testing.B) {
	const senders, slots = 8, 4
	ctx := context.Background()
	ws := []*testWorker{
		newTestWorker(b, testOptions{maxPlans: slots, idleDaemons: slots}),
		newTestWorker(b, testOptions{maxPlans: slots, idleDaemons: slots}),
	}
	s := newRegStore(b)
	clients := map[string]*Client{}
	for i, tw := range ws {
		r := testRecord("w"+strconv.Itoa(i), slots, 0, 0)
		r.Address = tw.srv.URL
		announce(b, s, r, time.Hour)
		clients[tw.srv.URL] = tw.client
		// Warm the environment, then one daemon per slot, outside the
		// clock: plans that wait for each other (Gather), so each needs
		// its own daemon. No-op plans at once could end before the next
		// began and share daemons; the sub-benchmark that ran first then
		// started the missing ones inside its clock (daemon-starts/op
		// 0.005-0.01 for placed, 1-2 starts of Python with numpy, each
		// a good part of a second here).
		warm := func(j int, gather string) error {
			p := behaviourPlan(b, fmt.Sprintf("warm-%d-%d", i, j), "NoOp")
			if gather != "" {
				p = behaviourPlan(b, fmt.Sprintf("warm-%d-%d", i, j), "Gather")
				p.Nodes[0].Config = map[string]any{"dir": gather, "n": slots}
			}
			res, err := tw.client.Run(ctx, p)
			if err == nil && res.State != StateSucceeded {
				err = fmt.Errorf("%s: %s", res.State, res.Error)
			}
			return err
		}
		if err := warm(0, ""); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		var wg sync.WaitGroup
		errs := make([]error, slots)
		gather := b.TempDir()
		for j := range slots {
			wg.Go(func() { errs[j] = warm(j+1, gather) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatalf("warm-up: %v", err)
			}
		}
	}
	starts := func() int { return ws[0].w.pool.started() + ws[1].w.pool.started() }
	var round atomic.Int64
	// The plan is built once, outside the clock: it read its filter's
	// file from disk for every plan, 9% of the CPU of a placed run.
	tmpl := behaviourPlan(b, "template", "NoOp")
	bench := func(b *testing.B, send func(g int, p *Plan) error) {
		r := round.Add(1)
		var next atomic.Int64
		var wg sync.WaitGroup
		s0 := starts()
		b.ResetTimer()
		t0 := time.Now()
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					p := *tmpl
					p.ID = fmt.Sprintf("r%d-p%d", r, i)
					if err := send(g, &p); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "plans/s")
		b.ReportMetric(float64(starts()-s0)/float64(b.N), "daemon-starts/op")
	}
	check := func(res *Result, err error) error {
		if err != nil {
			return err
		}
		if res.State != StateSucceeded {
			return fmt.Errorf("plan %s: %s: %s", res.ID, res.State, res.Error)
		}
		return nil
	}
	b.Run("placed", func(b *testing.B) {
		bench(b, func(g int, p *Plan) error {
			pl, err := Place(ctx, s, p.Requirement(), PlaceOptions{Wait: true, WaitInterval: 5 * time.Millisecond, Timeout: time.Hour})
			if err != nil {
				return err
			}
			defer pl.Release(ctx)
			return check(clients[pl.Worker.Address].Run(ctx, p))
		})
	})
	// One Placer for the 8 senders, as a long-lived client or service
	// would hold: it reads the registry and the leases once a second and
	// keeps a released lease for the next placement (KeepFor
	// DefaultLeaseKeep); and one that ends every lease at its release and
	// claims a new one for every plan (no KeepFor), as every placement
	// did before.
	for _, v := range []struct {
		name string
		keep time.Duration
	}{{"placer", DefaultLeaseKeep}, {"placer-claim-each", 0}} {
		placer := NewPlacer(s, PlaceOptions{Wait: true, WaitInterval: 5 * time.Millisecond, Timeout: time.Hour, KeepFor: v.keep}, 0)
		b.Run(v.name, func(b *testing.B) {
			bench(b, func(g int, p *Plan) error {
				pl, err := placer.Place(ctx, p.Requirement())
				if err != nil {
					return err
				}
				defer pl.Release(ctx)
				return check(clients[pl.Worker.Address].Run(ctx, p))
			})
		})
		if err := placer.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Eight placers that know nothing of each other, one per sender, as
	// eight processes would be, each keeping its released leases.
	var own [senders]*Placer
	for g := range own {
		own[g] = NewPlacer(s, PlaceOptions{Wait: true, WaitInterval: 5 * time.Millisecond, Timeout: time.Hour, KeepFor: DefaultLeaseKeep}, 0)
	}
	b.Run("placers-8", func(b *testing.B) {
		bench(b, func(g int, p *Plan) error {
			pl, err := own[g].Place(ctx, p.Requirement())
			if err != nil {
				return err
			}
			defer pl.Release(ctx)
			return check(clients[pl.Worker.Address].Run(ctx, p))
		})
	})
	for _, p := range own {
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		bench(b, func(g int, p *Plan) error {
			return check(ws[g%len(ws)].client.Run(ctx, p))
		})
	})
}
