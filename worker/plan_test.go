package worker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const planText = `
id = "p1"
mode = "fit"
seed = 3
timeout = "90s"
outputs = ["b"]
tags = ["torch", "a100"]
[env]
requirements = ["numpy>=1.20"]
system_site_packages = true
no_index = true
find_links = ["/wheels"]
[input]
dtype = "float32"
shape = [2, 2]
values = [1, 2, 3, 4.5]
[targets]
npy = "y.npy"
[resources]
gpus = 1
share_gpus = true
[metadata]
who = "me"
[states]
a = "blob:sha256:0000000000000000000000000000000000000000000000000000000000000000"
[[nodes]]
id = "a"
file = "f.py"
class = "A"
[nodes.config]
k = 2
name = "x"
[[nodes]]
id = "b"
file = "f.py"
class = "B"
inputs = ["a"]
`

func writePlanDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.py"), []byte("class A: pass\n"), 0o644)
	// numpy.save(np.array([1, 0], dtype="<i8")), written by hand.
	h := "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"
	h += strings.Repeat(" ", 64-(10+len(h)+1)%64) + "\n"
	npy := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), 0)
	npy = append(npy, h...)
	npy = append(npy, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	os.WriteFile(filepath.Join(dir, "y.npy"), npy, 0o644)
	return dir
}

func TestParsePlan(t *testing.T) {
	dir := writePlanDir(t)
	p, err := ParsePlan([]byte(planText), dir)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case p.ID != "p1" || p.Mode != Fit || p.Seed != 3 || p.TimeoutSeconds != 90:
		t.Errorf("plan = %+v", p)
	case len(p.Files) != 1 || p.Files[0].Name != "f.py" || !strings.HasPrefix(p.Files[0].Digest, "sha256:"):
		t.Errorf("files = %+v, want f.py once, with its digest", p.Files)
	case p.Input.DType != "float32" || len(p.Input.Data) != 16 || p.Input.Data[15] != 0x40:
		t.Errorf("input = %+v", p.Input)
	case p.Targets == nil || p.Targets.DType != "int64" || len(p.Targets.Data) != 16:
		t.Errorf("targets = %+v", p.Targets)
	case p.Nodes[0].Config["k"] != int64(2) || p.Nodes[1].Inputs[0] != "a":
		t.Errorf("nodes = %+v", p.Nodes)
	case !p.Env.NoIndex || p.Env.FindLinks[0] != "/wheels" || p.Resources.GPUs != 1 || !p.Resources.ShareGPUs || p.Metadata["who"] != "me":
		t.Errorf("env %+v resources %+v metadata %v", p.Env, p.Resources, p.Metadata)
	case p.States["a"].Ref == "":
		t.Errorf("states = %+v", p.States)
	case strings.Join(p.Resources.Tags, ",") != "torch,a100":
		t.Errorf("tags = %v, want torch,a100", p.Resources.Tags)
	}
	if r := p.Requirement(); r.GPUs != 1 || len(r.Tags) != 2 {
		t.Errorf("Requirement() = %+v, want 1 GPU and the plan's tags", r)
	}
}

func TestParsePlanRefusals(t *testing.T) {
	dir := writePlanDir(t)
	for _, tc := range []struct{ name, from, to, msg string }{
		{"unknown key", `seed = 3`, "sede = 3", "unknown keys sede"},
		{"bad mode", `mode = "fit"`, `mode = "train"`, `mode "train"`},
		{"bad timeout", `timeout = "90s"`, `timeout = "soon"`, "timeout"},
		{"missing file", `file = "f.py"
class = "B"`, `file = "g.py"
class = "B"`, `"g.py"`},
		{"later input", `inputs = ["a"]`, `inputs = ["c"]`, `input "c" is neither`},
		{"two inputs", `inputs = ["a"]`, `inputs = ["a", "input"]`, "has 2 inputs"},
		{"two value kinds", `npy = "y.npy"`, "npy = \"y.npy\"\nobject = 1", "exactly one of"},
		{"missing npy", `npy = "y.npy"`, `npy = "z.npy"`, `[targets] npy = "z.npy": ` + filepath.Join(dir, "z.npy") + ` does not exist`},
		{"bad values", `values = [1, 2, 3, 4.5]`, `values = [1, 2, 3]`, "has 12 bytes, want 16"},
		{"state not a blob", `a = "blob:sha256:`, `a = "zarr:sha256:`, "want a blob:sha256"},
		{"reserved id", `id = "a"`, `id = "input"`, "reserved"},
		{"output not a node", `outputs = ["b"]`, `outputs = ["z"]`, `outputs: "z"`},
		{"bad id", `id = "p1"`, `id = "../p"`, `id "../p"`},
		{"share without gpus", "gpus = 1\nshare_gpus = true", "share_gpus = true", "share_gpus without gpus"},
		{"tag with a comma", `tags = ["torch", "a100"]`, `tags = ["torch,a100"]`, `tag "torch,a100"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(planText, tc.from) {
				t.Fatalf("test bug: %q not in the plan", tc.from)
			}
			_, err := ParsePlan([]byte(strings.Replace(planText, tc.from, tc.to, 1)), dir)
			if !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("ParsePlan = %v, want ErrInvalidPlan containing %q", err, tc.msg)
			}
		})
	}
}

func TestParseNpy(t *testing.T) {
	good := func(descr, shape string, data []byte) []byte {
		h := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }\n"
		b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), 0)
		return append(append(b, h...), data...)
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		dtype string
		shape []int64
		err   string
	}{
		{"float32 2x2", good("<f4", "2, 2", make([]byte, 16)), "float32", []int64{2, 2}, ""},
		{"scalar", good("<f8", "", make([]byte, 8)), "float64", []int64{}, ""},
		{"bool", good("|b1", "3,", make([]byte, 3)), "bool", []int64{3}, ""},
		{"big endian", good(">f4", "1,", make([]byte, 4)), "", nil, "astype('<f4')"},
		{"fortran", []byte(strings.Replace(string(good("<f4", "1,", make([]byte, 4))), "False", "True", 1)), "", nil, "Fortran"},
		{"short data", good("<f4", "2,", make([]byte, 4)), "", nil, "want 8"},
		{"not npy", []byte("hello world"), "", nil, "magic"},
		{"truncated header", good("<f4", "1,", nil)[:20], "", nil, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseNpy(tc.in)
			if tc.err != "" {
				if !errors.Is(err, ErrNpy) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseNpy = %v, want ErrNpy containing %q", err, tc.err)
				}
				return
			}
			if err != nil || v.DType != tc.dtype || len(v.Shape) != len(tc.shape) {
				t.Fatalf("ParseNpy = %+v, %v; want %s%v", v, err, tc.dtype, tc.shape)
			}
		})
	}
}

// FuzzParseNpy: no input makes the .npy reader panic; what it accepts is
// a consistent array.
func FuzzParseNpy(f *testing.F) {
	f.Add([]byte("\x93NUMPY\x01\x00\x46\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }       \n\x00\x00\x80\x3f"))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseNpy(b)
		if err == nil {
			if err := checkArray(v); err != nil {
				t.Fatalf("accepted an inconsistent array: %v", err)
			}
		}
	})
}
