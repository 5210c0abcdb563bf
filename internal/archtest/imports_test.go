// Package archtest holds the test that keeps imports pointing one way:
// fsstore at the bottom; s3store (the same store in a bucket), study and
// zarr on it; slurm on study; worker on
// zarr; the application (internal/, cmd/) on top; and, inside internal/,
// a fixed list of edges between the application's own packages, with the
// developer tools kept apart from the product.
package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/soma-hpc/soma/"

// allowed lists, per top-level package, the soma packages it may import
// from non-test files.
var allowed = map[string][]string{
	"fsstore":  {},
	"s3store":  {"fsstore"},
	"study":    {"fsstore"},
	"slurm":    {"study", "fsstore"},
	"zarr":     {"fsstore"},
	"worker":   {"zarr", "fsstore"},
	"examples": {"fsstore", "s3store", "study", "slurm", "zarr", "worker"},
	"internal": {"fsstore", "s3store", "study", "slurm", "zarr", "worker", "internal"},
	"cmd":      {"fsstore", "s3store", "study", "slurm", "zarr", "worker", "internal"},
}

// role says what an internal package is for.
type role int

const (
	// product code: what soma's commands run.
	product role = iota + 1
	// tool: a developer tool (benchmarks, test summaries, synthetic
	// data). A tool may import the product; the product never imports a
	// tool, so that what ships does not grow with what measures it.
	tool
	// testSupport: helpers for tests, imported only from _test.go files
	// (and from each other).
	testSupport
)

// roles classifies every package below an internal/ folder. A new one
// fails the test until it is added here: deciding whether it is product,
// tool or test support is the point.
var roles = map[string]role{
	"internal/admin":     product,
	"internal/objective": product,
	"internal/report":    product,
	"internal/rootstore": product,
	"internal/runlog":    product,
	"internal/status":    product,
	"internal/submit":    product,
	"internal/trialrun":  product,

	"internal/tools/benchfloor":        tool,
	"internal/tools/benchtable":        tool,
	"internal/tools/testsum":           tool,
	"internal/tools/synth":             tool,
	"internal/tools/synth/synthstudy":  tool,
	"internal/tools/slowfs":            tool,
	"internal/tools/slowfs/cmd/slowfs": tool,
	"internal/tools/samplerbench":      tool,
	"internal/tools/condbench":         tool,
	"internal/tools/mobench":           tool,
	"internal/tools/benchfn":           tool,

	"internal/testutil":  testSupport,
	"internal/studytest": testSupport,
	"internal/archtest":  testSupport,
}

// internalImports lists, for each product and test-support package, the
// internal product and test-support packages its non-test files may
// import. It was drawn from `go list -deps` when the rule was written, so
// a new edge is a decision made here, in review, and not an accident.
var internalImports = map[string][]string{
	"internal/admin":     {},
	"internal/objective": {},
	"internal/report":    {"internal/status"},
	"internal/rootstore": {},
	"internal/runlog":    {},
	"internal/status":    {"internal/runlog", "internal/rootstore"},
	"internal/submit":    {"internal/objective"},
	"internal/trialrun":  {"internal/objective", "internal/runlog"},

	"internal/testutil":  {},
	"internal/studytest": {"internal/testutil", "internal/objective", "internal/trialrun"},
	"internal/archtest":  {},
}

// internalTestImports lists what a product package's _test.go files may
// import beyond internalImports and the test-support packages.
var internalTestImports = map[string][]string{
	"internal/admin": {"internal/status"},
}

// checkInternal says whether the package from (a folder relative to the
// module root) may import the internal package to, from a test file or
// not. It returns nil when it may, and otherwise the reason.
func checkInternal(from, to string, test bool) error {
	toRole, ok := roles[to]
	if !ok {
		return fmt.Errorf("%s has no role: add it to roles in internal/archtest (product, tool or testSupport)", to)
	}
	fromRole := roles[from] // zero outside internal/
	if isInternal(from) && fromRole == 0 {
		return fmt.Errorf("%s has no role: add it to roles in internal/archtest (product, tool or testSupport)", from)
	}
	switch {
	case fromRole == tool:
		return nil // a tool may use anything below cmd/
	case toRole == tool:
		if test {
			return nil // tests may use tools (synth) to make fixtures
		}
		return fmt.Errorf("%s imports the developer tool %s: product code never imports a tool", from, to)
	case toRole == testSupport:
		if test || fromRole == testSupport {
			return nil
		}
		return fmt.Errorf("%s imports the test helper %s from a non-test file", from, to)
	case fromRole == 0:
		// Outside internal/: cmd/ wires the product together and may
		// import any of it; the libraries' own rule is in allowed.
		return nil
	}
	if slices.Contains(internalImports[from], to) {
		return nil
	}
	if test && slices.Contains(internalTestImports[from], to) {
		return nil
	}
	return fmt.Errorf("%s imports %s: not an edge in internalImports (internal/archtest); add it there if it is meant", from, to)
}

