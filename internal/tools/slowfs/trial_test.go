package slowfs_test

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/internal/tools/slowfs"
)

// The file-server operations soma sends, pinned (issue 18): on NFS each
// one is a round trip, so a change that adds some makes every trial
// slower on a cluster, and on a local disk nobody would notice. A count is
// deterministic where a time is not. When a change cuts or adds
// operations on purpose, run
//
//	go test -run TestOpsPinned -v ./internal/tools/slowfs/
//
// and copy the measured table from its log into these.
var (
	// trialOps is what one more trial costs at P=1, by kind: soma-trial
	// over a fresh study of trialsMore trials, minus one of trialsFew,
	// divided by the difference (so the once-per-run costs, opening the
	// store and the study, cancel out). 28 in all: the claim and the
	// result 21 (each a temp file created and fsynced, then linked or
	// renamed into the trial's folder, which is fsynced; the claim makes
	// that folder, the result stats its temp file for the server's
	// time), the look for a later attempt after the result 1 (a LOOKUP
	// relative to the folder the result was just renamed into), the work
	// folder made and removed 4, the objective's logs 2 (the objective's
	// own fstat of its stdout, glibc's before its first write, and the
	// GETATTR that comes with soma-trial's read of stdout's tail, for
	// the score). Before the files' ends were learned from the offset of
	// the descriptor the objective wrote through (objective.readTail):
	// 30, with a stat of each file more. Before the look
	// believed a name missing from the folder a Bind had just written in
	// (fsstore's openName): 31, with a GETATTR of that folder more, to
	// tell a missing name from a removed folder. Before the empty curve's
	// blob was reused (study.BlobReuse): 35, with a LOOKUP, a GETATTR, a
	// SETATTR and its LOOKUP more.
	trialOps = map[string]float64{
		"LOOKUP": 12, "GETATTR": 3, "CREATE": 2, "FSYNC": 2, "FSYNCDIR": 2,
		"MKDIR": 2, "OPENDIR": 1, "LINK": 1, "RENAME": 1, "RMDIR": 1,
		"UNLINK": 1,
	}
	// statusOps is what soma status costs over the study of trialsMore
	// trials, and statusOpsPerTrial what each trial more adds to it.
	statusOps         = 604.0
	statusOpsPerTrial = 13.0
	// joinOps is what each trial more costs a soma-trial that joins a
	// study whose budget others have run (at the end of a budget shared
	// by P processes, each learns of the others' trials so): one read of
	// its latest record: the lookups of its folder and of the record, an
	// open, the fstat's GETATTR (size and mtime, from the server) and
	// the one the read brings (no client cache to read from). Taking the
	// mtime from the attributes the read left saved the fstat's, and read
	// truncated records on this harness (fsstore's rawfile.go). Before
	// issue 18's cuts it was 11.4 (measured on
	// a study of 200): Next stat'ed each sealed record, then looked for a
	// later attempt and read it, and each read ended with a read(2) that
	// only found the record's end (a GETATTR).
	joinOps = map[string]float64{"LOOKUP": 2, "GETATTR": 2, "OPEN": 1}
)

const trialsFew, trialsMore = 10, 40

// margin is how far a count may drift from its pin: a twentieth, and at least
// half an operation per trial (a count per trial is an average).
func margin(want float64) float64 { return math.Max(0.5, want/20) }

var buildOnce sync.Once
var binDir string
var buildErr error

// binaries builds soma-trial and soma once per test binary.
func binaries(t *testing.T) (trial, soma string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "slowfs-bin")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/", "../../../cmd/soma-trial", "../../../cmd/soma").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "soma-trial"), filepath.Join(binDir, "soma")
}

func TestMain(m *testing.M) {
	testutil.RunChild(map[string]func() int{
		"init":  func() int { return helper("init") },
		"bind":  func() int { return helper("bind") },
		"read":  func() int { return helper("read") },
		"times": func() int { return helper("times") },
	})
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runTrials runs one soma-trial process (P=1) of n trials of /bin/echo over
// a fresh study at root, and returns the operations it sent.
func runTrials(t *testing.T, m *slowfs.Mount, bin, root string, n int) slowfs.Counts {
	t.Helper()
	m.Reset()
	cmd := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1",
		"--sampler", "random", "--budget", fmt.Sprint(n), "--no-wait", "--", "/bin/echo", "1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("soma-trial: %v\n%s", err, out)
	}
	return m.Reset()
}

