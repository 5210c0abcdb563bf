package study

import (
	"cmp"
	"maps"
	"slices"
)

// trialIndex is what a Study knows about each trial number, learned from
// the store and from its own claims, so that a look reads only what may
// have changed:
//
//   - which trials have ended, with their final record (never re-read:
//     a trial that ended stays ended), kept both by number and as a list
//     sorted by number, the two always holding the same records;
//   - which of those this Study ended itself (Run.Finish), for Pack's Own;
//   - the highest attempt seen of each trial (a listing may lag behind,
//     and attempts are never removed);
//   - the numbers learned to exist since the last listing (claimed here,
//     or found taken), which views add to that listing;
//   - the lowest number that may still be free (every number below it
//     exists in the store: numbers are never given back).
//
// Everything in it only grows, so a stale answer is only behind, never
// wrong. It is not safe for concurrent use: Study guards it with its
// mutex (Study.mu), and the callers of its methods hold that lock.
type trialIndex struct {
	final   map[int]Record // ended trials' latest attempts, by number
	sorted  []Record       // the same records, sorted by number
	mine    map[int]bool   // ended by this Study
	highest map[int]int    // highest attempt seen per trial
	learned map[int]bool   // known to exist since the last listing
	lowFree int            // every trial number below it exists
}

func newTrialIndex() trialIndex {
	return trialIndex{
		final:   make(map[int]Record),
		mine:    make(map[int]bool),
		highest: make(map[int]int),
	}
}

// ended reports whether trial n is known to have ended.
func (x *trialIndex) ended(n int) bool {
	_, ok := x.final[n]
	return ok
}

// endedRecord returns the record that ended trial n, if it is known.
func (x *trialIndex) endedRecord(n int) (Record, bool) {
	r, ok := x.final[n]
	return r, ok
}

// endedList returns the ended trials sorted by number. The slice is
// shared: callers read it and must not change it (adding to the index
// may replace it, never changes the records a caller holds).
func (x *trialIndex) endedList() []Record { return x.sorted }

// endedBelow is how many trials numbered below limit are known ended.
func (x *trialIndex) endedBelow(limit int) int {
	n, _ := slices.BinarySearchFunc(x.sorted, limit, func(r Record, n int) int { return r.Number - n })
	return n
}

// add records r, the latest attempt of a trial that has ended. It
// reports false, changing nothing, when the index already holds that
// attempt of the trial or a later one.
func (x *trialIndex) add(r Record) bool {
	if old, ok := x.final[r.Number]; ok && old.Attempt >= r.Attempt {
		return false
	}
	x.final[r.Number] = r
	// Trials mostly end in number order: appending is the common case.
	i, found := slices.BinarySearchFunc(x.sorted, r.Number, func(y Record, n int) int { return y.Number - n })
	if found {
		x.sorted[i] = r
		return true
	}
	x.sorted = slices.Insert(x.sorted, i, r)
	return true
}

// addAll records recs, the latest attempts of trials that have ended,
// in any order, with one merge into the sorted list, and returns those
// that were new to it (as add would have reported), one per trial. (Bug, in speed: adding
// them one by one inserted each into the middle of the list, shifting
// its tail; at the end of a budget of 1000 trials shared by 8 processes,
// each learning the others' ~875 trials moved ~100 MB of records, and 8%
// of soma-trial's CPU went to it.)
func (x *trialIndex) addAll(recs []Record) []Record {
	var add []Record
	for _, r := range recs {
		if old, ok := x.final[r.Number]; ok && old.Attempt >= r.Attempt {
			continue
		}
		x.final[r.Number] = r
		add = append(add, r)
	}
	if len(add) == 0 {
		return nil
	}
	// One record per trial, its highest attempt (the map kept the same).
	slices.SortFunc(add, func(a, b Record) int { return cmp.Or(a.Number-b.Number, b.Attempt-a.Attempt) })
	add = slices.CompactFunc(add, func(a, b Record) bool { return a.Number == b.Number })
	old := x.sorted
	if k := len(old); k == 0 || old[k-1].Number < add[0].Number {
		x.sorted = append(old, add...)
		return add
	}
	merged := make([]Record, 0, len(old)+len(add))
	i, j := 0, 0
	for i < len(old) || j < len(add) {
		switch {
		case j == len(add) || (i < len(old) && old[i].Number < add[j].Number):
			merged = append(merged, old[i])
			i++
		case i == len(old) || add[j].Number < old[i].Number:
			merged = append(merged, add[j])
			j++
		default: // the same trial: add[j] is its newer attempt
			merged = append(merged, add[j])
			i++
			j++
		}
	}
	x.sorted = merged
	return add
}

