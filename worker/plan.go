package worker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/zarr"
)

var (
	planIDRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	nodeIDRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`)
	pyClassRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pyFileRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\.py$`)
	reservedIDs = map[string]bool{"input": true, "targets": true}
)

// ValidatePlan checks that p can run as written; its errors wrap
// ErrInvalidPlan and name the field and the fix. An empty Mode becomes
// Forward.
func ValidatePlan(p *Plan) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPlan, fmt.Sprintf(format, args...))
	}
	if !planIDRe.MatchString(p.ID) {
		return bad("id %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", p.ID)
	}
	switch p.Mode {
	case "":
		p.Mode = Forward
	case Fit, Forward:
	default:
		return bad("mode %q: want %q or %q", p.Mode, Fit, Forward)
	}
	if len(p.Nodes) == 0 {
		return bad("no nodes (add a [[nodes]] with id, file and class)")
	}
	files := map[string]bool{}
	for _, f := range p.Files {
		if !pyFileRe.MatchString(f.Name) {
			return bad("file %q: want a plain NAME.py (no folders)", f.Name)
		}
		if files[f.Name] {
			return bad("file %q shipped twice", f.Name)
		}
		files[f.Name] = true
	}
	seen := map[string]bool{}
	for i, n := range p.Nodes {
		switch {
		case !nodeIDRe.MatchString(n.ID):
			return bad("node %d: id %q: want a name of letters, digits, '_', '.', '-'", i, n.ID)
		case reservedIDs[n.ID]:
			return bad("node %d: id %q is reserved (it names the plan's input or targets)", i, n.ID)
		case seen[n.ID]:
			return bad("node id %q used twice", n.ID)
		case !files[n.File]:
			return bad("node %q: file %q is not shipped with the plan", n.ID, n.File)
		case !pyClassRe.MatchString(n.Class):
			return bad("node %q: class %q is not a Python class name", n.ID, n.Class)
		case len(n.Inputs) > 1:
			return bad("node %q has %d inputs; a filter takes one (forward(X))", n.ID, len(n.Inputs))
		}
		for _, in := range n.Inputs {
			if in != "input" && !seen[in] {
				return bad("node %q: input %q is neither \"input\" nor an earlier node", n.ID, in)
			}
		}
		seen[n.ID] = true
	}
	for _, id := range p.Outputs {
		if !seen[id] {
			return bad("outputs: %q is not a node", id)
		}
	}
	want := outputNodes(p)
	for _, id := range p.RefOutputs {
		if !want[id] {
			return bad("ref_outputs: %q is not one of the plan's outputs (add it to outputs)", id)
		}
	}
	for i, n := range p.Nodes {
		if n.At != nil && (n.At.GPUs < 0 || n.At.CPUs < 0) {
			return bad("node %d (%q): at: gpus %d, cpus %d: want 0 or more", i, n.ID, n.At.GPUs, n.At.CPUs)
		}
	}
	for id := range p.States {
		if !seen[id] {
			return bad("states: %q is not a node", id)
		}
	}
	switch {
	case p.TimeoutSeconds < 0 || math.IsNaN(p.TimeoutSeconds) || math.IsInf(p.TimeoutSeconds, 0):
		return bad("timeout_seconds %v: want a positive number (0: the worker's default)", p.TimeoutSeconds)
	case p.Resources.GPUs < 0 || p.Resources.CPUs < 0:
		return bad("resources: gpus %d, cpus %d: want 0 or more", p.Resources.GPUs, p.Resources.CPUs)
	case p.Resources.ShareGPUs && p.Resources.GPUs == 0:
		return bad("resources: share_gpus without gpus: ask for the GPUs to share (gpus = 1), or drop share_gpus")
	}
	return nil
}

// planFile is a plan as a person writes it (TOML).
type planFile struct {
	ID        string            `toml:"id"`
	Mode      string            `toml:"mode"`
	Seed      int64             `toml:"seed"`
	Timeout   string            `toml:"timeout"`
	Tags      []string          `toml:"tags"`
	Outputs   []string          `toml:"outputs"`
	RefOuts   []string          `toml:"ref_outputs"`
	Files     []string          `toml:"files"`
	Env       envFile           `toml:"env"`
	Input     *valueFile        `toml:"input"`
	Targets   *valueFile        `toml:"targets"`
	Resources askFile           `toml:"resources"`
	States    map[string]string `toml:"states"`
	Metadata  map[string]string `toml:"metadata"`
	Nodes     []nodeFile        `toml:"nodes"`
}