// isInternal reports whether the package folder p is below an internal/
// folder.
func isInternal(p string) bool {
	return strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/")
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		top := strings.Split(rel, "/")[0]
		pkgDir := path.Dir(rel)
		isTest := strings.HasSuffix(p, "_test.go")
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		checked++
		if isInternal(pkgDir) {
			if _, ok := roles[pkgDir]; !ok {
				t.Errorf("%s: package %s has no role: add it to roles in internal/archtest (product, tool or testSupport)", rel, pkgDir)
			}
		}
		for _, imp := range f.Imports {
			ipath := strings.Trim(imp.Path.Value, `"`)
			pkg, ok := strings.CutPrefix(ipath, module)
			if !ok {
				continue
			}
			if isInternal(pkg) && pkg != pkgDir {
				if err := checkInternal(pkgDir, pkg, isTest); err != nil {
					t.Errorf("%s: %v", rel, err)
				}
			}
			dep := strings.Split(pkg, "/")[0]
			if dep == top {
				continue
			}
			if strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd/", rel, ipath)
				continue
			}
			if pkg == "internal/testutil" && isTest {
				continue
			}
			if !slices.Contains(allowed[top], dep) {
				t.Errorf("%s imports %s: %s may import only %v", rel, ipath, top, allowed[top])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no Go files found")
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

// TestCheckInternal pins the rule itself, so that a forbidden edge is
// seen to fail and not only the edges that happen to exist today.
func TestCheckInternal(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		test     bool
		wantErr  string // "" when the import is allowed
	}{
		{"listed product edge", "internal/trialrun", "internal/objective", false, ""},
		{"unlisted product edge", "internal/objective", "internal/trialrun", false, "not an edge in internalImports"},
		{"product imports a sibling it never used", "internal/submit", "internal/status", false, "not an edge in internalImports"},
		{"product imports a tool", "internal/status", "internal/tools/synth", false, "developer tool"},
		{"product imports a benchmark main", "internal/report", "internal/tools/samplerbench", false, "developer tool"},
		{"product test imports a tool", "internal/status", "internal/tools/synth", true, ""},
		{"test-only edge from a test file", "internal/admin", "internal/status", true, ""},
		{"test-only edge from a non-test file", "internal/admin", "internal/status", false, "not an edge in internalImports"},
		{"tool imports the product", "internal/tools/benchfloor", "internal/trialrun", false, ""},
		{"tool imports a tool", "internal/tools/synth/synthstudy", "internal/tools/synth", false, ""},
		{"product imports test support", "internal/trialrun", "internal/testutil", false, "test helper"},
		{"product test imports test support", "internal/trialrun", "internal/studytest", true, ""},
		{"test support imports test support", "internal/studytest", "internal/testutil", false, ""},
		{"cmd imports the product", "cmd/soma", "internal/status", false, ""},
		{"cmd imports a tool", "cmd/soma", "internal/tools/benchtable", false, "developer tool"},
		{"unknown target", "internal/status", "internal/newthing", false, "has no role"},
		{"unknown source", "internal/newthing", "internal/objective", false, "has no role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkInternal(tt.from, tt.to, tt.test)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("checkInternal(%q, %q, %v) = %v, want nil", tt.from, tt.to, tt.test, err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("checkInternal(%q, %q, %v) = nil, want an error containing %q", tt.from, tt.to, tt.test, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("checkInternal(%q, %q, %v) = %v, want an error containing %q", tt.from, tt.to, tt.test, err, tt.wantErr)
			}
		})
	}
}
