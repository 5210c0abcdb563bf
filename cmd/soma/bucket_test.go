package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// TestStatusOnBucket: soma status reads a study kept in a bucket as it
// reads a folder, soma extend changes it, and soma report, gc, logs and
// rm work on it as on a folder (issue 17: gc, rm and logs refused a
// bucket); soma workers and soma slurm, whose records are files, refuse
// it, naming it.
func TestStatusOnBucket(t *testing.T) {
	srv := testutil.NeedS3(t)
	srv.Setenv(t)
	ctx := context.Background()
	root := srv.FreshRoot(t, "status")
	s, err := rootstore.Open(ctx, root, rootstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.ParseSpec([]byte("direction = \"minimize\"\nbudget = 3\nsampler = \"random\"\n[param]\nx = \"float:0:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, "lr", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, err := st.Next(ctx, study.Me(""))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Finish(ctx, study.StateDone, float64(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := soma("status", root)
	if code != exitOK || !strings.Contains(out, "3 of 3 ended") || !strings.Contains(out, "3 done") {
		t.Errorf("soma status %s: exit %d\n%s%s\nwant 3 of 3 ended, 3 done", root, code, out, errs)
	}
	code, out, errs = soma("status", root, "--study", "lr", "--json")
	if code != exitOK || !strings.Contains(out, root) {
		t.Errorf("soma status --json: exit %d\n%s%s\nwant the root named", code, out, errs)
	}
	code, out, errs = soma("extend", root, "--study", "lr", "--budget", "5")
	if code != exitOK {
		t.Errorf("soma extend %s: exit %d\n%s%s", root, code, out, errs)
	}
	if st, err := study.Open(ctx, s, "lr", nil, study.Options{}); err != nil || st.Budget() != 5 {
		t.Errorf("after soma extend --budget 5: %v; want budget 5", err)
	}
	// A report, as of a folder.
	html := filepath.Join(t.TempDir(), "r.html")
	code, out, errs = soma("report", root, "--study", "lr", "-o", html)
	if b, err := os.ReadFile(html); code != exitOK || err != nil || !strings.Contains(string(b), "lr") {
		t.Errorf("soma report %s --study lr -o r.html: exit %d, %v\n%s%s", root, code, err, out, errs)
	}

	// logs: soma-trial kept the objective's output in its --local
	// folder; soma logs reads it from there.
	local := filepath.Join(t.TempDir(), "local")
	bin := buildSomaTrial(t)
	c := exec.Command(bin, "--root", root, "--local", local, "--study", "echo", "--param", "x=int:5:5", "--sampler", "random",
		"--budget", "1", "--no-wait", "--", "/bin/sh", "-c", "echo hello {x}; echo 0.5")
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("soma-trial on %s: %v\n%s", root, err, b)
	}
	code, out, errs = soma("logs", root, "--study", "echo", "0", "--local", local)
	if code != exitOK || out != "hello 5\n0.5\n" {
		t.Errorf("soma logs %s --local: exit %d, %q%s; want the objective's output", root, code, out, errs)
	}
	code, _, errs = soma("logs", root, "--study", "echo", "0", "--local", t.TempDir())
	if code == exitOK || !strings.Contains(errs, root) || !strings.Contains(errs, "--local") {
		t.Errorf("soma logs with a --local that has no logs: exit %d, %s; want an error naming the bucket and --local", code, errs)
	}
	folder := t.TempDir()
	if code, _, errs = soma("logs", folder, "--study", "echo", "0", "--local", local); code != exitUsage || !strings.Contains(errs, "only for a bucket") {
		t.Errorf("soma logs FOLDER --local: exit %d, %s; want a usage error", code, errs)
	}

	// gc: the same steps and lines as on a folder. Nothing is old
	// enough to go: an hour's grace.
	code, out, errs = soma("gc", root, "--dry-run")
	if code != exitOK || !strings.Contains(out, "temp files: would remove 0 (0 B)") || !strings.Contains(out, "blobs: would remove 0 (0 B); kept") {
		t.Errorf("soma gc %s --dry-run: exit %d\n%s%s", root, code, out, errs)
	}
	code, out, errs = soma("gc", root)
	if code != exitOK || !strings.Contains(out, "temp files: removed 0 (0 B)") || !strings.Contains(out, "blobs: removed 0 (0 B); kept") {
		t.Errorf("soma gc %s: exit %d\n%s%s", root, code, out, errs)
	}
	if code, out, errs = soma("status", root, "--study", "lr"); code != exitOK || !strings.Contains(out, "3 done") {
		t.Errorf("soma status after gc: exit %d\n%s%s", code, out, errs)
	}

	// rm: the records in the bucket, the logs in --local.
	code, out, errs = soma("rm", root, "--study", "echo", "--local", local, "--dry-run")
	if code != exitOK || !strings.Contains(out, root+"/names/study/echo") || !strings.Contains(out, filepath.Join(local, "logs", "echo")) {
		t.Errorf("soma rm %s --dry-run: exit %d\n%s%s; want the records and the local logs named", root, code, out, errs)
	}
	code, out, errs = soma("rm", root, "--study", "echo", "--local", local)
	if code != exitOK || !strings.Contains(out, "removed study echo") {
		t.Errorf("soma rm %s: exit %d\n%s%s", root, code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(local, "logs", "echo")); !os.IsNotExist(err) {
		t.Errorf("the study's local logs after soma rm: %v, want them gone", err)
	}
	if code, out, _ = soma("status", root); strings.Contains(out, "echo") || !strings.Contains(out, "lr") {
		t.Errorf("soma status after rm: exit %d\n%s", code, out)
	}

	// The commands whose records are files refuse the bucket, naming it.
	for _, args := range [][]string{
		{"workers", root},
		{"slurm", "jobs", root, "--study", "lr"},
	} {
		code, _, errs = soma(args...)
		if code == exitOK || !strings.Contains(errs, root) || !strings.Contains(errs, "bucket") {
			t.Errorf("soma %s: exit %d, %s; want a refusal naming the bucket", strings.Join(args, " "), code, errs)
		}
	}
}