type envFile struct {
	Requirements       []string `toml:"requirements"`
	SystemSitePackages bool     `toml:"system_site_packages"`
	NoIndex            bool     `toml:"no_index"`
	FindLinks          []string `toml:"find_links"`
	IndexURL           string   `toml:"index_url"`
}

type askFile struct {
	GPUs      int    `toml:"gpus"`
	ShareGPUs bool   `toml:"share_gpus"`
	CPUs      int    `toml:"cpus"`
	Memory    uint64 `toml:"memory"`
}

type nodeFile struct {
	ID     string         `toml:"id"`
	File   string         `toml:"file"`
	Class  string         `toml:"class"`
	Config map[string]any `toml:"config"`
	Inputs []string       `toml:"inputs"`
	At     *atFile        `toml:"at"`
	Env    *envFile       `toml:"env"`
}

// atFile is a node's at = { tags = [...], gpus = N, cpus = N, memory = SIZE }.
type atFile struct {
	Tags   []string `toml:"tags"`
	GPUs   int      `toml:"gpus"`
	CPUs   int      `toml:"cpus"`
	Memory any      `toml:"memory"` // bytes, or a size such as "16GiB"
	Client bool     `toml:"client"`
}

// ParseSize reads 512MiB, 64GiB, 1.5TB or a plain byte count.
func ParseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || f*u.mult >= math.MaxUint64 {
				return 0, fmt.Errorf("size %q: want a size such as 64GiB", s)
			}
			return uint64(f * u.mult), nil
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a size such as 64GiB", s)
	}
	return n, nil
}

// memory is at.memory in bytes.
func (a *atFile) memory(node string) (uint64, error) {
	switch m := a.Memory.(type) {
	case nil:
		return 0, nil
	case int64:
		if m >= 0 {
			return uint64(m), nil
		}
	case string:
		if n, err := ParseSize(m); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: node %q: at.memory = %v: want bytes or a size such as \"16GiB\"", ErrInvalidPlan, node, a.Memory)
}

// valueFile is a value in a plan file: exactly one of npy (a .npy file
// next to the plan), ref (blob: or zarr:), values (with dtype and shape)
// or object.
type valueFile struct {
	Npy    string  `toml:"npy"`
	Ref    string  `toml:"ref"`
	DType  string  `toml:"dtype"`
	Shape  []int64 `toml:"shape"`
	Values []any   `toml:"values"`
	Object any     `toml:"object"`
}

