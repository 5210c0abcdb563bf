package admin

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/tools/synth"
	"github.com/soma-hpc/soma/study"
)

func TestHexScanner(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"bare", hex64, []string{hex64}},
		{"prefixed", "sha256:" + hex64 + "\n", []string{hex64}},
		{"in a pack line", "12 0 " + hex64 + " 1700000000 kind trial", []string{hex64}},
		{"too short", hex64[:63], nil},
		{"too long", hex64 + "a", nil},
		{"upper case is not a digest", strings.ToUpper(hex64), nil},
		{"two", hex64 + "," + hex64, []string{hex64, hex64}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			h := hexScanner{found: func(b []byte) { got = append(got, string(b)) }}
			for i := 0; i < len(tc.in); i++ {
				h.feed(tc.in[i])
			}
			h.feed(' ')
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("found %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGCPacksAndStatusReadsFewFiles: after gc a large study is read from
// its packs, with the same view as before.
func TestGCPacksAndStatusReadsFewFiles(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	fs, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	if _, err := synth.Study(ctx, fs, "big", n, synth.Options{}); err != nil {
		t.Fatal(err)
	}
	view := func() (*status.View, status.Opens) {
		s, err := status.Open(root)
		if err != nil {
			t.Fatal(err)
		}
		st, err := status.OpenStudy(ctx, s, "big", 0)
		if err != nil {
			t.Fatal(err)
		}
		s.ResetOpened()
		v, err := status.Load(ctx, s, st, status.Options{Top: 10})
		if err != nil {
			t.Fatal(err)
		}
		return v, s.Opened()
	}
	before, openedBefore := view()

	dry, err := GC(ctx, fs, GCOptions{DryRun: true})
	if err != nil || len(dry.Packed) != 0 {
		t.Fatalf("dry run packed %v (%v); it must change nothing", dry.Packed, err)
	}
	res, err := GC(ctx, fs, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Packed["big"]; p.Packed != n || p.Packs < 1 {
		t.Errorf("packed %+v, want all %d ended trials", p, n)
	}
	if res.Blobs != 0 {
		t.Errorf("gc removed %d blobs from a healthy young store", res.Blobs)
	}
	after, openedAfter := view()
	if after.Packs < 1 {
		t.Errorf("view after gc: %d packs", after.Packs)
	}
	if openedAfter.Total() >= 100 || openedAfter.Total() >= openedBefore.Total() {
		t.Errorf("files opened: %d before packing, %d after; want under 100 after", openedBefore.Total(), openedAfter.Total())
	}
	// The view is the same, but for the files it took to read it.
	after.Now = before.Now
	before.Packs, after.Packs = 0, 0
	for i := range after.Machines {
		after.Machines[i].AgoS = before.Machines[i].AgoS
	}
	before.Pace, after.Pace = status.Pace{}, status.Pace{}
	for _, rows := range [][]status.Row{before.Top, after.Top, before.Running, after.Running} {
		for i := range rows {
			rows[i].AgeS = 0
		}
	}
	if before.Best != nil {
		before.Best.AgeS, after.Best.AgeS = 0, 0
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the view changed with packing:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestInitRefusesAnotherSpec(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	parse := func(budget string) *study.Spec {
		sp, err := study.ParseSpec([]byte("direction = \"minimize\"\nbudget = " + budget + "\n[param]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n"))
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	res, err := Init(ctx, root, "s", parse("5"))
	if err != nil || !res.Created || res.Limit != 5 || res.Params != 1 {
		t.Fatalf("Init = %+v, %v", res, err)
	}
	res, err = Init(ctx, root, "s", parse("5"))
	if err != nil || res.Created {
		t.Errorf("Init again = %+v, %v; want found, not created", res, err)
	}
	if _, err := Init(ctx, root, "s", parse("6")); !errors.Is(err, study.ErrSpecMismatch) {
		t.Errorf("Init with another budget = %v, want ErrSpecMismatch", err)
	}
}

// GC refuses a grace under study.MinGCAge, before changing anything: a
// trial runner binds the empty curve's blob up to study.BlobReuse after
// storing it (issue 18), so a shorter grace could remove a blob a record
// is about to refer to.
func TestGCRefusesAGraceTooShort(t *testing.T) {
	ctx := context.Background()
	fs, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		age time.Duration
		ok  bool
	}{
		{study.MinGCAge - time.Nanosecond, false},
		{study.MinGCAge, true},
		{0, true}, // the default, an hour
	} {
		_, err := GC(ctx, fs, GCOptions{OlderThan: tc.age, NoPack: true})
		if got := err == nil; got != tc.ok || (err != nil && !strings.Contains(err.Error(), study.MinGCAge.String()+" or more")) {
			t.Errorf("GC with OlderThan %v: %v; want ok %v, or an error naming %v", tc.age, err, tc.ok, study.MinGCAge)
		}
	}
}
