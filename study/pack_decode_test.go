package study

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// lineByLineDecodePack is decodePack as first written (one line at a
// time, strings.Split per line, a Record copied per line): the oracle the
// chunked, parallel decoder must match record for record and error for
// error.
func lineByLineDecodePack(s *Study, data []byte) ([]Record, error) {
	text := string(data)
	head, body, ok := strings.Cut(text, "\n")
	if !ok {
		return nil, fmt.Errorf("pack: no header line")
	}
	hf := strings.Fields(head)
	if len(hf) != 3 || hf[0] != packFormat {
		return nil, fmt.Errorf("pack: header %q is not a soma study pack", head)
	}
	if v, err := strconv.Atoi(hf[1]); err != nil || v != packVersion {
		return nil, fmt.Errorf("%w: pack version %q, this soma reads version %d (upgrade soma)", ErrNewerFormat, hf[1], packVersion)
	}
	if hf[2] != s.name {
		return nil, fmt.Errorf("pack of study %q found in study %q", hf[2], s.name)
	}
	var recs []Record
	for line := range strings.Lines(body) {
		line = strings.TrimSuffix(line, "\n")
		f := strings.Split(line, " ")
		if len(f) < 4 || len(f)%2 != 0 {
			return nil, fmt.Errorf("pack: malformed line %.60q", line)
		}
		t, ok1 := parseNumber(f[0])
		a, ok2 := parseNumber(f[1])
		d, err := fsstore.ParseDigest(fsstore.Algo + ":" + f[2])
		ns, err2 := strconv.ParseInt(f[3], 10, 64)
		if !ok1 || !ok2 || err != nil || err2 != nil {
			return nil, fmt.Errorf("pack: malformed line %.60q", line)
		}
		meta := make(fsstore.Meta, 0, (len(f)-4)/2)
		for i := 4; i < len(f); i += 2 {
			k, err1 := packUnescape(f[i])
			v, err2 := packUnescape(f[i+1])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("pack: %w", err)
			}
			meta = append(meta, fsstore.Pair{Key: k, Value: v})
		}
		b := fsstore.Bound{Name: s.names.attempt(t, a), Digest: d, Meta: meta, Time: time.Unix(0, ns)}
		r, err := decodeRecord(s.name, s.spec.Space, t, a, b)
		if err != nil {
			return nil, err
		}
		if !r.Final(s.spec.MaxRetries) {
			return nil, fmt.Errorf("pack holds trial %d attempt %d in state %s, which does not end its trial", t, a, r.State)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// decodeTestPack returns a study and the encoded pack of n ended records
// of it, varied: every ending state, hosts and jobs that need escaping,
// with and without scores, values and start times.
func decodeTestPack(t testing.TB, n int) (*Study, []byte) {
	t.Helper()
	s := recOpen(t, recStore(t), "s", recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	base := time.Unix(1_700_000_000, 123)
	recs := make([]Record, n)
	for i := range recs {
		p, err := NewRandomSampler(uint64(i)).Ask(s.Space(), i, History{})
		if err != nil {
			t.Fatal(err)
		}
		r := Record{
			Study: "s", Number: i, Attempt: i % 3, State: StateDone,
			Point: p, PointText: s.Space().FormatPoint(p), Direction: Minimize,
			Score: float64(i) / 7, HasScore: true, LastStep: int64(i%5) - 1, Beat: int64(i),
			Who:         Who{Host: fmt.Sprintf("node %d%%", i%4), PID: 100 + i, Job: []string{"", "42_1", "x y"}[i%3]},
			Time:        base.Add(time.Duration(i) * time.Second),
			AdoptedFrom: -1,
			blob:        fsstore.Sum([]byte(strconv.Itoa(i % 5))),
		}
		switch i % 7 {
		case 1:
			r.State, r.Value, r.HasValue = StatePruned, 0.5, true
		case 2:
			r.State, r.HasScore, r.Score, r.Failures = StateFailed, false, 0, s.spec.MaxRetries
		case 3:
			r.Start = base.Add(-time.Hour).UTC()
		case 4:
			r.AdoptedFrom = 0
		}
		recs[i] = r
	}
	return s, s.encodePack(recs)
}

// replaceLine returns data with its line i (0 is the header) replaced.
func replaceLine(data []byte, i int, line string) []byte {
	lines := strings.Split(string(data), "\n")
	lines[i] = line
	return []byte(strings.Join(lines, "\n"))
}

// TestDecodePackChunksMatchLineByLine checks that decoding a pack in
// parallel chunks gives what reading it line by line gives: the same
// records in the same order, or the same error (that of the first bad
// line in the file), however the body is cut.
func TestDecodePackChunksMatchLineByLine(t *testing.T) {
	s, good := decodeTestPack(t, 300)
	lines := strings.Count(string(good), "\n")
	notFinal := strings.Replace(strings.Split(string(good), "\n")[102], "state done", "state running", 1)
	badPoint := strings.Replace(strings.Split(string(good), "\n")[250], "point x=", "point z=", 1)
	cases := []struct {
		name    string
		data    []byte
		records int // -1: an error
	}{
		{"intact", good, 300},
		{"no final newline", good[:len(good)-1], 300},
		{"header only", []byte("soma-study-pack 1 s\n"), 0},
		{"no header", []byte("soma-study-pack 1 s"), -1},
		{"other study", []byte("soma-study-pack 1 t\n"), -1},
		{"newer version", []byte("soma-study-pack 2 s\n"), -1},
		{"blank line", replaceLine(good, 150, ""), -1},
		{"malformed first line", replaceLine(good, 1, "0 0 x"), -1},
		{"malformed last line", replaceLine(good, lines, "1 2 3"), -1},
		{"bad escape", replaceLine(good, 200, strings.Replace(strings.Split(string(good), "\n")[200], "node", "no%zde", 1)), -1},
		{"not final", replaceLine(good, 102, notFinal), -1},
		{"bad point", replaceLine(good, 250, badPoint), -1},
		{"two bad lines, first wins", replaceLine(replaceLine(good, 280, "x"), 20, notFinal), -1},
	}
	cuts := []struct{ workers, minChunk int }{{1, packMinChunk}, {2, 1}, {3, 64}, {8, 1}, {64, 1}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := lineByLineDecodePack(s, tc.data)
			if n := len(want); (wantErr != nil) != (tc.records < 0) || (wantErr == nil && n != tc.records) {
				t.Fatalf("line by line: %d records, %v; the case is meant to give %d", n, wantErr, tc.records)
			}
			for _, c := range cuts {
				got, err := s.decodePackIn(tc.data, c.workers, c.minChunk)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("decodePackIn(%d workers, %d bytes) error %v, want %v", c.workers, c.minChunk, err, wantErr)
				}
				if wantErr != nil {
					if !errors.Is(err, ErrNewerFormat) && errors.Is(wantErr, ErrNewerFormat) {
						t.Errorf("decodePackIn(%d workers, %d bytes) error %v is not ErrNewerFormat", c.workers, c.minChunk, err)
					}
					continue
				}
				if len(got) != len(want) {
					t.Fatalf("decodePackIn(%d workers, %d bytes) = %d records, want %d", c.workers, c.minChunk, len(got), len(want))
				}
				for i := range got {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Fatalf("decodePackIn(%d workers, %d bytes) record %d = %+v, want %+v", c.workers, c.minChunk, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// FuzzDecodePackChunks checks the chunked decoder against the line by
// line one on any input.
func FuzzDecodePackChunks(f *testing.F) {
	s, good := decodeTestPack(f, 20)
	f.Add(good, uint8(3))
	f.Add([]byte("soma-study-pack 1 s\n\n\n"), uint8(2))
	f.Add([]byte("soma-study-pack 1 s\n0 0 x 1 kind trial\n"), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, workers uint8) {
		want, wantErr := lineByLineDecodePack(s, data)
		got, err := s.decodePackIn(data, int(workers%9)+1, 1)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Fatalf("records %+v, want %+v", got, want)
		}
	})
}

// BenchmarkDecodePack measures decoding a pack of 100k records (the
// bulk of a cold 'soma status' on a packed study of that size).
func BenchmarkDecodePack(b *testing.B) {
	s, data := decodeTestPack(b, 100_000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := s.decodePack(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOverlappingPacksKeepLatestAttempt checks the slow path of loading
// packs: a second pack that holds trials the first holds too, out of
// order, and with later attempts of some. Each trial reads as its highest
// attempt, once, in trial order.
func TestOverlappingPacksKeepLatestAttempt(t *testing.T) {
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 10), 0)
	rec := func(n, a int) Record {
		p, err := NewRandomSampler(uint64(n)).Ask(s.Space(), n, History{})
		if err != nil {
			t.Fatal(err)
		}
		return Record{Study: "s", Number: n, Attempt: a, State: StateDone, Point: p, PointText: s.Space().FormatPoint(p),
			Direction: Minimize, Score: float64(n), HasScore: true, LastStep: -1, AdoptedFrom: -1,
			Time: time.Unix(1_700_000_000+int64(n), 0), blob: fsstore.Sum([]byte("c"))}
	}
	if err := s.writePack(ctx, []Record{rec(1, 0), rec(3, 1), rec(5, 0), rec(7, 0)}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.writePack(ctx, []Record{rec(0, 0), rec(3, 0), rec(5, 2), rec(6, 0), rec(8, 1)}, 0); err != nil {
		t.Fatal(err)
	}
	snap, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range snap.Trials {
		got = append(got, fmt.Sprintf("%d/%d", r.Number, r.Attempt))
	}
	want := []string{"0/0", "1/0", "3/1", "5/2", "6/0", "7/0", "8/1"}
	if !slices.Equal(got, want) {
		t.Errorf("Trials = %v, want %v", got, want)
	}
}
