package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/study"
)

// LogOptions configure Logs.
type LogOptions struct {
	Trial int
	// Attempt is the attempt to show; -1 means the trial's latest.
	Attempt int
	// Stderr shows the objective's standard error instead of its output.
	Stderr bool
	// Follow keeps printing what the objective writes until its attempt
	// ends (or ctx does), like tail -f.
	Follow bool
	// Poll is how often a followed log and its attempt's state are
	// re-read (0: 500 ms). Polling, not inotify: the objective usually
	// runs on another node.
	Poll time.Duration
	// Notes gets one line when a followed attempt ends (nil: discarded).
	Notes io.Writer
}

// Logs copies the output soma-trial kept for one attempt of a trial
// (runlog.Find under root) to w. A trial the study does not have, an
// attempt it never made, and a record that cannot be read are errors
// that say so; so is a missing log of an attempt that is not running.
func Logs(ctx context.Context, st *study.Study, root string, o LogOptions, w io.Writer) error {
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Notes == nil {
		o.Notes = io.Discard
	}
	rec, err := attemptOf(ctx, st, o.Trial, o.Attempt)
	if err != nil {
		return err
	}
	running := rec.State == study.StateRunning
	// where returns the attempt's file and range in it (ok false: no
	// index names the attempt yet).
	where := func() (path string, start, end int64, ok bool, err error) {
		loc, ok, err := runlog.Find(root, st.Name(), rec.Number, rec.Attempt)
		if err != nil || !ok {
			return "", 0, 0, ok, err
		}
		path, start, end = loc.Out, loc.OutStart, loc.OutEnd
		if o.Stderr {
			path, start, end = loc.Err, loc.ErrStart, loc.ErrEnd
		}
		if !loc.Ended {
			end = -1
		}
		return path, start, end, true, nil
	}
	path, off, end, ok, err := where()
	if err != nil {
		return err
	}
	if !ok && !(o.Follow && running) {
		return fmt.Errorf("no output kept for trial %d attempt %d of %s: no log index in %s names it (the attempt ran with another --root, or its objective never started)", rec.Number, rec.Attempt, st.Name(), runlog.Dir(root, st.Name()))
	}
	if ok {
		if end == off {
			// Said for stdout too: an empty stdout printed nothing at
			// all while an empty stderr was noted (issue 16).
			stream := "stdout"
			if o.Stderr {
				stream = "stderr"
			}
			fmt.Fprintf(o.Notes, "(trial %d attempt %d wrote nothing to %s)\n", rec.Number, rec.Attempt, stream)
		}
		if off, err = runlog.CopyRange(path, off, end, w); err != nil {
			return err
		}
	}
	if !o.Follow || !running {
		return nil
	}
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	checkEvery := max(1, int(2*time.Second/o.Poll))
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !ok || end < 0 {
			// Not started yet, or running: look for its start and end.
			var p string
			var start int64
			if p, start, end, ok, err = where(); err != nil {
				return err
			}
			if ok && path == "" {
				path, off = p, start
			}
		}
		if ok {
			if off, err = runlog.CopyRange(path, off, end, w); err != nil {
				return err
			}
		}
		if i%checkEvery != 0 {
			continue
		}
		latest, err := attemptOf(ctx, st, rec.Number, -1)
		if err != nil {
			return err
		}
		now := latest
		if latest.Attempt != rec.Attempt {
			// Retried: this attempt went stale or was interrupted.
			if now, err = attemptOf(ctx, st, rec.Number, rec.Attempt); err != nil {
				return err
			}
		} else if now.State == study.StateRunning {
			continue
		}
		// One last read: the objective may have written before it ended.
		if p, start, e, found, err := where(); err == nil && found {
			if path == "" {
				path, off = p, start
			}
			if _, err := runlog.CopyRange(path, off, e, w); err != nil {
				return err
			}
		}
		note := fmt.Sprintf("trial %d attempt %d %s", rec.Number, rec.Attempt, now.State)
		if now.HasScore {
			note += " (score " + strconv.FormatFloat(now.Score, 'g', -1, 64) + ")"
		}
		if latest.Attempt > rec.Attempt {
			note += fmt.Sprintf("; retried as attempt %d (soma logs ... %d --attempt %d)", latest.Attempt, rec.Number, latest.Attempt)
		}
		fmt.Fprintln(o.Notes, note)
		return nil
	}
}

// attemptOf returns attempt a of trial n (a < 0: its latest attempt).
func attemptOf(ctx context.Context, st *study.Study, n, a int) (study.Record, error) {
	snap, err := st.Trials(ctx)
	if err != nil {
		return study.Record{}, err
	}
	latest, ok := snap.Trial(n)
	if !ok {
		prefix := "study/" + st.Name() + "/trial/" + strconv.Itoa(n) + "/"
		for _, e := range snap.Corrupt {
			if strings.HasPrefix(problemName(e), prefix) {
				return study.Record{}, fmt.Errorf("trial %d of %s: %w", n, st.Name(), e)
			}
		}
		return study.Record{}, fmt.Errorf("study %s has no trial %d (%s)", st.Name(), n, trialRange(snap))
	}
	if a < 0 || a == latest.Attempt {
		return latest, nil
	}
	if a > latest.Attempt {
		return study.Record{}, fmt.Errorf("trial %d of %s has attempts 0 to %d, not %d", n, st.Name(), latest.Attempt, a)
	}
	all, problems, err := st.Attempts(ctx, false)
	if err != nil {
		return study.Record{}, err
	}
	for _, r := range all {
		if r.Number == n && r.Attempt == a {
			return r, nil
		}
	}
	want := "study/" + st.Name() + "/trial/" + strconv.Itoa(n) + "/" + strconv.Itoa(a)
	for _, e := range problems {
		if problemName(e) == want {
			return study.Record{}, fmt.Errorf("trial %d attempt %d of %s: %w", n, a, st.Name(), e)
		}
	}
	return study.Record{}, fmt.Errorf("trial %d of %s has no readable attempt %d", n, st.Name(), a)
}

func trialRange(snap *study.Snapshot) string {
	if len(snap.Trials) == 0 {
		return "it has no trial yet"
	}
	return fmt.Sprintf("it has %d trials, numbered %d to %d", len(snap.Trials), snap.Trials[0].Number, snap.Trials[len(snap.Trials)-1].Number)
}

// problemName returns the store name of an unreadable record (a
// *study.RecordError or *fsstore.CorruptError), or "".
func problemName(err error) string {
	var re *study.RecordError
	if errors.As(err, &re) {
		return re.Name
	}
	var ce *fsstore.CorruptError
	if errors.As(err, &ce) {
		return ce.Name
	}
	return ""
}
