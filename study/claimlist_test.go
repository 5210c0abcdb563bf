package study

import (
	"context"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// A process whose listing is far behind the others' claims learns the
// numbers taken from one listing of the trial folder once it finds one
// taken, rather than a look (or a claim) per number in turn. Bug (issue
// 18): with 8 processes on the slow-filesystem harness, a trial cost 179
// LOOKUPs, most of them looks at numbers others had taken since the last
// listing.
func TestLostRaceLearnsFromOneListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 100)
	cb := fsstore.NewCounter(st)
	a, b := recOpen(t, st, "s", spec, 0), recOpen(t, cb, "s", nil, 0)
	runB, err := b.Next(ctx, recWho) // lists the study: nothing taken
	if err != nil {
		t.Fatal(err)
	}
	const others = 60
	for range others { // a takes the next 60 numbers meanwhile
		if _, err := a.Next(ctx, recWho); err != nil {
			t.Fatal(err)
		}
	}
	cb.Reset()
	// b reuses its listing: it loses the race for the number after its
	// own, lists the trial folder once, and claims past a's numbers.
	run, err := b.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := run.Number(), runB.Number()+others+1; got < want {
		t.Errorf("b claimed trial %d, want one from %d on (a holds those below)", got, want)
	}
	if got := cb.Lists.Load(); got != 1 {
		t.Errorf("Next that loses a race: %d listings, want 1", got)
	}
	if got := cb.Stats.Load(); got != 1 {
		t.Errorf("Next that loses a race: %d looks, want 1 (before the claim that wins; none at a's numbers)", got)
	}
	if got := cb.Claims.Load(); got != 2 {
		t.Errorf("Next that loses a race: %d claims, want 2 (one lost, one won)", got)
	}
}
