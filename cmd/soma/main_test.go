package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/report"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/studytest"
)

// shared is the fixture of this test binary: real soma-trial runs,
// built once (studytest.Shared).
var shared studytest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// fix returns the shared fixture.
func fix(t *testing.T) *studytest.Fixture { return shared.Get(t) }

// soma runs the command in process and returns its exit status and
// outputs.
func soma(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"soma"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpTeaches(t *testing.T) {
	code, out, _ := soma("--help")
	if code != exitOK || !strings.Contains(out, "EXIT STATUS") {
		t.Errorf("soma --help: %d\n%s", code, out)
	}
	for _, cmd := range []string{"status", "trials", "best", "logs", "report", "init", "gc"} {
		t.Run(cmd, func(t *testing.T) {
			code, out, errOut := soma(cmd, "--help")
			if code != exitOK {
				t.Fatalf("soma %s --help: exit %d\n%s", cmd, code, errOut)
			}
			for _, want := range []string{"EXAMPLES:", "soma " + cmd, "USAGE:"} {
				if !strings.Contains(out, want) {
					t.Errorf("soma %s --help lacks %q:\n%s", cmd, want, out)
				}
			}
		})
	}
	if code, out, _ := soma("help", "gc"); code != exitOK || !strings.Contains(out, "soma gc ROOT --dry-run") {
		t.Errorf("soma help gc: %d\n%s", code, out)
	}
	if code, _, errOut := soma(); code != exitUsage || !strings.Contains(errOut, "no command") {
		t.Errorf("soma alone: %d %q, want usage", code, errOut)
	}
	_, out, _ = soma("status", "--help")
	for _, line := range strings.Split(status.JSONShape, "\n") {
		if !strings.Contains(out, line) {
			t.Errorf("soma status --help lacks the JSON shape line %q", line)
			break
		}
	}
}

func TestUsageErrors(t *testing.T) {
	root := fix(t).Root
	spec := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(spec, []byte("direction = \"sideways\"\n"), 0o666)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"frobnicate", root}, "unknown command"},
		{"no root", []string{"status"}, "no ROOT"},
		{"unknown flag", []string{"status", root, "--colour"}, "colour"},
		{"two roots", []string{"status", root, root}, "too many arguments"},
		{"negative top", []string{"status", root, "--top", "-1"}, "--top -1"},
		{"poll without watch", []string{"status", root, "--poll"}, "go with --watch"},
		{"trials without study", []string{"trials", root}, "--study is required"},
		{"bad format", []string{"trials", root, "--study", "quad", "--format", "xml"}, `--format "xml"`},
		{"best bad format", []string{"best", root, "--study", "quad", "--format", "yaml"}, `--format "yaml"`},
		{"logs without trial", []string{"logs", root, "--study", "quad"}, "no trial number"},
		{"logs bad trial", []string{"logs", root, "--study", "quad", "seven"}, `trial "seven"`},
		{"report without -o", []string{"report", root, "--study", "quad"}, "-o is required"},
		{"init without spec", []string{"init", root, "--study", "x"}, "--spec is required"},
		{"init bad spec", []string{"init", root, "--study", "x", "--spec", spec}, "sideways"},
		{"init bad name", []string{"init", root, "--study", "../x", "--spec", spec}, "study name"},
		{"gc bad age", []string{"gc", root, "--older-than", "0s"}, "--older-than"},
		{"gc age below the least safe", []string{"gc", root, "--older-than", "30s"}, "1m0s or more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := soma(tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage)\nstdout: %s\nstderr: %s", code, exitUsage, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line with %q", errOut, tc.want)
			}
		})
	}
}

