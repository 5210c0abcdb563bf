package fsstore

import (
	"bytes"
	"context"
	"errors"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "root"), Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	t.Run("create then reopen", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "a", "b")
		s, err := Open(root, Options{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := s.Put(ctx, []byte("x"))
		if _, err := s.Bind(ctx, "k", d, nil); err != nil {
			t.Fatal(err)
		}
		s2, err := Open(root, Options{})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if _, err := s2.Resolve(ctx, "k"); err != nil {
			t.Errorf("Resolve after reopen: %v", err)
		}
	})
	t.Run("missing root without create", func(t *testing.T) {
		_, err := Open(filepath.Join(t.TempDir(), "nope"), Options{})
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(missing) = %v, want ErrNotFound", err)
		}
	})
	t.Run("non-empty folder that is not a store", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644)
		_, err := Open(dir, Options{Create: true})
		if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("Open(non-store) = %v, want ErrNotStore saying what to do", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "soma.json")); err == nil {
			t.Errorf("Open wrote soma.json into a foreign folder")
		}
	})
	t.Run("foreign soma.json", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "soma.json"), []byte(`{"name":"other"}`), 0o644)
		_, err := Open(dir, Options{})
		if !errors.Is(err, ErrNotStore) {
			t.Errorf("Open = %v, want ErrNotStore", err)
		}
	})
	t.Run("newer format refused by older reader", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "r")
		if _, err := Open(root, Options{Create: true}); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "soma.json"), []byte(`{"format":"soma-store","version":2}`), 0o644)
		_, err := Open(root, Options{Create: true})
		if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "upgrade soma") || !strings.Contains(err.Error(), "version 2") {
			t.Errorf("Open(v2) = %v, want ErrNewerFormat naming the version and the fix", err)
		}
	})
	t.Run("respects umask for group sharing", func(t *testing.T) {
		old := syscall.Umask(0o002)
		defer syscall.Umask(old)
		s := newStore(t)
		d, _ := s.Put(ctx, []byte("shared"))
		s.Bind(ctx, "study/x/spec", d, nil)
		for _, p := range []string{s.namePath("study/x/spec"), s.blobPath(d), filepath.Join(s.root, "names", "study")} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm()&0o020 == 0 {
				t.Errorf("%s mode %v: not group-writable under umask 002", p, st.Mode())
			}
		}
	})
}