func runStatus(t *testing.T, m *slowfs.Mount, bin, root string) slowfs.Counts {
	t.Helper()
	m.Reset()
	if out, err := exec.Command(bin, "status", root).CombinedOutput(); err != nil {
		t.Fatalf("soma status: %v\n%s", err, out)
	}
	return m.Reset()
}

// perTrial returns (more-few)/(trialsMore-trialsFew) for the metadata
// kinds.
func perTrial(more, few slowfs.Counts) map[string]float64 {
	d := map[string]float64{}
	for op, n := range more.Sub(few) {
		if slowfs.Metadata(op) {
			d[op] = float64(n) / (trialsMore - trialsFew)
		}
	}
	return d
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

func table(m map[string]float64) string {
	var b strings.Builder
	ks := make(slowfs.Counts, len(m))
	for op := range m {
		ks[op] = 0
	}
	for _, op := range ks.Kinds() {
		fmt.Fprintf(&b, "%q: %.4g, ", op, m[op])
	}
	return b.String()
}

// TestOpsPinned runs soma-trial and soma status on the slow filesystem
// (without delay: the counts do not depend on it at P=1) and checks the
// operations they send, by kind, against the pins above.
func TestOpsPinned(t *testing.T) {
	m, _ := mount(t)
	trial, soma := binaries(t)
	few := runTrials(t, m, trial, filepath.Join(m.Dir(), "few"), trialsFew)
	more := runTrials(t, m, trial, filepath.Join(m.Dir(), "more"), trialsMore)
	got := perTrial(more, few)
	t.Logf("soma-trial at P=1, metadata operations per trial: %.4g; by kind: %s", sum(got), table(got))

	stFew := runStatus(t, m, soma, filepath.Join(m.Dir(), "few"))
	stMore := runStatus(t, m, soma, filepath.Join(m.Dir(), "more"))
	gotStatus := float64(stMore.Metadata())
	gotStatusPer := float64(stMore.Metadata()-stFew.Metadata()) / (trialsMore - trialsFew)
	t.Logf("soma status of %d trials: %v metadata operations (%v), %.4g per trial more", trialsMore, gotStatus, stMore, gotStatusPer)

	// A soma-trial joining each finished study: it reads the trials and
	// says the budget is reached.
	joinFew := runTrials(t, m, trial, filepath.Join(m.Dir(), "few"), trialsFew)
	joinMore := runTrials(t, m, trial, filepath.Join(m.Dir(), "more"), trialsMore)
	gotJoin := perTrial(joinMore, joinFew)
	t.Logf("soma-trial joining a finished study, metadata operations per trial: %.4g; by kind: %s", sum(gotJoin), table(gotJoin))

	pinned(t, "soma-trial at P=1", got, trialOps)
	pinned(t, "soma-trial joining a finished study", gotJoin, joinOps)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{fmt.Sprintf("soma status of %d trials", trialsMore), gotStatus, statusOps},
		{"soma status, per trial more", gotStatusPer, statusOpsPerTrial},
	} {
		if d := c.got - c.want; math.Abs(d) > margin(c.want) {
			t.Errorf("%s: %.4g metadata operations, want %.4g (±%.2g); if on purpose, update the pins (see trialOps)", c.what, c.got, c.want, margin(c.want))
		}
	}
}

// pinned checks the operations per trial got, by kind, against want.
func pinned(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	kinds := map[string]bool{}
	for op := range got {
		kinds[op] = true
	}
	for op := range want {
		kinds[op] = true
	}
	for op := range kinds {
		if d := got[op] - want[op]; math.Abs(d) > margin(want[op]) {
			t.Errorf("%s: %s per trial = %.4g, want %.4g (±%.2g): a change %s file-server round trips; if on purpose, update the pins (see trialOps)",
				what, op, got[op], want[op], margin(want[op]), map[bool]string{true: "added", false: "removed"}[d > 0])
		}
	}
}