// ParsePlanFile reads a plan file (TOML): the nodes' files and .npy
// inputs are read relative to the plan file's folder and shipped inline.
// Unknown keys are errors (a typo must not silently change a plan).
func ParsePlanFile(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("worker: plan file: %w", err)
	}
	p, err := ParsePlan(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePlan parses a plan file's text; dir is where its files are.
func ParsePlan(text []byte, dir string) (*Plan, error) {
	var pf planFile
	md, err := toml.NewDecoder(bytes.NewReader(text)).Decode(&pf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%w: unknown keys %s (check the spelling; see examples/)", ErrInvalidPlan, strings.Join(keys, ", "))
	}
	p := &Plan{
		Version:   ProtocolVersion,
		ID:        pf.ID,
		Mode:      Mode(pf.Mode),
		Seed:      pf.Seed,
		Outputs:   pf.Outputs,
		Env:       EnvRequest(pf.Env),
		Metadata:  pf.Metadata,
		Resources: Ask{GPUs: pf.Resources.GPUs, ShareGPUs: pf.Resources.ShareGPUs, CPUs: pf.Resources.CPUs, Memory: pf.Resources.Memory, Tags: pf.Tags},
	}
	p.RefOutputs = pf.RefOuts
	if err := checkTags(pf.Tags, "tags"); err != nil {
		return nil, err
	}
	if pf.Timeout != "" {
		d, err := time.ParseDuration(pf.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: timeout %q: want a duration such as \"10m\"", ErrInvalidPlan, pf.Timeout)
		}
		p.TimeoutSeconds = d.Seconds()
	}
	names := append([]string(nil), pf.Files...)
	for _, n := range pf.Nodes {
		node := Node{ID: n.ID, File: n.File, Class: n.Class, Config: n.Config, Inputs: n.Inputs}
		if n.At != nil {
			if err := checkTags(n.At.Tags, "node "+strconv.Quote(n.ID)+": at.tags"); err != nil {
				return nil, err
			}
			mem, err := n.At.memory(n.ID)
			if err != nil {
				return nil, err
			}
			if n.At.Client && (len(n.At.Tags) > 0 || n.At.GPUs > 0 || n.At.CPUs > 0 || mem > 0) {
				return nil, fmt.Errorf("%w: node %q: at = { client = true } with tags, gpus, cpus or memory: the client is the machine running soma run, never placed; drop one or the other", ErrInvalidPlan, n.ID)
			}
			node.At = &Ask{GPUs: n.At.GPUs, CPUs: n.At.CPUs, Memory: mem, Tags: n.At.Tags, Client: n.At.Client}
		}
		if n.Env != nil {
			env := EnvRequest(*n.Env)
			node.Env = &env
		}
		p.Nodes = append(p.Nodes, node)
		names = append(names, n.File)
	}
	shipped := map[string]bool{}
	for _, name := range names {
		if shipped[name] {
			continue
		}
		shipped[name] = true
		if !pyFileRe.MatchString(name) {
			return nil, fmt.Errorf("%w: file %q: want a plain NAME.py next to the plan file", ErrInvalidPlan, name)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%w: file %q: %v", ErrInvalidPlan, name, err)
		}
		p.Files = append(p.Files, File{Name: name, Digest: fsstore.Sum(b).String(), Content: b})
	}
	if pf.Input != nil {
		if p.Input, err = pf.Input.value(dir, "input"); err != nil {
			return nil, err
		}
	} else {
		p.Input = Value{Kind: KindNone}
	}
	if pf.Targets != nil {
		v, err := pf.Targets.value(dir, "targets")
		if err != nil {
			return nil, err
		}
		p.Targets = &v
	}
	if len(pf.States) > 0 {
		p.States = map[string]Value{}
		for id, ref := range pf.States {
			if !strings.HasPrefix(ref, "blob:") {
				return nil, fmt.Errorf("%w: states.%s = %q: want a blob:sha256:... reference (as a fit's result prints)", ErrInvalidPlan, id, ref)
			}
			p.States[id] = Value{Kind: KindBytes, Ref: ref}
		}
	}
	if err := ValidatePlan(p); err != nil {
		return nil, err
	}
	return p, nil
}

// checkTags refuses a tag a worker could not carry.
func checkTags(tags []string, where string) error {
	for _, t := range tags {
		if t == "" || strings.ContainsAny(t, " \t\n,") {
			return fmt.Errorf("%w: %s: tag %q: want a non-empty word without spaces or commas, as soma-worker --tag gives", ErrInvalidPlan, where, t)
		}
	}
	return nil
}

func (vf *valueFile) value(dir, what string) (Value, error) {
	set := 0
	for _, b := range []bool{vf.Npy != "", vf.Ref != "", vf.Values != nil, vf.Object != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return Value{}, fmt.Errorf("%w: [%s]: give exactly one of npy, ref, values (with dtype and shape) or object", ErrInvalidPlan, what)
	}
	switch {
	case vf.Npy != "":
		path := vf.Npy
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			// Said only "open PATH: no such file or directory": a new
			// user of examples/worker-digits, who had not run its
			// make_data.py, could not tell the plan wanted the file made.
			return Value{}, fmt.Errorf("%w: [%s] npy = %q: %s does not exist (a relative path is read from the plan file's folder; make the file first, or fix the path)", ErrInvalidPlan, what, vf.Npy, path)
		}
		if err != nil {
			return Value{}, fmt.Errorf("%w: [%s] npy: %v", ErrInvalidPlan, what, err)
		}
		v, err := ParseNpy(b)
		if err != nil {
			return Value{}, fmt.Errorf("%w: [%s] npy %s: %v", ErrInvalidPlan, what, vf.Npy, err)
		}
		return v, nil
	case vf.Ref != "":
		if strings.HasPrefix(vf.Ref, "blob:") && vf.DType == "" {
			return Value{}, fmt.Errorf("%w: [%s] a blob reference needs dtype and shape (the blob holds only the bytes)", ErrInvalidPlan, what)
		}
		kind := KindArray
		if vf.DType == "" && strings.HasPrefix(vf.Ref, "blob:") {
			kind = KindBytes
		}
		return Value{Kind: kind, DType: vf.DType, Shape: vf.Shape, Ref: vf.Ref}, nil
	case vf.Object != nil:
		return Value{Kind: KindObject, Object: vf.Object}, nil
	}
	v, err := encodeValues(vf.DType, vf.Shape, vf.Values)
	if err != nil {
		return Value{}, fmt.Errorf("%w: [%s]: %v", ErrInvalidPlan, what, err)
	}
	return v, nil
}