func TestBlobs(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d1, err := s.Put(ctx, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := s.Put(ctx, []byte("hello"))
	if err != nil || d1 != d2 {
		t.Fatalf("Put twice = %v, %v; want %v", d2, err, d1)
	}
	n := countFiles(t, filepath.Join(s.root, "blobs"))
	if n != 1 {
		t.Errorf("same bytes twice made %d blob files, want 1", n)
	}
	got, err := s.Get(ctx, d1)
	if err != nil || string(got) != "hello" {
		t.Errorf("Get = %q, %v; want hello", got, err)
	}
	if _, err := s.Get(ctx, Sum([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(absent) = %v, want ErrNotFound", err)
	}
	if n := countFiles(t, s.tmp); n != 0 {
		t.Errorf("%d temp files left after puts", n)
	}

	t.Run("corrupt blob is an error naming the digest", func(t *testing.T) {
		d, _ := s.Put(ctx, []byte("precious"))
		os.WriteFile(s.blobPath(d), []byte("precioux"), 0o644)
		_, err := s.Get(ctx, d)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), d.String()) {
			t.Errorf("Get(corrupt) = %v, want *CorruptError naming %s", err, d)
		}
		r, err := s.OpenBlob(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(r)
		r.Close()
		if !errors.As(err, &ce) {
			t.Errorf("streaming a corrupt blob to EOF = %v, want *CorruptError", err)
		}
		res := s.GetMany(ctx, []Digest{d1, d})
		if res[0].Err != nil || !errors.As(res[1].Err, &ce) || res[1].Data != nil {
			t.Errorf("GetMany = %v/%v, want ok then corrupt with no data", res[0].Err, res[1].Err)
		}
	})

	t.Run("streaming round trip", func(t *testing.T) {
		const size = 9<<20 + 7
		src := io.LimitReader(&patternReader{}, size)
		d, n, err := s.PutStream(ctx, src)
		if err != nil || n != size {
			t.Fatalf("PutStream = %d, %v; want %d bytes", n, err, size)
		}
		want := Sum(mustRead(t, io.LimitReader(&patternReader{}, size)))
		if d != want {
			t.Errorf("PutStream digest %v, want %v", d, want)
		}
		r, err := s.OpenBlob(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		m, err := io.Copy(io.Discard, r)
		if err != nil || m != size {
			t.Errorf("OpenBlob read %d, %v; want %d", m, err, size)
		}
	})
}

type patternReader struct{ i byte }

func (p *patternReader) Read(b []byte) (int, error) {
	for j := range b {
		b[j] = p.i
		p.i = p.i*31 + 7
	}
	return len(b), nil
}

func mustRead(t *testing.T, r io.Reader) []byte {
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestNames(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, _ := s.Put(ctx, []byte("v1"))
	d2, _ := s.Put(ctx, []byte("v2"))
	meta := Meta{{"state", "running"}, {"point", "lr=0.1,opt=adam sgd"}, {"weird", "a%b\nc\x00d é"}, {"state", "dup"}}

	won, err := s.Claim(ctx, "study/a/trial/0/0", d, meta)
	if err != nil || !won {
		t.Fatalf("Claim = %v, %v; want true", won, err)
	}
	won, err = s.Claim(ctx, "study/a/trial/0/0", d2, nil)
	if err != nil || won {
		t.Fatalf("second Claim = %v, %v; want false, nil", won, err)
	}
	b, err := s.Resolve(ctx, "study/a/trial/0/0")
	if err != nil {
		t.Fatal(err)
	}
	if b.Digest != d || !equalMeta(b.Meta, meta) {
		t.Errorf("Resolve = %v %q, want %v %q (the loser must not overwrite)", b.Digest, b.Meta, d, meta)
	}
	if b.Time.IsZero() {
		t.Errorf("Resolve time is zero")
	}

	bb, err := s.Bind(ctx, "study/a/trial/0/0", d2, Meta{{"state", "done"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = s.Resolve(ctx, "study/a/trial/0/0")
	if b.Digest != d2 || b.Meta.Value("state") != "done" || !b.Time.Equal(bb.Time) {
		t.Errorf("after Bind: %v %q %v, want %v state=done time %v", b.Digest, b.Meta, b.Time, d2, bb.Time)
	}

	s.Bind(ctx, "study/a/trial/1/0", d, nil)
	s.Bind(ctx, "study/b/trial/0/0", d, nil)
	s.Bind(ctx, "study/a/spec", d, nil)
	got, corrupt, err := s.Scan(ctx, "study/a")
	if err != nil || len(corrupt) != 0 {
		t.Fatal(err, corrupt)
	}
	if names := boundNames(got); names != "study/a/spec study/a/trial/0/0 study/a/trial/1/0" {
		t.Errorf("Scan(study/a) = %s", names)
	}
	kids, _ := s.Children(ctx, "study/a/trial")
	if strings.Join(kids, " ") != "0 1" {
		t.Errorf("Children = %v, want [0 1]", kids)
	}
	if all, _, _ := s.Scan(ctx, ""); len(all) != 4 {
		t.Errorf("Scan(\"\") = %d names, want 4", len(all))
	}

	t.Run("name conflicts with prefix", func(t *testing.T) {
		_, err := s.Bind(ctx, "study/a/spec/x", d, nil)
		if err == nil || !strings.Contains(err.Error(), "leaves") {
			t.Errorf("Bind(under a leaf) = %v, want an explanation", err)
		}
	})
	t.Run("unbind and reclaim", func(t *testing.T) {
		if err := s.Unbind(ctx, "study/a/trial/1/0"); err != nil {
			t.Fatal(err)
		}
		if err := s.Unbind(ctx, "study/a/trial/1/0"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Unbind = %v, want ErrNotFound", err)
		}
		if won, _ := s.Claim(ctx, "study/a/trial/1/0", d, nil); !won {
			t.Errorf("Claim after Unbind lost")
		}
	})
	t.Run("touch advances server time", func(t *testing.T) {
		b0, _ := s.Resolve(ctx, "study/b/trial/0/0")
		time.Sleep(20 * time.Millisecond) // coarse kernel timestamps
		t1, err := s.Touch(ctx, "study/b/trial/0/0")
		if err != nil {
			t.Fatal(err)
		}
		b1, _ := s.Resolve(ctx, "study/b/trial/0/0")
		if !t1.After(b0.Time) || !b1.Time.Equal(t1) || b1.Digest != b0.Digest {
			t.Errorf("Touch: before %v, touched %v, read back %v", b0.Time, t1, b1.Time)
		}
		now, err := s.Now(ctx)
		if err != nil || now.Before(t1) {
			t.Errorf("Now = %v, %v; want >= %v", now, err, t1)
		}
		if _, err := s.Touch(ctx, "study/b/nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Touch(unbound) = %v, want ErrNotFound", err)
		}
	})
	t.Run("invalid names refused", func(t *testing.T) {
		for _, n := range []string{"", "/abs", "a//b", "a/../b", "..", "a/.hidden", "a\x00b", "tab\there", "a/b/"} {
			if _, err := s.Bind(ctx, n, d, nil); err == nil {
				t.Errorf("Bind(%q) succeeded, want error", n)
			}
			if _, err := s.Claim(ctx, n, d, nil); err == nil {
				t.Errorf("Claim(%q) succeeded, want error", n)
			}
		}
	})
}

func boundNames(bs []Bound) string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return strings.Join(out, " ")
}

func equalMeta(a, b Meta) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCorruptRecords(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, _ := s.Put(ctx, []byte("x"))
	for _, n := range []string{"r/good1", "r/trunc", "r/garbage", "r/flipped", "r/good2", "r/empty"} {
		s.Bind(ctx, n, d, Meta{{"k", "v"}})
	}
	full, _ := os.ReadFile(s.namePath("r/trunc"))
	os.WriteFile(s.namePath("r/trunc"), full[:len(full)-5], 0o644)
	os.WriteFile(s.namePath("r/garbage"), []byte("{\"json\": true}\n"), 0o644)
	flipped := bytes.Replace(full, []byte("k v"), []byte("k w"), 1)
	os.WriteFile(s.namePath("r/flipped"), flipped, 0o644)
	os.WriteFile(s.namePath("r/empty"), nil, 0o644)
	// Foreign files that are not names at all are ignored by scans.
	os.WriteFile(filepath.Join(s.names, "r", ".nfs000123"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(s.names, "r", "bad name"), []byte("x"), 0o644)

	bound, corrupt, err := s.Scan(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if got := boundNames(bound); got != "r/good1 r/good2" {
		t.Errorf("Scan good = %s", got)
	}
	var bad []string
	for _, c := range corrupt {
		bad = append(bad, c.Name)
	}
	if got := strings.Join(bad, " "); got != "r/empty r/flipped r/garbage r/trunc" {
		t.Errorf("Scan corrupt = %s", got)
	}
	var ce *CorruptError
	if _, err := s.Resolve(ctx, "r/trunc"); !errors.As(err, &ce) || ce.Name != "r/trunc" {
		t.Errorf("Resolve(truncated) = %v, want *CorruptError", err)
	}
}

// A claim's link can succeed on the server while the client sees an
// error (a lost NFS reply answered by EEXIST on retransmission, or EIO).
func TestClaimLostReply(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		link    func(od int, o string, nd int, n string) error
		wantWon bool
		wantErr bool
	}{
		{"link succeeded, reply lost as EEXIST", func(od int, o string, nd int, n string) error {
			if err := linkat(od, o, nd, n); err != nil {
				return err
			}
			return syscall.EEXIST
		}, true, false},
		{"link succeeded, reply lost as EIO", func(od int, o string, nd int, n string) error {
			if err := linkat(od, o, nd, n); err != nil {
				return err
			}
			return syscall.EIO
		}, true, false},
		{"link failed with EIO", func(od int, o string, nd int, n string) error {
			return syscall.EIO
		}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			s.link = tc.link
			d, _ := s.Put(ctx, []byte("x"))
			won, err := s.Claim(ctx, "t/0", d, nil)
			if won != tc.wantWon || (err != nil) != tc.wantErr {
				t.Errorf("Claim = %v, %v; want %v, err=%v", won, err, tc.wantWon, tc.wantErr)
			}
		})
	}
	t.Run("genuine EEXIST is not claimed", func(t *testing.T) {
		s := newStore(t)
		d, _ := s.Put(ctx, []byte("x"))
		s.Claim(ctx, "t/0", d, Meta{{"who", "first"}})
		s.link = func(od int, o string, nd int, n string) error {
			err := linkat(od, o, nd, n)
			if err == nil {
				t.Fatalf("link over an existing name succeeded")
			}
			return err
		}
		won, err := s.Claim(ctx, "t/0", d, Meta{{"who", "second"}})
		if won || err != nil {
			t.Errorf("Claim over existing = %v, %v; want false, nil", won, err)
		}
		b, _ := s.Resolve(ctx, "t/0")
		if b.Meta.Value("who") != "first" {
			t.Errorf("record now says %q, want first", b.Meta.Value("who"))
		}
	})
}

// A writer that dies between writing its temp file and publishing it
// leaves only a temp file; nothing is bound and GC removes it.
func TestCrashBeforePublishAndGC(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, _ := s.Put(ctx, []byte("x"))
	crash := errors.New("simulated crash")
	s.beforeLink = func(string) error { return crash }
	if won, err := s.Claim(ctx, "t/0", d, nil); won || !errors.Is(err, crash) {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	if _, err := s.Bind(ctx, "t/1", d, nil); !errors.Is(err, crash) {
		t.Fatalf("Bind = %v", err)
	}
	s.beforeLink = nil
	for _, n := range []string{"t/0", "t/1"} {
		if _, err := s.Resolve(ctx, n); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%s) after crash = %v, want ErrNotFound", n, err)
		}
	}
	if n := countFiles(t, s.tmp); n != 2 {
		t.Fatalf("%d temp files after two crashes, want 2", n)
	}
	orphan, _ := s.Put(ctx, []byte("orphan"))
	s.Bind(ctx, "keep/me", d, nil)
	kept, _ := s.Put(ctx, []byte("kept by caller"))

	time.Sleep(30 * time.Millisecond) // coarse kernel timestamps
	rep, err := s.GC(ctx, GCOptions{TempOlderThan: time.Millisecond, Blobs: true, DryRun: true,
		Refs: keepOnly(kept)})
	if err != nil || rep.TempFiles != 2 || rep.Blobs != 1 {
		t.Fatalf("GC dry run = %+v, %v; want 2 temp files and 1 blob", rep, err)
	}
	// GC read the server's time: tmp/ now holds the Store's clock file
	// too (Now), which is not a crash's leftover.
	if n := countFiles(t, s.tmp) - countClocks(t, s.tmp); n != 2 {
		t.Errorf("%d temp files after a dry run, want 2: it removed some", n)
	}
	os.WriteFile(filepath.Join(s.tmp, ".nfs0000abcd"), []byte("open elsewhere"), 0o644)
	time.Sleep(30 * time.Millisecond)
	rep, err = s.GC(ctx, GCOptions{TempOlderThan: time.Millisecond, Blobs: true,
		Refs: keepOnly(kept)})
	if err != nil || rep.TempFiles != 2 || rep.Blobs != 1 {
		t.Fatalf("GC = %+v, %v", rep, err)
	}
	if ok, _ := s.Has(ctx, orphan); ok {
		t.Errorf("orphan blob survived GC")
	}
	for _, x := range []Digest{d, kept} {
		if ok, _ := s.Has(ctx, x); !ok {
			t.Errorf("live blob %v removed by GC", x)
		}
	}
	if _, err := os.Stat(filepath.Join(s.tmp, ".nfs0000abcd")); err != nil {
		t.Errorf("GC touched an .nfs file: %v", err)
	}
}

// newStoreWithBlob is a new store holding one blob, for tests of names.
// keepOnly is a GCOptions.Refs that keeps d.
func keepOnly(d Digest) func(context.Context, []Bound) (func(Digest) bool, error) {
	return func(context.Context, []Bound) (func(Digest) bool, error) {
		return func(x Digest) bool { return x == d }, nil
	}
}

func newStoreWithBlob(t *testing.T) (*Store, Digest) {
	t.Helper()
	s := newStore(t)
	d, err := s.Put(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}

func TestExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := newStoreWithBlob(t)
	for _, name := range []string{"a/b/c", "a/b"} {
		if ok, err := s.Exists(ctx, name); ok || err != nil {
			t.Errorf("Exists(%q) on an empty store = %v, %v; want false, nil", name, ok, err)
		}
	}
	if won, err := s.Claim(ctx, "a/b/c", d, nil); !won || err != nil {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	if ok, err := s.Exists(ctx, "a/b/c"); !ok || err != nil {
		t.Errorf("Exists(a/b/c) after its claim = %v, %v; want true", ok, err)
	}
	// A prefix of other names is not a bound name.
	if ok, err := s.Exists(ctx, "a/b"); ok || err != nil {
		t.Errorf("Exists(a/b), a prefix, = %v, %v; want false", ok, err)
	}
	if ok, err := s.Exists(ctx, "a/b/c/d"); ok || err != nil {
		t.Errorf("Exists below a bound name = %v, %v; want false", ok, err)
	}
	if _, err := s.Exists(ctx, "../x"); err == nil {
		t.Error("Exists(../x) = nil error, want the invalid name refused")
	}
}

// Seal binds like Bind, and Probe tells a sealed name from a bound one
// with one stat, until somebody binds it again.
func TestSealAndProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := newStoreWithBlob(t)
	probe := func(name string, want Presence) {
		t.Helper()
		if got, err := s.Probe(ctx, name); got != want || err != nil {
			t.Errorf("Probe(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	probe("t/0/0", Missing)
	if won, err := s.Claim(ctx, "t/0/0", d, Meta{{"state", "running"}}); !won || err != nil {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	probe("t/0/0", Present)
	probe("t/0", Missing) // a prefix of other names
	if _, err := s.Bind(ctx, "t/0/0", d, Meta{{"state", "running"}, {"beat", "1"}}); err != nil {
		t.Fatal(err)
	}
	probe("t/0/0", Present)
	if _, err := s.Seal(ctx, "t/0/0", d, Meta{{"state", "done"}}); err != nil {
		t.Fatal(err)
	}
	probe("t/0/0", Sealed)
	if b, err := s.Resolve(ctx, "t/0/0"); err != nil || b.Meta.Value("state") != "done" {
		t.Errorf("Resolve of a sealed name = %v, %v; want its record", b.Meta, err)
	}
	// A later Bind (an admin's rewrite) is not sealed.
	if _, err := s.Bind(ctx, "t/0/0", d, Meta{{"state", "interrupted"}}); err != nil {
		t.Fatal(err)
	}
	probe("t/0/0", Present)
	// Seal of a new name in a new folder, as Bind.
	if _, err := s.Seal(ctx, "u/1/0", d, nil); err != nil {
		t.Fatal(err)
	}
	probe("u/1/0", Sealed)
	if _, err := s.Probe(ctx, "../x"); err == nil {
		t.Error("Probe(../x) = nil error, want the invalid name refused")
	}
	// Whatever the umask, a record that is not sealed has no execute bit:
	// that is what makes the hint safe.
	old := unix.Umask(0)
	_, err := s.Bind(ctx, "t/0/0", d, nil)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	probe("t/0/0", Present)
}

// TestEphemeralClaimUnbind: ClaimEphemeral and UnbindEphemeral are Claim
// and Unbind without the fsyncs: the record reads back the same, a second
// claim loses, and once unbound the name can be claimed again.
func TestEphemeralClaimUnbind(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, err := s.Put(ctx, []byte("lease"))
	if err != nil {
		t.Fatal(err)
	}
	const name = "leases/w1/0"
	for round := range 3 {
		won, err := s.ClaimEphemeral(ctx, name, d, Meta{{"round", strconv.Itoa(round)}})
		if err != nil || !won {
			t.Fatalf("round %d: claim = %v, %v; want won", round, won, err)
		}
		if won, err := s.ClaimEphemeral(ctx, name, d, nil); err != nil || won {
			t.Fatalf("round %d: second claim = %v, %v; want lost", round, won, err)
		}
		b, err := s.Resolve(ctx, name)
		if err != nil || b.Digest != d || b.Meta.Value("round") != strconv.Itoa(round) {
			t.Fatalf("round %d: resolve = %+v, %v", round, b, err)
		}
		if err := s.UnbindEphemeral(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := s.UnbindEphemeral(ctx, name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("round %d: second unbind = %v, want ErrNotFound", round, err)
		}
	}
}

// TestEphemeralFolderReplaced: a lease's folder is kept open between
// leases (dirCache); when it is removed and made again meanwhile (by hand,
// or by a process on another machine), a claim and an unbind act on the
// folder at the path, not on the removed one they kept: the claim wins
// in the new folder, and the unbind removes the name another store bound
// there.
func TestEphemeralFolderReplaced(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	other, err := Open(s.Root(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, []byte("lease"))
	if err != nil {
		t.Fatal(err)
	}
	const name = "leases/w1/0"
	folder := filepath.Join(s.Root(), "names", "leases", "w1")
	replace := func() {
		t.Helper()
		if err := os.RemoveAll(folder); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(folder, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(folder, 0o777); err != nil {
		t.Fatal(err)
	}
	if won, err := s.ClaimEphemeral(ctx, name, d, nil); err != nil || !won {
		t.Fatalf("claim = %v, %v; want won", won, err)
	}

	replace()
	if won, err := s.ClaimEphemeral(ctx, name, d, Meta{{"in", "new"}}); err != nil || !won {
		t.Fatalf("claim after the folder was made again = %v, %v; want won", won, err)
	}
	if b, err := other.Resolve(ctx, name); err != nil || b.Meta.Value("in") != "new" {
		t.Fatalf("another store resolves %+v, %v; want the claim made in the new folder", b, err)
	}

	replace()
	if won, err := other.ClaimEphemeral(ctx, name, d, Meta{{"by", "other"}}); err != nil || !won {
		t.Fatalf("other's claim = %v, %v; want won", won, err)
	}
	if err := s.UnbindEphemeral(ctx, name); err != nil {
		t.Fatalf("unbind of the name bound in the new folder = %v", err)
	}
	if _, err := other.Resolve(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the unbind, resolve = %v; want ErrNotFound", err)
	}
}