func TestErrorsAreOneLine(t *testing.T) {
	f := fix(t)
	dir := t.TempDir()
	notStore := filepath.Join(dir, "data")
	os.Mkdir(notStore, 0o777)
	os.WriteFile(filepath.Join(notStore, "x.csv"), []byte("1,2\n"), 0o666)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing root", []string{"status", filepath.Join(dir, "nope")}, "no such folder"},
		{"not a store", []string{"status", notStore}, "not a soma store"},
		{"root is a file", []string{"trials", filepath.Join(notStore, "x.csv"), "--study", "quad"}, "is a file"},
		{"unknown study", []string{"status", f.Root, "--study", "nosuch"}, `no study "nosuch"`},
		{"unknown study, best", []string{"best", f.Root, "--study", "nosuch"}, "it holds: other, quad"},
		{"corrupt record", []string{"logs", f.Root, "--study", "quad", "19"}, "corrupt"},
		{"no such trial", []string{"logs", f.Root, "--study", "quad", "999"}, "has no trial 999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := soma(tc.args...)
			if code != exitError {
				t.Errorf("exit %d, want %d", code, exitError)
			}
			if !strings.HasPrefix(errOut, "soma: ") || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line starting soma: with %q", errOut, tc.want)
			}
		})
	}
}