// encodeValues packs numbers as dtype's little-endian bytes.
func encodeValues(dtype string, shape []int64, values []any) (Value, error) {
	t, err := zarr.ParseDataType(dtype)
	if err != nil {
		return Value{}, fmt.Errorf("dtype %q: %w", dtype, err)
	}
	if shape == nil {
		shape = []int64{int64(len(values))}
	}
	buf := make([]byte, 0, len(values)*t.Size())
	for i, x := range values {
		var f float64
		switch n := x.(type) {
		case int64:
			f = float64(n)
		case float64:
			f = n
		case bool:
			if n {
				f = 1
			}
		default:
			return Value{}, fmt.Errorf("values[%d] = %v: want a number", i, x)
		}
		buf = appendNumber(buf, t, f)
	}
	v := Value{Kind: KindArray, DType: t.String(), Shape: shape, Data: buf}
	if err := checkArray(v); err != nil {
		return Value{}, err
	}
	return v, nil
}

func appendNumber(b []byte, t zarr.DataType, f float64) []byte {
	switch t {
	case zarr.Bool, zarr.Int8, zarr.Uint8:
		return append(b, byte(int64(f)))
	case zarr.Int16, zarr.Uint16:
		return binary.LittleEndian.AppendUint16(b, uint16(int64(f)))
	case zarr.Int32, zarr.Uint32:
		return binary.LittleEndian.AppendUint32(b, uint32(int64(f)))
	case zarr.Int64, zarr.Uint64:
		return binary.LittleEndian.AppendUint64(b, uint64(int64(f)))
	case zarr.Float32:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	}
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

var npyDescr = map[string]string{
	"|b1": "bool", "|i1": "int8", "|u1": "uint8",
	"<i2": "int16", "<u2": "uint16", "<i4": "int32", "<u4": "uint32",
	"<i8": "int64", "<u8": "uint64", "<f4": "float32", "<f8": "float64",
}

var (
	npyDescrRe   = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyFortranRe = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShapeRe   = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// ErrNpy is a .npy file this reader does not take.
var ErrNpy = errors.New("worker: unsupported .npy")

// ParseNpy reads a numpy .npy file (format 1-3, little-endian numeric
// dtypes, C order) as an array Value.
func ParseNpy(b []byte) (Value, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return Value{}, fmt.Errorf("%w: not a .npy file (no \\x93NUMPY magic)", ErrNpy)
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return Value{}, fmt.Errorf("%w: truncated header", ErrNpy)
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return Value{}, fmt.Errorf("%w: format version %d", ErrNpy, b[6])
	}
	if hlen < 0 || start+hlen > len(b) {
		return Value{}, fmt.Errorf("%w: truncated header", ErrNpy)
	}
	h := string(b[start : start+hlen])
	m := npyDescrRe.FindStringSubmatch(h)
	if m == nil {
		return Value{}, fmt.Errorf("%w: no descr in header %q", ErrNpy, h)
	}
	dtype, ok := npyDescr[m[1]]
	if !ok {
		return Value{}, fmt.Errorf("%w: dtype %q (want a little-endian bool, int, uint or float; use arr.astype('<f4'))", ErrNpy, m[1])
	}
	if f := npyFortranRe.FindStringSubmatch(h); f == nil || f[1] == "True" {
		return Value{}, fmt.Errorf("%w: Fortran order (save numpy.ascontiguousarray(arr))", ErrNpy)
	}
	s := npyShapeRe.FindStringSubmatch(h)
	if s == nil {
		return Value{}, fmt.Errorf("%w: no shape in header %q", ErrNpy, h)
	}
	shape := []int64{}
	for _, part := range strings.Split(s[1], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(part, "L"), 10, 64)
		if err != nil || n < 0 {
			return Value{}, fmt.Errorf("%w: shape %q", ErrNpy, s[1])
		}
		shape = append(shape, n)
	}
	v := Value{Kind: KindArray, DType: dtype, Shape: shape, Data: b[start+hlen:]}
	if err := checkArray(v); err != nil {
		return Value{}, fmt.Errorf("%w: %v", ErrNpy, err)
	}
	return v, nil
}
