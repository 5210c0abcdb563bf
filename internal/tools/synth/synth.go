// Package synth writes large synthetic studies quickly, for benchmarks
// and scale tests: n ended trials written straight into a store as the
// records a runner leaves, without running any objective. Studies made
// by real runs are what the behaviour tests use (package studytest).
//
// The records are written through fsstore (Claim: the atomic-write
// recipe), with the meta keys package study writes (study/record.go); a
// study written here is read back with study.Open before Study returns,
// so a change of the record format fails loudly instead of benchmarking
// nonsense.
package synth

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// Spec is the spec of synthetic studies: three knobs, like a small
// learning-rate search.
const Spec = `direction = "minimize"
metric = "val_loss"
budget = %d
seed = 1
max_retries = 0

[sampler]
name = "random"

[param]
lr = { type = "float", low = 1e-5, high = 1e-1, log = true }
layers = { type = "int", low = 1, high = 8 }
opt = { type = "choice", choices = ["adam", "sgd", "adamw"] }
`

// Options configure Study.
type Options struct {
	// Workers writing at once (0: 32).
	Workers int
	// Hosts the trials are spread over (0: 8), as array tasks on nodes.
	Hosts int
}

// Study creates study name in s with n ended trials (about 80% done, 15%
// pruned, 5% failed, each with a short curve) and returns it, opened.
func Study(ctx context.Context, s *fsstore.Store, name string, n int, o Options) (*study.Study, error) {
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.Hosts <= 0 {
		o.Hosts = 8
	}
	spec, err := study.ParseSpec(fmt.Appendf(nil, Spec, n))
	if err != nil {
		return nil, err
	}
	st, err := study.Open(ctx, s, name, spec, study.Options{})
	if err != nil {
		return nil, err
	}
	// A few curve blobs, shared: a curve's blob is content-addressed, so
	// equal curves are one blob anyway.
	curves := make([]fsstore.Digest, 16)
	for i := range curves {
		var c []study.Step
		for step := range 2 + i%8 {
			c = append(c, study.Step{Step: int64(step), Value: 1/float64(step+1) + float64(i)/10})
		}
		b, _ := json.Marshal(struct {
			V     int          `json:"v"`
			Curve []study.Step `json:"curve"`
		}{study.RecordVersion, c})
		if curves[i], err = s.Put(ctx, b); err != nil {
			return nil, err
		}
	}
	sampler := study.NewRandomSampler(1)
	sp := st.Space()
	start := time.Now().Add(-time.Duration(n) * time.Second)
	var wg sync.WaitGroup
	errs := make([]error, o.Workers)
	for w := range o.Workers {
		wg.Go(func() {
			for i := w; i < n; i += o.Workers {
				if ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				p, err := sampler.Ask(sp, i, study.History{})
				if err != nil {
					errs[w] = err
					return
				}
				meta := record(i, sp.FormatPoint(p), o.Hosts, start)
				if _, err := s.Claim(ctx, "study/"+name+"/trial/"+strconv.Itoa(i)+"/0", curves[i%len(curves)], meta); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	// Read it back with a fresh Study: the format must still be study's.
	st, err = study.Open(ctx, s, name, nil, study.Options{})
	if err != nil {
		return nil, err
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		return nil, err
	}
	if len(snap.Trials) != n || len(snap.Corrupt) > 0 {
		return nil, fmt.Errorf("synth: wrote %d trials, study reads %d and %d unreadable (first: %v): the record format changed; update synth.record", n, len(snap.Trials), len(snap.Corrupt), first(snap.Corrupt))
	}
	return st, nil
}

func first(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// record returns the meta of trial i's final attempt, in study's record
// format (study/record.go, fields.meta).
func record(i int, point string, hosts int, start time.Time) fsstore.Meta {
	state, score := "done", 0.1+math.Abs(math.Sin(float64(i)*12.9898))*2
	step := int64(1 + i%8)
	switch {
	case i%20 == 19:
		state = "failed"
	case i%7 == 3:
		state, step = "pruned", 2
	}
	m := fsstore.Meta{
		{Key: "kind", Value: "trial"},
		{Key: "v", Value: strconv.Itoa(study.RecordVersion)},
		{Key: "state", Value: state},
		{Key: "point", Value: point},
		{Key: "dir", Value: "minimize"},
	}
	if state != "failed" {
		m = append(m, fsstore.Pair{Key: "score", Value: strconv.FormatFloat(score, 'g', -1, 64)},
			fsstore.Pair{Key: "value", Value: strconv.FormatFloat(score, 'g', -1, 64)})
	}
	fails := "0" // a failed trial is failed for good under max_retries = 0
	h := i % hosts
	return append(m,
		fsstore.Pair{Key: "step", Value: strconv.FormatInt(step, 10)},
		fsstore.Pair{Key: "beat", Value: strconv.Itoa(3 + i%5)},
		fsstore.Pair{Key: "fails", Value: fails},
		fsstore.Pair{Key: "host", Value: "node" + strconv.Itoa(h)},
		fsstore.Pair{Key: "pid", Value: strconv.Itoa(1000 + i%997)},
		fsstore.Pair{Key: "job", Value: "4242_" + strconv.Itoa(h)},
		fsstore.Pair{Key: "start", Value: start.Add(time.Duration(i) * time.Second).UTC().Format(time.RFC3339Nano)},
	)
}

// DefaultWorkers is a sensible Options.Workers for this machine.
func DefaultWorkers() int { return max(32, 8*runtime.GOMAXPROCS(0)) }
