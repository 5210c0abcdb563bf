package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soma-hpc/soma/study"
)

// Front is the Pareto front of a study with several objectives, as soma
// best shows it: the done trials that no other done trial matches or beats
// in every metric while beating in one. Its JSON form is documented by
// FrontShape.
type Front struct {
	Study      string        `json:"study"`
	Directions []string      `json:"directions"`
	Metrics    []string      `json:"metrics"`
	Done       int           `json:"done"`
	Front      []FrontMember `json:"front"`

	values [][]study.KV
}

// FrontMember is one trial of a Front.
type FrontMember struct {
	Trial     int             `json:"trial"`
	Attempt   int             `json:"attempt"`
	Scores    []float64       `json:"scores"`
	Point     json.RawMessage `json:"point"`
	PointText string          `json:"point_text"`
	Time      time.Time       `json:"time"`
}

// FrontShape documents soma best --format json for a study with several
// objectives, like BestShape.
const FrontShape = `study              string        the study
directions         array         minimize or maximize, one per metric
directions[]       string        one metric's direction
metrics            array         the objectives' names, in the spec's order
metrics[]          string        one metric
done               integer       trials done so far
front              array         the Pareto front, by trial number
front[]            object        one trial no other done trial dominates
front[].trial      integer       its number
front[].attempt    integer       its attempt
front[].scores     array         one final score per metric
front[].scores[]   number        one score
front[].point      object        knob values by name
front[].point.*    number|string one knob's value
front[].point_text string        the point as name=value,...
front[].time       string        when it ended (RFC 3339, file-server time)`

// FindFront returns the Pareto front of st, a study with several
// objectives; one with no done trial yet is a *NoResultError.
func FindFront(ctx context.Context, st *study.Study) (*Front, error) {
	spec := st.Spec()
	if spec.Objectives() < 2 {
		return nil, fmt.Errorf("study %s has one objective: it has a best trial, not a front", st.Name())
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		return nil, err
	}
	f := &Front{Study: st.Name(), Metrics: spec.Metrics, Done: snap.Counts()[study.StateDone], Front: []FrontMember{}}
	for _, d := range spec.Directions {
		f.Directions = append(f.Directions, d.String())
	}
	for _, r := range study.ParetoFront(snap.Trials, spec.Directions) {
		pj, err := st.Space().PointJSON(r.Point)
		if err != nil {
			return nil, err
		}
		f.Front = append(f.Front, FrontMember{Trial: r.Number, Attempt: r.Attempt, Scores: r.Scores, Point: pj, PointText: r.PointText, Time: r.Time})
		f.values = append(f.values, st.Space().Values(r.Point))
	}
	if len(f.Front) == 0 {
		v := FromSnapshot(st, snap, Options{})
		return nil, &NoResultError{Study: st.Name(), Counts: v.Counts, Err: study.ErrNoResult}
	}
	return f, nil
}

// WriteFront writes f as text (a table, one front trial per row) or JSON
// (FrontShape). args, which gives one point, is refused: a front has
// several.
func WriteFront(w io.Writer, f *Front, format string) error {
	var out bytes.Buffer
	switch format {
	case BestText, "":
		dirs := make([]string, len(f.Metrics))
		for i, m := range f.Metrics {
			dirs[i] = m + " (" + f.Directions[i] + ")"
		}
		fmt.Fprintf(&out, "Pareto front of %s: %d of %d done trials; %s\n", f.Study, len(f.Front), f.Done, strings.Join(dirs, ", "))
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "trial\t%s\tpoint\n", strings.Join(f.Metrics, "\t"))
		for i, m := range f.Front {
			sc := make([]string, len(m.Scores))
			for j, x := range m.Scores {
				sc[j] = ftoa(x)
			}
			var pt []string
			for _, kv := range f.values[i] {
				if !kv.Absent {
					pt = append(pt, kv.Name+"="+kv.Text)
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Trial, strings.Join(sc, "\t"), strings.Join(pt, " "))
		}
		tw.Flush()
	case BestJSON:
		enc := json.NewEncoder(&out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(f); err != nil {
			return err
		}
	case BestArgs:
		return fmt.Errorf("--format args gives one point, and study %s has a front of %d (use --format json and pick one: .front[0].point)", f.Study, len(f.Front))
	default:
		return fmt.Errorf("format %q: want text or json", format)
	}
	_, err := w.Write(out.Bytes())
	return err
}
