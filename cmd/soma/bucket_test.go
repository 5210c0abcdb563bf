package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// TestStatusOnBucket: soma status reads a study kept in a bucket as it
// reads a folder, and soma extend changes it; soma gc refuses the
// bucket, as do rm, logs and workers, naming it.
func TestStatusOnBucket(t *testing.T) {
	srv := testutil.NeedS3(t)
	srv.Setenv(t)
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := "s3://" + srv.Bucket + "/status-" + hex.EncodeToString(b[:])
	srv.RemoveAtEnd(t, root)
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
	// The commands that work on files refuse the bucket, naming it.
	for _, args := range [][]string{
		{"gc", root},
		{"rm", root, "--study", "lr"},
		{"logs", root, "--study", "lr", "0"},
		{"workers", root},
	} {
		code, _, errs = soma(args...)
		if code == exitOK || !strings.Contains(errs, root) || !strings.Contains(errs, "bucket") {
			t.Errorf("soma %s: exit %d, %s; want a refusal naming the bucket", strings.Join(args, " "), code, errs)
		}
	}
}