// TestCommandsOverRealStudy runs every read command over the fixture,
// whose root holds corrupt and foreign files: none may break.
func TestCommandsOverRealStudy(t *testing.T) {
	f := fix(t)
	root := f.Root
	ok := func(args ...string) (string, string) {
		t.Helper()
		code, out, errOut := soma(args...)
		if code != exitOK {
			t.Fatalf("soma %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		return out, errOut
	}

	out, _ := ok("status", root)
	if !strings.Contains(out, "2 studies in") || !strings.Contains(out, "problem  study broken cannot be read: fsstore: corrupt study/broken/spec") {
		t.Errorf("status of a root with 2 studies:\n%s", out)
	}
	out, _ = ok("status", root, "--study", "quad", "--top", "3")
	for _, want := range []string{"1 corrupt", "best 3 of", "running 1, stale 1", "machines 3 seen"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --study quad lacks %q:\n%s", want, out)
		}
	}
	// Flags after ROOT, before ROOT, and -s short: the same view.
	before, _ := ok("status", "--study", "quad", "--top", "3", root)
	if strings.Join(strings.Fields(before), " ")[:200] != strings.Join(strings.Fields(out), " ")[:200] {
		t.Errorf("flags before ROOT give another view:\n%s\nvs\n%s", before, out)
	}
	for _, args := range [][]string{{"status", root, "--json"}, {"status", root, "--study", "quad", "--json", "--all"}} {
		out, _ = ok(args...)
		for _, e := range studytest.CheckShape(status.JSONShape, []byte(out)) {
			t.Errorf("%v: %s", args, e)
		}
	}

	out, errOut := ok("trials", root, "--study", "quad")
	if lines := strings.Count(out, "\n"); lines != studytest.Ran+3+1 {
		t.Errorf("trials csv: %d lines, want %d", lines, studytest.Ran+3+1)
	}
	if !strings.Contains(errOut, "1 unreadable records left out") {
		t.Errorf("trials: stderr %q, want the corrupt record counted", errOut)
	}
	out, _ = ok("trials", root, "--study", "quad", "--format", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != studytest.Ran+3 {
		t.Errorf("trials json: %d rows, %v", len(rows), err)
	}

	out, _ = ok("best", root, "--study", "quad", "--format", "json")
	for _, e := range studytest.CheckShape(status.BestShape, []byte(out)) {
		t.Errorf("best json: %s", e)
	}
	out, _ = ok("best", root, "--study", "quad", "--format", "args")
	if !strings.HasPrefix(out, "--x ") || !strings.Contains(out, " --noise ") {
		t.Errorf("best args: %q", out)
	}

	out, _ = ok("logs", root, "--study", "quad", "0", "--stderr")
	// Trial 0's stderr, read by hand from its worker's files (where the
	// index says it is; the quadratic example writes none).
	loc, found, err := runlog.Find(root, "quad", 0, 0)
	if err != nil || !found {
		t.Fatalf("runlog.Find(0) = %v, %v", found, err)
	}
	var kept []byte
	if b, err := os.ReadFile(loc.Err); err == nil {
		kept = b[loc.ErrStart:loc.ErrEnd]
	}
	if out != string(kept) {
		t.Errorf("logs 0 --stderr = %q, want the kept stderr %q", out, kept)
	}

	html := filepath.Join(t.TempDir(), "r.html")
	_, errOut = ok("report", root, "--study", "quad", "-o", html)
	b, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(b, []byte(`id="`+report.CheckID+`"`)) || !strings.Contains(errOut, "plots: history, curves, params, parallel") {
		t.Errorf("report: %v, %d bytes, %q", err, len(b), errOut)
	}

	// Every command above closed its store: none left its temp folder
	// (a clock file for the server's time) in tmp/. Bug: each one did,
	// until soma gc's grace passed, and status --watch watched them all.
	es, err := os.ReadDir(filepath.Join(root, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasPrefix(e.Name(), status.OwnTempPrefix()) {
			t.Errorf("tmp/%s left by a command of this process", e.Name())
		}
	}
}

func TestWatchEndsOnCancel(t *testing.T) {
	f := fix(t)
	// run() owns its signal context; drive the app directly with one
	// that ends, as Ctrl-C would.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	app := newApp(&out, &errb)
	err := app.RunContext(ctx, reorder(app, []string{"soma", "status", f.Root, "--study", "quad", "--watch", "--poll", "--interval", "200ms", "--json"}))
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, errb.String())
	}
	docs := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(docs) < 2 {
		t.Errorf("%d JSON documents in 1.5 s of polling every 200ms, want several", len(docs))
	}
	for _, d := range docs {
		for _, e := range studytest.CheckShape(status.JSONShape, []byte(d)) {
			t.Errorf("watch document: %s", e)
		}
	}
	if !strings.Contains(errb.String(), "polling every 200ms (--poll)") {
		t.Errorf("stderr %q: want the method named", errb.String())
	}
}

func TestInit(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "new")
	spec := filepath.Join(studytest.RepoRoot(), "examples", "quadratic", "spec.toml")
	code, out, errOut := soma("init", root, "--study", "quad", "--spec", spec)
	if code != exitOK || !strings.Contains(out, "study quad created 3 params, 24 trials") {
		t.Fatalf("init: %d %q %q", code, out, errOut)
	}
	code, out, _ = soma("init", root, "--study", "quad", "--spec", spec)
	if code != exitOK || !strings.Contains(out, "exists, same spec") {
		t.Errorf("init again: %d %q", code, out)
	}
	other := filepath.Join(dir, "other.toml")
	b, _ := os.ReadFile(spec)
	os.WriteFile(other, bytes.Replace(b, []byte("budget = 24"), []byte("budget = 48"), 1), 0o666)
	code, _, errOut = soma("init", root, "--study", "quad", "--spec", other)
	if code != exitError || !strings.Contains(errOut, "budget: 24 → 48") {
		t.Errorf("init with another spec: %d %q", code, errOut)
	}
	code, out, _ = soma("status", root, "--study", "quad")
	if code != exitOK || !strings.Contains(out, "0 of 24 ended") || !strings.Contains(out, "no trial done yet") {
		t.Errorf("status of a new study: %d\n%s", code, out)
	}
	// A damaged root takes a new study all the same.
	damaged := fix(t).Copy(t, filepath.Join(dir, "damaged"))
	code, out, errOut = soma("init", damaged, "--study", "fresh", "--spec", spec)
	if code != exitOK || !strings.Contains(out, "study fresh created") {
		t.Errorf("init in a damaged root: %d %q %q", code, out, errOut)
	}
	// A folder that holds something else is refused, not taken over.
	foreign := filepath.Join(dir, "foreign")
	os.Mkdir(foreign, 0o777)
	os.WriteFile(filepath.Join(foreign, "thesis.tex"), []byte("x"), 0o666)
	code, _, errOut = soma("init", foreign, "--study", "quad", "--spec", spec)
	if code != exitError || !strings.Contains(errOut, "not a soma store") {
		t.Errorf("init in a foreign folder: %d %q", code, errOut)
	}
}

