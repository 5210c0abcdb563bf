package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// Best is the best done trial of a study, as soma best shows it. Its JSON
// form is documented by BestShape.
type Best struct {
	Study     string          `json:"study"`
	Direction string          `json:"direction"`
	Metric    string          `json:"metric"`
	Trial     int             `json:"trial"`
	Attempt   int             `json:"attempt"`
	Score     float64         `json:"score"`
	Point     json.RawMessage `json:"point"`
	PointText string          `json:"point_text"`
	Who       Who             `json:"who"`
	Time      time.Time       `json:"time"`
	// Done is how many trials are done (the best is the best of them).
	Done int `json:"done"`
	// Unreadable are the records that could not be read: the true best
	// may be among them, so soma best warns (issue 16: it said nothing).
	Unreadable []error `json:"-"`

	values []study.KV
}

// BestShape documents soma best --format json, like JSONShape.
const BestShape = `study          string        the study
direction      string        minimize or maximize
metric         string        the score's name ("" if the spec has none)
trial          integer       the best trial's number
attempt        integer       its attempt
score          number        its final score
point          object        knob values by name: numbers for int and float knobs, text for choices
point.*        number|string one knob's value
point_text     string        the point as name=value,...
who            object        the process that ran it
who.host       string        host
who.pid        integer       process id
who.job        string        Slurm job ("" outside Slurm)
time           string        when it ended (RFC 3339, file-server time)
done           integer       trials done so far`

// NoResultError says why a study has no best trial yet. It wraps
// study.ErrNoResult or study.ErrNoDirection.
type NoResultError struct {
	Study  string
	Counts Counts
	Err    error
}

func (e *NoResultError) Error() string {
	if errors.Is(e.Err, study.ErrNoDirection) {
		return fmt.Sprintf("study %s has no direction, so no trial is best (give direction = \"minimize\" or \"maximize\" in a new study's spec)", e.Study)
	}
	c := e.Counts
	return fmt.Sprintf("study %s has no done trial yet (%d running, %d pruned, %d failed); try again later", e.Study, c.Running+c.Stale, c.Pruned, c.Failed)
}

func (e *NoResultError) Unwrap() error { return e.Err }

// FindBest returns the best done trial of st; a study with none (or with
// no direction) is a *NoResultError.
func FindBest(ctx context.Context, st *study.Study) (*Best, error) {
	snap, err := st.Trials(ctx)
	if err != nil {
		return nil, err
	}
	r, err := snap.Best()
	if err != nil {
		v := FromSnapshot(st, snap, Options{})
		return nil, &NoResultError{Study: st.Name(), Counts: v.Counts, Err: err}
	}
	pj, err := st.Space().PointJSON(r.Point)
	if err != nil {
		return nil, err
	}
	return &Best{
		Study:      st.Name(),
		Direction:  st.Direction().String(),
		Metric:     st.Spec().Metric,
		Trial:      r.Number,
		Attempt:    r.Attempt,
		Score:      r.Score,
		Point:      pj,
		PointText:  r.PointText,
		Who:        Who{Host: r.Who.Host, PID: r.Who.PID, Job: r.Who.Job},
		Time:       r.Time,
		Done:       snap.Counts()[study.StateDone],
		Unreadable: snap.Corrupt,
		values:     st.Space().Values(r.Point),
	}, nil
}

// Best output formats.
const (
	BestText = "text"
	BestJSON = "json"
	BestArgs = "args"
)

// WriteBest writes b as text (for people), JSON (BestShape) or args: the
// point as shell-ready "--name value" words, each value quoted for a
// POSIX shell where it needs to be.
func WriteBest(w io.Writer, b *Best, format string) error {
	var out bytes.Buffer
	switch format {
	case BestText, "":
		metric := b.Metric
		if metric == "" {
			metric = "score"
		}
		fmt.Fprintf(&out, "best of %s: trial %d", b.Study, b.Trial)
		if b.Attempt > 0 {
			fmt.Fprintf(&out, " (attempt %d)", b.Attempt)
		}
		fmt.Fprintf(&out, ", %s %s (%s, best of %d done)\n", metric, ftoa(b.Score), b.Direction, b.Done)
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		for _, kv := range b.values {
			fmt.Fprintf(tw, "  %s\t%s\n", kv.Name, kv.Text)
		}
		tw.Flush()
	case BestJSON:
		enc := json.NewEncoder(&out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(b); err != nil {
			return err
		}
	case BestArgs:
		words := make([]string, 0, 2*len(b.values))
		for _, kv := range b.values {
			words = append(words, "--"+kv.Name, slurm.ShellQuote(kv.Text))
		}
		out.WriteString(strings.Join(words, " ") + "\n")
	default:
		return fmt.Errorf("format %q: want text, json or args", format)
	}
	_, err := w.Write(out.Bytes())
	return err
}