// grow makes room for n more ended trials, so that a large pack fills
// the map without rehashing a map of large values over and over. A map
// cannot be grown in place: an empty one (a cold Study, the usual case)
// is replaced by one made for the size.
func (x *trialIndex) grow(n int) {
	if n > 0 && len(x.final) == 0 {
		x.final = make(map[int]Record, n)
	}
}

// addPacked records the ended trials of one pack, recs, as add would,
// but appending to the sorted list instead of inserting. It returns
// whether the list is still sorted by number, given that it was
// (sorted); when one pack of a batch returns false, call resort once
// after the batch. A cold index whose first pack is strictly by number
// (as writePack writes it) takes that pack's slice as its list.
//
// The highest attempt is not kept for packed trials: it only guards
// reads of trials that have not ended (readLatest), and an ended trial
// is never read from its folder again.
func (x *trialIndex) addPacked(recs []Record, sorted bool) bool {
	if len(x.sorted) == 0 && strictlyByNumber(recs) {
		for j := range recs {
			x.final[recs[j].Number] = recs[j]
		}
		x.sorted = recs
		return sorted
	}
	x.sorted = slices.Grow(x.sorted, len(recs))
	for j := range recs {
		rec := &recs[j]
		old, ok := x.final[rec.Number]
		if ok && old.Attempt >= rec.Attempt {
			continue
		}
		if ok {
			x.sorted = slices.DeleteFunc(x.sorted, func(y Record) bool { return y.Number == rec.Number })
		}
		x.final[rec.Number] = *rec
		if k := len(x.sorted); sorted && k > 0 && x.sorted[k-1].Number > rec.Number {
			sorted = false
		}
		x.sorted = append(x.sorted, *rec)
	}
	return sorted
}

// resort sorts the ended list by number again, after addPacked said it
// no longer is.
func (x *trialIndex) resort() {
	slices.SortFunc(x.sorted, func(a, b Record) int { return a.Number - b.Number })
}

// markMine notes that this Study ended trial n itself.
func (x *trialIndex) markMine(n int) { x.mine[n] = true }

// mineCount is how many trials this Study ended itself.
func (x *trialIndex) mineCount() int { return len(x.mine) }

// isMine reports whether this Study ended trial n itself.
func (x *trialIndex) isMine(n int) bool { return x.mine[n] }

// highestAttempt is the highest attempt of trial n seen, and whether
// any was noted (0, false if none).
func (x *trialIndex) highestAttempt(n int) (int, bool) {
	a, ok := x.highest[n]
	return a, ok
}

// sawAttempt notes that attempt a (>= 0) of trial n exists; the
// highest seen never goes down.
func (x *trialIndex) sawAttempt(n, a int) { x.highest[n] = max(x.highest[n], a) }

// learn notes that trial n exists (claimed here or found taken) though
// the last listing may not show it.
func (x *trialIndex) learn(n int) {
	if x.learned == nil {
		x.learned = make(map[int]bool)
	}
	x.learned[n] = true
}

// hasLearned reports whether trial n was learned to exist.
func (x *trialIndex) hasLearned(n int) bool { return x.learned[n] }

// learnedCount is how many numbers were learned and not yet folded into
// a listing (forgetListed, foldLearned).
func (x *trialIndex) learnedCount() int { return len(x.learned) }

// learnedNumbers returns the numbers learned, in no order.
func (x *trialIndex) learnedNumbers() []int { return slices.Collect(maps.Keys(x.learned)) }

// foldLearned merges the numbers learned into listed, sorted, and
// forgets them; it returns a new slice (snapshots may share listed).
func (x *trialIndex) foldLearned(listed []int) []int {
	out := mergeInts(listed, slices.Sorted(maps.Keys(x.learned)))
	clear(x.learned)
	return out
}

// forgetListed forgets the numbers learned that listed (sorted) holds: a
// new listing shows them.
func (x *trialIndex) forgetListed(listed []int) {
	maps.DeleteFunc(x.learned, func(n int, _ bool) bool {
		_, ok := slices.BinarySearch(listed, n)
		return ok
	})
}

// lowestFree is the lowest trial number that may be free.
func (x *trialIndex) lowestFree() int { return x.lowFree }

// takenBelow notes that every trial number below n exists; the bound
// never goes down.
func (x *trialIndex) takenBelow(n int) { x.lowFree = max(x.lowFree, n) }

// stillOpen returns those of open, the trials a look found not ended,
// that this index does not know to have ended since, nor to have a later
// attempt (a retry claimed since).
func (x *trialIndex) stillOpen(open []Record) []Record {
	var out []Record
	for _, r := range open {
		if !x.ended(r.Number) && x.highest[r.Number] <= r.Attempt {
			out = append(out, r)
		}
	}
	return out
}
