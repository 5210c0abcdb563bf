package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// StatusOptions configure a Viewer.
type StatusOptions struct {
	// Study limits the view to one study; "" shows every study of the
	// root (in full when there is only one, one line each otherwise).
	Study string
	// Top is how many of the best trials are listed; All lists every
	// trial instead.
	Top int
	All bool
	// JSON writes a Document (JSONShape) instead of text; Compact writes
	// it on one line.
	JSON, Compact bool
	// Verbose lists every problem and the files opened.
	Verbose bool
	// Lease is the grace period after which a silent running attempt is
	// stale (zero: study.DefaultGrace). Use the runners' --lease.
	Lease time.Duration
	// WorkerTimeout is the soma-workers' heartbeat timeout, for the
	// workers section (zero: worker.DefaultHeartbeatTimeout).
	WorkerTimeout time.Duration
}

// Viewer renders soma status over one store again and again: it keeps
// each study open, so a refresh re-reads only the trials that have not
// ended (ended ones never change). A Viewer is not safe for concurrent
// use.
type Viewer struct {
	s       *Store
	o       StatusOptions
	studies map[string]*study.Study
}

// NewViewer returns a Viewer of s.
func NewViewer(s *Store, o StatusOptions) *Viewer {
	return &Viewer{s: s, o: o, studies: make(map[string]*study.Study)}
}

// Views reads the views of the studies to show. With one study asked
// for, any error opening it is returned; over a whole root, a study that
// cannot be opened (its spec record or blob is corrupt, say) is skipped
// and described in problems, one line each, so that one broken study
// never hides the others.
func (v *Viewer) Views(ctx context.Context) (views []*View, problems []string, err error) {
	names, err := Studies(ctx, v.s, v.o.Study)
	if err != nil {
		return nil, nil, err
	}
	if v.o.Study == "" {
		problems = v.unlisted(ctx, names)
	}
	views = make([]*View, 0, len(names))
	for _, name := range names {
		st := v.studies[name]
		if st == nil {
			st, err = OpenStudy(ctx, v.s, name, v.o.Lease)
			if err != nil {
				if v.o.Study != "" || ctx.Err() != nil {
					return nil, nil, err
				}
				problems = append(problems, fmt.Sprintf("study %s cannot be read: %s", name, oneLine(err.Error())))
				continue
			}
			v.studies[name] = st
		}
		opts := Options{Top: v.o.Top, All: v.o.All}
		if len(names) > 1 && !v.o.JSON {
			opts = Options{} // one line each
		}
		view, err := Load(ctx, v.s, st, opts)
		if err != nil {
			return nil, nil, err
		}
		views = append(views, view)
	}
	return views, problems, nil
}

// unlisted describes the folders under study/ that study.List leaves out
// because their study record cannot be read.
func (v *Viewer) unlisted(ctx context.Context, listed []string) []string {
	kids, err := v.s.Children(ctx, "study")
	if err != nil {
		return nil
	}
	var out []string
	for _, k := range kids {
		if slices.Contains(listed, k) || study.ValidateName(k) != nil {
			continue
		}
		_, err := v.s.Resolve(ctx, "study/"+k+"/spec")
		var ce *fsstore.CorruptError
		if errors.As(err, &ce) {
			out = append(out, fmt.Sprintf("study %s cannot be read: %s", k, oneLine(ce.Error())))
		}
	}
	return out
}

// Render reads the studies and writes the status to w.
func (v *Viewer) Render(ctx context.Context, w io.Writer) error {
	v.s.ResetOpened()
	views, problems, err := v.Views(ctx)
	if err != nil {
		return err
	}
	workers, err := ReadWorkersSection(ctx, v.s, v.o.WorkerTimeout)
	if err != nil {
		return err
	}
	if v.o.JSON {
		d := NewDocument(v.s, views)
		if problems != nil {
			d.Problems = problems
		}
		d.Workers = workers
		return WriteJSON(w, d, v.o.Compact)
	}
	if err := v.renderText(w, views, problems); err != nil {
		return err
	}
	return WriteWorkersText(w, workers)
}

// renderText writes the studies as text.
func (v *Viewer) renderText(w io.Writer, views []*View, problems []string) error {
	var err error
	for _, p := range problems {
		if _, err := fmt.Fprintf(w, "problem  %s\n", p); err != nil {
			return err
		}
	}
	to := TextOptions{Verbose: v.o.Verbose}
	if clock, why := v.s.Clock(); clock != "server" && why != nil {
		to.ClockNote = why.Error()
	}
	switch len(views) {
	case 0:
		if len(problems) > 0 {
			return nil
		}
		_, err := fmt.Fprintf(w, "no study in %s yet (create one with 'soma init %s --study NAME --spec FILE', or run soma-trial --root %s)\n", v.s.Root(), v.s.Root(), v.s.Root())
		return err
	case 1:
		opened := v.s.Opened()
		to.Opened = &opened
		return WriteText(w, views[0], to)
	}
	if err := WriteSummaries(w, v.s.Root(), views); err != nil {
		return err
	}
	if v.o.All {
		if _, err := fmt.Fprintln(w, "(--all lists the trials of one study: add --study NAME)"); err != nil {
			return err
		}
	}
	// Each study's unreadable records and foreign names, which the
	// summary only counts. (Bug: "(6 foreign)" was never named, even with
	// --verbose; issue 16.)
	named := 0
	for _, view := range views {
		for _, p := range append(slices.Clip(view.Problems), view.Foreign...) {
			if v.o.Verbose {
				if _, err := fmt.Fprintf(w, "problem  %s\n", p); err != nil {
					return err
				}
			}
			named++
		}
	}
	if named > 0 && !v.o.Verbose {
		if _, err := fmt.Fprintf(w, "(%d problems: --verbose lists them, or --study NAME)\n", named); err != nil {
			return err
		}
	}
	if v.o.Verbose {
		_, err = fmt.Fprintf(w, "read %s\n", v.s.Opened())
	}
	return err
}