func TestGC(t *testing.T) {
	ctx := context.Background()
	f := fix(t)
	root := f.Copy(t, filepath.Join(t.TempDir(), "root"))
	s, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	blob := func(text string) (fsstore.Digest, string) {
		d, err := s.Put(ctx, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, "blobs", "sha256", d.Hex()[:2], d.Hex()[2:])
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return d, p
	}
	_, garbage := blob("nobody refers to me")
	kept, keptPath := blob("a record's meta names me")
	_, inPack := blob("a pack-like blob names me")
	if _, err := s.Bind(ctx, "elsewhere/note", fsstore.Sum(nil), fsstore.Meta{{Key: "ref", Value: kept.String()}}); err != nil {
		t.Fatal(err)
	}
	holder, _ := blob("list of blobs: " + fsstore.Sum([]byte("a pack-like blob names me")).Hex() + "\n")
	if _, err := s.Bind(ctx, "elsewhere/manifest", holder, fsstore.Meta{{Key: "kind", Value: "manifest"}}); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	tmpFile := filepath.Join(root, "tmp", "deadhost.1.1-abcdef")

	// With a corrupt record (or a stray file among the names, which
	// reads as one) in the store, no blob goes, and gc says which.
	code, out, errOut := soma("gc", root)
	if code != exitOK || !strings.Contains(errOut, "no blob removed while 5 records are unreadable") ||
		!strings.Contains(errOut, filepath.Join("trial", "19", "0")) || !strings.Contains(out, "temp files: removed 1") {
		t.Errorf("gc with a corrupt record: %d\n%s%s", code, out, errOut)
	}
	if !exists(garbage) || exists(tmpFile) {
		t.Errorf("after gc with a corrupt record: garbage blob there=%v (want true), old temp there=%v (want false)", exists(garbage), exists(tmpFile))
	}
	names := filepath.Join(root, "names", "study")
	for _, p := range []string{"quad/trial/19/0", "quad/trial/notes.txt", "quad/trial/3/backup.old", "junk", "broken/spec"} {
		if err := os.Remove(filepath.Join(names, filepath.FromSlash(p))); err != nil {
			t.Fatal(err)
		}
	}

	code, out, _ = soma("gc", root, "--dry-run")
	if code != exitOK || !strings.Contains(out, "blobs: would remove 1") || !exists(garbage) {
		t.Errorf("gc --dry-run: %d\n%s", code, out)
	}
	code, out, errOut = soma("gc", root)
	if code != exitOK || !strings.Contains(out, "blobs: removed 1") {
		t.Errorf("gc: %d\n%s%s", code, out, errOut)
	}
	if exists(garbage) || !exists(keptPath) || !exists(inPack) {
		t.Errorf("after gc: garbage there=%v, referenced-from-meta there=%v, referenced-from-blob there=%v; want false true true",
			exists(garbage), exists(keptPath), exists(inPack))
	}
	// Every study still reads the same.
	code, out, _ = soma("status", root, "--study", "quad")
	if code != exitOK || !strings.Contains(out, "1 running · 1 stale") {
		t.Errorf("status after gc: %d\n%s", code, out)
	}
	code, _, _ = soma("report", root, "--study", "quad", "-o", filepath.Join(t.TempDir(), "r.html"))
	if code != exitOK {
		t.Errorf("report after gc: exit %d", code)
	}
}

