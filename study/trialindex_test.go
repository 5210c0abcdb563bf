package study

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTrialIndexAddAll: caching a batch of ended trials at once (one
// merge) must leave the same index as adding them one by one: sorted by
// number, one record per trial, its highest attempt, whatever the order
// and overlap of the batches; and it returns the trials that were new.
func TestTrialIndexAddAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		one, batch := newTrialIndex(), newTrialIndex()
		for range 1 + rng.IntN(5) {
			var recs []Record
			lo := rng.IntN(50)
			for range rng.IntN(40) {
				recs = append(recs, Record{Number: lo + rng.IntN(30), Attempt: rng.IntN(3)})
			}
			if rng.IntN(2) == 0 { // mostly in order, as trials end
				slices.SortFunc(recs, func(x, y Record) int { return x.Number - y.Number })
			}
			newOne := map[int]bool{}
			for _, r := range recs {
				if one.add(r) {
					newOne[r.Number] = true
				}
			}
			newBatch := map[int]bool{}
			for _, r := range batch.addAll(recs) {
				newBatch[r.Number] = true
			}
			if len(newBatch) != len(newOne) {
				t.Fatalf("round %d: addAll says %d trials new, add %d", round, len(newBatch), len(newOne))
			}
		}
		if !slices.EqualFunc(one.endedList(), batch.endedList(), func(x, y Record) bool {
			return x.Number == y.Number && x.Attempt == y.Attempt
		}) {
			t.Fatalf("round %d: batch index %v, one by one %v", round, brief(batch.endedList()), brief(one.endedList()))
		}
		if len(batch.final) != len(batch.sorted) {
			t.Fatalf("round %d: map holds %d trials, list %d", round, len(batch.final), len(batch.sorted))
		}
	}
}

// TestTrialIndexAddPacked: packs, in any order and overlapping, leave the
// same index as adding their records one by one, once resorted when
// addPacked says the list is out of order.
func TestTrialIndexAddPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		one, packed := newTrialIndex(), newTrialIndex()
		sorted := true
		for range 1 + rng.IntN(4) {
			var recs []Record
			lo := rng.IntN(60)
			for n := lo; n < lo+rng.IntN(30); n++ { // as writePack writes: by number
				recs = append(recs, Record{Number: n, Attempt: rng.IntN(3)})
			}
			for _, r := range recs {
				one.add(r)
			}
			sorted = packed.addPacked(slices.Clone(recs), sorted)
		}
		if !sorted {
			packed.resort()
		}
		if !slices.EqualFunc(one.endedList(), packed.endedList(), func(x, y Record) bool {
			return x.Number == y.Number && x.Attempt == y.Attempt
		}) {
			t.Fatalf("round %d: packed index %v, one by one %v", round, brief(packed.endedList()), brief(one.endedList()))
		}
		for _, r := range one.endedList() {
			if got, ok := packed.endedRecord(r.Number); !ok || got.Attempt != r.Attempt {
				t.Fatalf("round %d: trial %d: endedRecord = attempt %d, %v; want attempt %d", round, r.Number, got.Attempt, ok, r.Attempt)
			}
		}
	}
}

// TestTrialIndexEnded: what the index answers about ended trials: an
// older attempt never replaces a newer one, and endedBelow counts by
// number, not by position.
func TestTrialIndexEnded(t *testing.T) {
	x := newTrialIndex()
	for _, r := range []Record{{Number: 5, Attempt: 1}, {Number: 2}, {Number: 9}} {
		if !x.add(r) {
			t.Fatalf("add(%d.%d) = false for a new trial", r.Number, r.Attempt)
		}
	}
	if x.add(Record{Number: 5, Attempt: 0}) {
		t.Error("add of an older attempt of trial 5 = true, want false")
	}
	if x.add(Record{Number: 5, Attempt: 1}) {
		t.Error("add of the same attempt of trial 5 = true, want false")
	}
	if r, _ := x.endedRecord(5); r.Attempt != 1 {
		t.Errorf("trial 5 ended with attempt %d, want 1", r.Attempt)
	}
	if !x.add(Record{Number: 5, Attempt: 2}) {
		t.Error("add of a later attempt of trial 5 = false, want true")
	}
	for _, tc := range []struct {
		n     int
		ended bool
	}{{2, true}, {3, false}, {5, true}, {9, true}, {10, false}} {
		if got := x.ended(tc.n); got != tc.ended {
			t.Errorf("ended(%d) = %v, want %v", tc.n, got, tc.ended)
		}
	}
	for _, tc := range []struct{ limit, want int }{{0, 0}, {2, 0}, {3, 1}, {6, 2}, {9, 2}, {10, 3}, {100, 3}} {
		if got := x.endedBelow(tc.limit); got != tc.want {
			t.Errorf("endedBelow(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
	if got, want := brief(x.endedList()), [][2]int{{2, 0}, {5, 2}, {9, 0}}; !slices.Equal(got, want) {
		t.Errorf("endedList = %v, want %v", got, want)
	}
	x.markMine(9)
	if !x.isMine(9) || x.isMine(5) {
		t.Errorf("isMine(9), isMine(5) = %v, %v; want true, false", x.isMine(9), x.isMine(5))
	}
}

// TestTrialIndexAttempts: the highest attempt seen never goes down (a
// listing that lags behind shows fewer), and a trial with none noted
// says so.
func TestTrialIndexAttempts(t *testing.T) {
	x := newTrialIndex()
	if a, ok := x.highestAttempt(4); ok {
		t.Fatalf("highestAttempt(4) = %d, true before any was seen", a)
	}
	for _, a := range []int{0, 3, 1} {
		x.sawAttempt(4, a)
	}
	if a, ok := x.highestAttempt(4); !ok || a != 3 {
		t.Errorf("highestAttempt(4) = %d, %v; want 3, true", a, ok)
	}
	// stillOpen drops what ended or was retried since the look.
	x.add(Record{Number: 1})
	open := []Record{{Number: 1}, {Number: 4, Attempt: 2}, {Number: 4, Attempt: 3}, {Number: 7}}
	if got, want := brief(x.stillOpen(open)), [][2]int{{4, 3}, {7, 0}}; !slices.Equal(got, want) {
		t.Errorf("stillOpen = %v, want %v", got, want)
	}
}

// TestTrialIndexLearned: numbers learned since a listing count until a
// listing shows them, or until they are folded into it.
func TestTrialIndexLearned(t *testing.T) {
	x := newTrialIndex()
	for _, n := range []int{8, 3, 5} {
		x.learn(n)
	}
	x.forgetListed([]int{1, 3, 4})
	if x.hasLearned(3) || !x.hasLearned(5) || !x.hasLearned(8) || x.learnedCount() != 2 {
		t.Fatalf("after a listing of 1 3 4: learned %v, want 5 8", x.learnedNumbers())
	}
	listed := []int{1, 3, 4}
	got := x.foldLearned(listed)
	if want := []int{1, 3, 4, 5, 8}; !slices.Equal(got, want) {
		t.Errorf("foldLearned = %v, want %v", got, want)
	}
	if !slices.Equal(listed, []int{1, 3, 4}) {
		t.Errorf("foldLearned changed the listing it was given: %v", listed)
	}
	if x.learnedCount() != 0 {
		t.Errorf("after folding, %d numbers still learned", x.learnedCount())
	}
	x.takenBelow(6)
	x.takenBelow(2)
	if got := x.lowestFree(); got != 6 {
		t.Errorf("lowestFree = %d after takenBelow(6), takenBelow(2); want 6", got)
	}
}
