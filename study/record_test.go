package study

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	spec := recSpec(t, recContinuous, "maximize", "random", "none", 5)
	p, _ := NewRandomSampler(3).Ask(spec.Space, 4, History{})
	start := time.Date(2026, 11, 30, 7, 0, 0, 123456789, time.UTC)
	for _, f := range []fields{
		{state: StateRunning, step: -1, from: -1},
		{state: StateDone, score: math.Nextafter(0.1, 1), hasScore: true, value: -1e-300, hasValue: true, step: 12, beat: 40, fails: 2,
			who: Who{Host: "node 3%", PID: 77, Job: "123_4 x"}, start: start, from: 1},
		{state: StatePruned, score: 5e300, hasScore: true, step: 0, from: -1},
		{state: StateInterrupted, step: -1, from: -1},
	} {
		f.pointText, f.dir = spec.Space.FormatPoint(p), Maximize
		b := fsstore.Bound{Name: "study/s/trial/4/2", Digest: fsstore.Sum(nil), Meta: f.meta(), Time: start}
		r, err := decodeRecord("s", spec.Space, 4, 2, b)
		if err != nil {
			t.Fatalf("decode %v: %v", f.state, err)
		}
		if got := fieldsOf(&r); got.meta().Value(keyScore) != f.meta().Value(keyScore) ||
			math.Float64bits(got.score) != math.Float64bits(f.score) || got.value != f.value ||
			got.who != f.who || !got.start.Equal(f.start) || got.from != f.from || got.fails != f.fails ||
			got.step != f.step || got.beat != f.beat || got.state != f.state || !r.Point.Equal(p) {
			t.Errorf("round trip of %+v gave %+v", f, got)
		}
	}
}

func TestParseNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		n  int
		ok bool
	}{{"0", 0, true}, {"7", 7, true}, {"123456789", 123456789, true}, {"", 0, false}, {"01", 0, false},
		{"-1", 0, false}, {"+1", 0, false}, {"1e3", 0, false}, {"1234567890", 0, false}, {" 1", 0, false}} {
		n, ok := parseNumber(tc.in)
		if n != tc.n || ok != tc.ok {
			t.Errorf("parseNumber(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.ok)
		}
	}
}

// FuzzDecodePack feeds the pack reader arbitrary bytes: it refuses or
// returns ended records, and never panics.
func FuzzDecodePack(f *testing.F) {
	st := recStore(f)
	s := recOpen(f, st, "s", recSpec(f, recContinuous, "minimize", "random", "none", 5), 0)
	ctx := context.Background()
	run, err := s.Next(ctx, recWho)
	if err != nil {
		f.Fatal(err)
	}
	if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
		f.Fatal(err)
	}
	snap, err := s.Trials(ctx)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s.encodePack(snap.Trials))
	f.Add([]byte("soma-study-pack 1 s\n"))
	f.Add([]byte("soma-study-pack 2 s\n0 0 x 1 kind trial\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := s.decodePack(data)
		if err != nil {
			return
		}
		for _, r := range recs {
			if !r.Final(s.spec.MaxRetries) {
				t.Errorf("pack gave a record that does not end its trial: %+v", r)
			}
		}
		// What it accepts, it writes back the same.
		again, err := s.decodePack(s.encodePack(recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded pack: %d records, %v; want %d", len(again), err, len(recs))
		}
		for i := range recs {
			if recordKey(recs[i]) != recordKey(again[i]) {
				t.Errorf("re-encoded %s, want %s", recordKey(again[i]), recordKey(recs[i]))
			}
		}
	})
}