func TestReorder(t *testing.T) {
	app := newApp(nil, nil)
	tests := []struct {
		in, want string
	}{
		{"soma status ROOT --study s --json", "soma status --study s --json -- ROOT"},
		{"soma logs ROOT --study s 7 --attempt 1 -f", "soma logs --study s --attempt 1 -f -- ROOT 7"},
		{"soma status --study=s ROOT", "soma status --study=s -- ROOT"},
		{"soma best ROOT -s s -f args", "soma best -s s -f args -- ROOT"},
		{"soma logs ROOT --study s -- -3", "soma logs --study s -- ROOT -3"},
		{"soma nosuch a --b", "soma nosuch a --b"},
	}
	for _, tc := range tests {
		got := strings.Join(reorder(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("reorder(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSlurmSubmitDryRunAndJobs(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	spec := filepath.Join(studytest.RepoRoot(), "examples", "quadratic", "spec.toml")
	fakeTrial := filepath.Join(dir, "soma-trial")
	os.WriteFile(fakeTrial, []byte("#!/bin/sh\n"), 0o755)

	code, _, errOut := soma("slurm", "submit", root, "--study", "q", "--spec", spec, "--array", "0-3", "--soma-trial", fakeTrial, "--dry-run", "--", "python3", "obj.py")
	if code != exitError || !strings.Contains(errOut, "soma init") {
		t.Errorf("dry run on a missing root: %d %q, want a pointer to soma init", code, errOut)
	}
	if code, _, errOut := soma("init", root, "--study", "q", "--spec", spec); code != exitOK {
		t.Fatal(errOut)
	}
	code, out, errOut := soma("slurm", "submit", root, "--study", "q", "--array", "0-63%8", "--time", "1h", "--grace", "5m",
		"--sbatch-opt", "--partition=gpu", "--soma-trial", fakeTrial, "--dry-run", "--", "python3", "train.py", "--lr", "{x}")
	if code != exitOK {
		t.Fatalf("dry run: %d %q", code, errOut)
	}
	for _, want := range []string{"#SBATCH --array=0-63%8", "#SBATCH --signal=B:USR1@300", "#SBATCH --partition=gpu", "exec " + fakeTrial + " --root " + root + " --study q --requeue-on-usr1 -- python3 train.py --lr '{x}'"} {
		if !strings.Contains(out, want) {
			t.Errorf("script lacks %q:\n%s", want, out)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(root, "slurm", "q", "*.sh")); len(m) != 0 {
		t.Errorf("dry run wrote %v", m)
	}
	code, out, _ = soma("slurm", "jobs", root, "--study", "q", "--offline")
	if code != exitOK || !strings.Contains(out, "no Slurm jobs recorded") {
		t.Errorf("jobs: %d %q", code, out)
	}
	code, _, errOut = soma("slurm", "submit", root, "--study", "q", "--array", "0-3")
	if code != exitUsage || !strings.Contains(errOut, "no objective command") {
		t.Errorf("submit without a command: %d %q", code, errOut)
	}
}

func TestZarrInfoAndCat(t *testing.T) {
	arr := filepath.Join(studytest.RepoRoot(), "zarr", "testdata", "zarr-v2", "int32_zstd.zarr")
	code, out, errOut := soma("zarr", "info", arr)
	if code != exitOK || !strings.Contains(out, "shape:             [14 5]") || !strings.Contains(out, "zstd") {
		t.Errorf("zarr info: %d %q %q", code, out, errOut)
	}
	cache := t.TempDir()
	for range 2 { // the second read is served by the cache; same text
		code, out, errOut = soma("zarr", "cat", arr, "--rows", "2:4", "--cache", cache)
		if code != exitOK || out != "-50\t-49\t-48\t-47\t-46\n50\t51\t52\t53\t54\n" {
			t.Errorf("zarr cat: %d %q %q", code, out, errOut)
		}
	}
	code, _, errOut = soma("zarr", "cat", arr, "--rows", "9:99", "--no-cache")
	if code != exitUsage || !strings.Contains(errOut, "rows") {
		t.Errorf("zarr cat out of range: %d %q", code, errOut)
	}
	code, _, errOut = soma("zarr", "info", filepath.Join(t.TempDir(), "nope.zarr"))
	if code != exitError || strings.Count(errOut, "\n") != 1 {
		t.Errorf("zarr info of a missing array: %d %q, want one line", code, errOut)
	}
}

// TestZarrCatCacheSize: --cache-size and $SOMA_ZARR_CACHE_SIZE bound the
// chunk cache (an entry of this array is 96 bytes: 48 of header, 48 of
// chunk), and --help says so. Before, the CLI had no way to set it.
func TestZarrCatCacheSize(t *testing.T) {
	arr := filepath.Join(studytest.RepoRoot(), "zarr", "testdata", "zarr-v2", "int32_zstd.zarr")
	entries := func(cache string) int {
		files, _ := filepath.Glob(filepath.Join(cache, "v1", "entries", "*", "*"))
		return len(files)
	}
	tests := []struct {
		name        string
		args        []string
		env         string
		wantEntries bool
	}{
		{"flag below one entry", []string{"--cache-size", "64"}, "", false},
		{"flag", []string{"--cache-size", "1K"}, "", true},
		{"env below one entry", nil, "95", false},
		{"env", nil, "1MiB", true},
		{"flag wins over env", []string{"--cache-size", "64"}, "1M", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOMA_ZARR_CACHE_SIZE", tc.env)
			cache := t.TempDir()
			code, out, errOut := soma(append([]string{"zarr", "cat", arr, "--rows", "2:4", "--cache", cache}, tc.args...)...)
			if code != exitOK || out != "-50\t-49\t-48\t-47\t-46\n50\t51\t52\t53\t54\n" {
				t.Fatalf("zarr cat: %d %q %q", code, out, errOut)
			}
			if got := entries(cache) > 0; got != tc.wantEntries {
				t.Errorf("cache holds entries = %v, want %v", got, tc.wantEntries)
			}
		})
	}
	code, _, errOut := soma("zarr", "cat", arr, "--cache", t.TempDir(), "--cache-size", "4X")
	if code != exitUsage || !strings.Contains(errOut, `cache size "4X"`) {
		t.Errorf("--cache-size 4X: %d %q, want a usage error naming it", code, errOut)
	}
	_, out, _ := soma("zarr", "cat", "--help")
	if !strings.Contains(out, "--cache-size SIZE") || !strings.Contains(out, "$SOMA_ZARR_CACHE_SIZE") {
		t.Errorf("zarr cat --help does not document --cache-size and $SOMA_ZARR_CACHE_SIZE:\n%s", out)
	}
}

// TestZarrInfoNamesUndecodableFrames: info decodes one stored chunk, so a
// blosc frame soma cannot decode (here a blosc2 header, version 3) is
// named by `soma zarr info`, exit status 1, after the metadata; before,
// info said nothing and only a read failed (and bitshuffle read wrong).
func TestZarrInfoNamesUndecodableFrames(t *testing.T) {
	src := filepath.Join(studytest.RepoRoot(), "zarr", "testdata", "blosc", "v2_uint8_bitshuffle_arange4000mod4.zarr")
	code, out, errOut := soma("zarr", "info", src)
	if code != exitOK || !strings.Contains(out, "decodes:           yes (chunk 0 read)") || !strings.Contains(out, `"shuffle":"bitshuffle"`) {
		t.Errorf("zarr info: %d %q %q", code, out, errOut)
	}
	arr := filepath.Join(t.TempDir(), "a.zarr")
	if err := os.Mkdir(arr, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".zarray", "0"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "0" {
			b[0] = 3 // blosc2's chunk format
		}
		if err := os.WriteFile(filepath.Join(arr, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = soma("zarr", "info", arr)
	if code != exitError || !strings.Contains(out, "shape:") || !strings.Contains(errOut, "blosc format version 3") {
		t.Errorf("zarr info of an array of blosc2 frames: %d %q %q, want the metadata and an error naming the frame", code, out, errOut)
	}
}
