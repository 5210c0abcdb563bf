// Package archtest holds the test that keeps imports pointing one way
// (DESIGN.md, "Packages and the direction of imports").
package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/soma-hpc/soma/"

// allowed lists, per top-level package, the soma packages it may import
// from non-test files.
var allowed = map[string][]string{
	"fsstore":  {},
	"study":    {"fsstore"},
	"slurm":    {"study", "fsstore"},
	"zarr":     {"fsstore"},
	"worker":   {"zarr", "fsstore"},
	"examples": {"fsstore", "study", "slurm", "zarr", "worker"},
	"internal": {"fsstore", "study", "slurm", "zarr", "worker", "internal"},
	"cmd":      {"fsstore", "study", "slurm", "zarr", "worker", "internal"},
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		top := strings.Split(filepath.ToSlash(rel), "/")[0]
		isTest := strings.HasSuffix(p, "_test.go")
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		checked++
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			pkg, ok := strings.CutPrefix(path, module)
			if !ok {
				continue
			}
			dep := strings.Split(pkg, "/")[0]
			if dep == top {
				continue
			}
			if strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd/", rel, path)
				continue
			}
			if pkg == "internal/testutil" && isTest {
				continue
			}
			if !contains(allowed[top], dep) {
				t.Errorf("%s imports %s: %s may import only %v (DESIGN.md)", rel, path, top, allowed[top])
			}
		}
		return nil
	})
	if checked == 0 {
		t.Fatal("no Go files found")
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
