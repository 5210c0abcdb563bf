package objective

import (
	"strings"
	"sync"
)

// reports is what Run reads on the objective's fd 3: the curve, the final
// line, the first protocol error, and the verdicts written back on fd 4.
// line and answer run on watch's goroutine only; mu guards what Run reads
// once the objective has exited.
type reports struct {
	onReport func(step int64, value float64) (prune bool) // Options.OnReport, may be nil
	lastOnly bool                                         // Options.LastStepOnly
	verdicts verdictWriter
	pruneAt  chan int64 // the step the trial was pruned at, once (buffered, 1)

	mu          sync.Mutex
	curve       []Step
	final       *float64
	finalFields []string // the final line's values
	protoErr    string   // the first bad line, why

	pruned  bool   // watch's goroutine only
	answers []byte // verdicts not written yet (watch's goroutine only)
}

// line takes one line of the report protocol.
func (r *reports) line(text string) {
	if strings.HasPrefix(text, "reports ") {
		r.batch(text)
		return
	}
	kind, step, val, err := parseLine(text)
	r.mu.Lock()
	switch {
	case err != nil:
		r.badLine(err)
	case kind == "final":
		v := val
		r.final = &v
		r.finalFields = strings.Fields(text)[1:]
	case kind == "report":
		r.keep(Step{step, val})
	}
	r.mu.Unlock()
	if err != nil || kind != "report" {
		return
	}
	r.judge(Step{step, val})
	r.verdict()
}

// batch takes a "reports" line (report(..., wait=False)'s batch): each
// step is judged, and the batch gets one verdict, "prune" if any of its
// steps pruned.
func (r *reports) batch(text string) {
	steps, err := parseBatch(text)
	r.mu.Lock()
	if err != nil {
		r.badLine(err)
		r.mu.Unlock()
		return
	}
	if r.lastOnly {
		r.keep(steps[len(steps)-1]) // parseBatch never returns an empty batch
	} else {
		r.curve = append(r.curve, steps...)
	}
	r.mu.Unlock()
	for _, st := range steps {
		if r.pruned {
			break
		}
		r.judge(st)
	}
	r.verdict()
}

// badLine keeps the first protocol error. r.mu is held.
func (r *reports) badLine(err error) {
	if r.protoErr == "" {
		r.protoErr = err.Error()
	}
}

// keep adds st to the curve (lastOnly: in place of the last). r.mu is held.
func (r *reports) keep(st Step) {
	if r.lastOnly && len(r.curve) > 0 {
		r.curve[0] = st
		return
	}
	r.curve = append(r.curve, st)
}

// judge asks onReport about st unless the trial is pruned already.
func (r *reports) judge(st Step) {
	if !r.pruned && r.onReport != nil && r.onReport(st.Step, st.Value) {
		r.pruned = true
		r.pruneAt <- st.Step
	}
}

// verdict queues the answer to one report line. Every report after a
// prune is answered "prune" too. (It used to be "continue": an objective
// that missed the first verdict was told to go on.)
func (r *reports) verdict() {
	if r.pruned {
		r.answers = append(r.answers, "prune\n"...)
	} else {
		r.answers = append(r.answers, "continue\n"...)
	}
}

// answer writes the verdicts of one read's reports together (watch).
func (r *reports) answer() {
	if len(r.answers) > 0 {
		r.verdicts.write(r.answers)
		r.answers = r.answers[:0]
	}
}
