package study

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/soma-hpc/soma/fsstore"
)

// Left is an ended trial of the study forked from that the fork did not
// carry, and why.
type Left struct {
	Trial int
	Point string // its point text, in the old space
	Why   string
}

// Forked says what Fork did.
type Forked struct {
	From, To string
	// Carried: the ended trials of From that fit the new space, now
	// trials 0 to Carried−1 of To (by From's trial number order).
	Carried int
	// Left: the ended trials that do not fit, each with why; never
	// silently dropped.
	Left []Left
	// Running: trials of From not ended when it was read (not carried).
	Running int
	// Budget is To's budget: Carried plus the trials it runs.
	Budget int
}

// ErrStudyExists: the study to create already exists.
var ErrStudyExists = errors.New("study: study exists")

// Fork creates study to from study from: its history starts with from's
// ended trials (done, pruned, failed for good) whose points fit the new
// space, as trials 0, 1, … of to, with their scores, curves and who ran
// them, so that samplers and pruners learn from them; the others are
// listed in Forked.Left, with why. spec is to's spec (nil: from's, with
// its budget in force); its budget is the number of new trials to run,
// and to's budget is that plus the trials carried (for grid, at most the
// grid's size). from is only read.
//
// The carried records are claimed before to's spec record exists, so
// that no runner joins a half-written fork; a Fork that dies midway
// leaves records and no spec (soma rm --force removes them). Two Forks
// to the same name at once: one wins, the other is refused.
func Fork(ctx context.Context, store Store, from, to string, spec *Spec) (Forked, error) {
	res := Forked{From: from, To: to}
	if err := ValidateName(to); err != nil {
		return res, err
	}
	if from == to {
		return res, fmt.Errorf("study: fork %s: --to is the same study (give a new name)", from)
	}
	src, err := Open(ctx, store, from, nil, Options{})
	if err != nil {
		return res, err
	}
	tn := names{study: to}
	if _, err := store.Resolve(ctx, tn.spec()); err == nil {
		return res, fmt.Errorf("%w: %q (fork to a new name, or remove it first: soma rm ROOT --study %s)", ErrStudyExists, to, to)
	} else if !errors.Is(err, fsstore.ErrNotFound) {
		return res, fmt.Errorf("study: fork %s: %w", from, err)
	}
	if kids, err := store.Children(ctx, tn.trials()); err == nil && len(kids) > 0 {
		return res, fmt.Errorf("%w: %q has trial records but no spec (a fork that died midway?): remove them first: soma rm ROOT --study %s --force", ErrStudyExists, to, to)
	}
	var ns Spec
	if spec != nil {
		ns = *spec
	} else {
		ns = *src.Spec()
	}
	if err := ns.Validate(); err != nil {
		return res, err
	}
	if ns.Direction != src.Direction() {
		return res, fmt.Errorf("study: fork %s: direction %s → %s: the scores of %s's trials would mean the opposite; fork with direction %s, or start a new study", from, src.Direction(), ns.Direction, from, src.Direction())
	}
	snap, err := src.Trials(ctx)
	if err != nil {
		return res, err
	}
	var carry []Record
	for _, r := range snap.Trials {
		if !r.Final(src.spec.MaxRetries) {
			res.Running++
			continue
		}
		p, err := ns.Space.ParsePoint(r.PointText)
		if err != nil {
			why := err.Error()
			var pe *PointError
			if errors.As(err, &pe) {
				why = pe.Reason
			}
			res.Left = append(res.Left, Left{Trial: r.Number, Point: r.PointText, Why: why})
			continue
		}
		r.Point = p
		r.PointText = ns.Space.FormatPoint(p)
		carry = append(carry, r)
	}
	res.Carried = len(carry)
	ns.Budget += len(carry)
	if ns.Sampler.Name == "grid" {
		if size, _ := ns.Space.Size(); ns.Budget > size {
			ns.Budget = size
		}
	}
	if err := ns.Validate(); err != nil {
		return res, err
	}
	res.Budget = ns.Budget
	slices.SortFunc(carry, func(a, b Record) int { return a.Number - b.Number })
	for i, r := range carry {
		f := fieldsOf(&r)
		f.pointText, f.dir, f.from = r.PointText, ns.Direction, -1
		f.fails = min(f.fails, ns.MaxRetries)
		if r.State == StateFailed {
			// Failed for good in the fork too, whatever its retry limit.
			f.fails = ns.MaxRetries
		}
		won, err := store.Claim(ctx, tn.attempt(i, 0), r.blob, f.meta())
		if err != nil {
			return res, fmt.Errorf("study: fork %s to %s: trial %d: %w", from, to, i, err)
		}
		if !won {
			return res, fmt.Errorf("%w: %q: trial %d was written meanwhile (another fork or runner)", ErrStudyExists, to, i)
		}
	}
	if _, err := Open(ctx, store, to, &ns, Options{}); err != nil {
		return res, fmt.Errorf("study: fork %s to %s: %w", from, to, err)
	}
	return res, nil
}
