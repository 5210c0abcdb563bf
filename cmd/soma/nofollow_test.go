package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// buildSomaTrial builds the soma-trial binary into a temp folder.
func buildSomaTrial(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "soma-trial")
	if out, err := exec.Command("go", "build", "-o", bin, "../soma-trial").CombinedOutput(); err != nil {
		t.Fatalf("build soma-trial: %v\n%s", err, out)
	}
	return bin
}

// Bug (issue 13, item 2): with names/study/s1/trial/N a link to a folder
// outside the root, soma-trial --no-wait wrote its record into that
// folder. End to end, with the binaries: soma-trial runs the study and
// writes nothing outside the root, whether the link is a trial's folder
// or an attempt's record; and soma gc, while such a link exists, removes
// no blob (an old unreferenced one stays).
func TestLinkedRecordsEndToEnd(t *testing.T) {
	bin := buildSomaTrial(t)
	for _, tc := range []struct{ name, link string }{
		{"trial folder", "study/s1/trial/2"},
		{"attempt record", "study/s1/trial/2/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root := filepath.Join(t.TempDir(), "root")
			trial := func(args ...string) (string, error) {
				c := exec.Command(bin, append([]string{"--root", root, "--study", "s1", "--param", "x=float:0:1",
					"--budget", "4", "--sampler", "random", "--no-wait"}, args...)...)
				c.Args = append(c.Args, "--", "/bin/echo", "1")
				out, err := c.CombinedOutput()
				return string(out), err
			}
			if out, err := trial("--max-trials", "1"); err != nil {
				t.Fatalf("first trial: %v\n%s", err, out)
			}
			// The outside: an empty folder, and a file that reads as a
			// finished record of soma's (what a follower would take).
			outside := t.TempDir()
			s, err := fsstore.Open(root, fsstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(root, "names", filepath.FromSlash(tc.link))
			target := outside
			if strings.HasSuffix(tc.link, "/0") {
				if err := os.MkdirAll(filepath.Dir(link), 0o777); err != nil {
					t.Fatal(err)
				}
				rec, _ := os.ReadFile(filepath.Join(root, "names", "study", "s1", "trial", "0", "0"))
				target = filepath.Join(outside, "0")
				if err := os.WriteFile(target, rec, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			orphan, err := s.Put(ctx, []byte("nobody refers to me"))
			if err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-2 * time.Hour)
			orphanPath := filepath.Join(root, "blobs", "sha256", orphan.Hex()[:2], orphan.Hex()[2:])
			if err := os.Chtimes(orphanPath, old, old); err != nil {
				t.Fatal(err)
			}
			before := snapshotDir(t, outside)

			out, err := trial()
			t.Logf("soma-trial: %v\n%s", err, out)
			if got := snapshotDir(t, outside); got != before {
				t.Fatalf("soma-trial wrote outside the root through %s:\nbefore:\n%s\nafter:\n%s", tc.link, before, got)
			}
			if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the link is gone or replaced: %v %v", st, err)
			}

			code, gcOut, gcErr := soma("gc", root, "--no-pack")
			t.Logf("soma gc: %d\n%s%s", code, gcOut, gcErr)
			if strings.Contains(gcOut, "blobs: removed") {
				t.Errorf("soma gc removed blobs while a linked record exists:\n%s", gcOut)
			}
			if !strings.Contains(gcOut+gcErr, link) {
				t.Errorf("soma gc does not name the link %s:\n%s%s", link, gcOut, gcErr)
			}
			if _, err := os.Stat(orphanPath); err != nil {
				t.Errorf("the old unreferenced blob is gone: %v", err)
			}
			if got := snapshotDir(t, outside); got != before {
				t.Fatalf("soma gc changed the outside:\nbefore:\n%s\nafter:\n%s", before, got)
			}
		})
	}
}

// snapshotDir describes every file under dir, with content and mtime.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			b.WriteString(p + ": " + err.Error() + "\n")
			return nil
		}
		info, _ := e.Info()
		b.WriteString(p + " " + info.Mode().String() + " " + info.ModTime().String())
		if info.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}
