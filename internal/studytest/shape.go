package studytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// fieldSpec is one line of a documented JSON shape.
type fieldSpec struct {
	types    []string
	optional bool
}

// ParseShape reads a documented JSON shape (status.JSONShape): one field
// per line, "path type description", where path uses "[]" for array
// elements and "*" for any key and ends in "?" when the field may be
// absent, and type is string, integer, number, bool, object, array or the
// name of a top-level object described by other lines, with "|null" and
// "|string"-style alternatives.
func ParseShape(shape string) (map[string]fieldSpec, error) {
	out := make(map[string]fieldSpec)
	for i, line := range strings.Split(shape, "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			return nil, fmt.Errorf("shape line %d %q: want path and type", i+1, line)
		}
		path, typ := fs[0], fs[1]
		sp := fieldSpec{types: strings.Split(typ, "|")}
		if p, ok := strings.CutSuffix(path, "?"); ok {
			path, sp.optional = p, true
		}
		if _, dup := out[path]; dup {
			return nil, fmt.Errorf("shape line %d: %s documented twice", i+1, path)
		}
		out[path] = sp
	}
	return out, nil
}

// CheckShape checks the JSON document doc against a documented shape
// (see ParseShape): every field present is documented with the type it
// has, and every documented field that is not optional is present. It
// returns one message per difference.
func CheckShape(shape string, doc []byte) []string {
	spec, err := ParseShape(shape)
	if err != nil {
		return []string{err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	c := checker{spec: spec}
	c.value("", "", v)
	sort.Strings(c.errs)
	return c.errs
}

type checker struct {
	spec map[string]fieldSpec
	errs []string
}

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// value checks v, found at where, against the spec of path.
func (c *checker) value(path, where string, v any) {
	if path == "" { // the root object
		c.object("", where, v)
		return
	}
	sp, ok := c.spec[path]
	if !ok && strings.HasSuffix(path, "[]") && c.hasChildren(path) {
		// "a[].b" lines document the objects of array a.
		c.object(path, where, v)
		return
	}
	if !ok {
		c.errorf("%s: undocumented (add it to the shape, or remove it)", where)
		return
	}
	for _, t := range sp.types {
		if c.is(t, v) {
			switch t {
			case "object":
				c.object(path, where, v)
			case "array":
				for i, e := range v.([]any) {
					c.value(path+"[]", fmt.Sprintf("%s[%d]", where, i), e)
				}
			default:
				if _, named := c.spec[t]; named && !isBasic(t) {
					c.object(t, where, v)
				}
			}
			return
		}
	}
	c.errorf("%s: %s, documented as %s", where, kind(v), strings.Join(sp.types, "|"))
}

// hasChildren reports whether some documented path lies below path.
func (c *checker) hasChildren(path string) bool {
	for p := range c.spec {
		if strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

func isBasic(t string) bool {
	switch t {
	case "string", "integer", "number", "bool", "object", "array", "null":
		return true
	}
	return false
}

func (c *checker) is(t string, v any) bool {
	switch t {
	case "null":
		return v == nil
	case "string":
		_, ok := v.(string)
		return ok
	case "bool":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil || !strings.ContainsAny(n.String(), ".eE")
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	if _, named := c.spec[t]; named {
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

// object checks the fields of an object at path (the root when "").
func (c *checker) object(path, where string, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		c.errorf("%s: %s, want an object", where, kind(v))
		return
	}
	join := func(p, k string) string {
		if p == "" {
			return k
		}
		return p + "." + k
	}
	for k, e := range m {
		child := join(path, k)
		if _, ok := c.spec[child]; !ok {
			if _, any := c.spec[join(path, "*")]; any {
				child = join(path, "*")
			}
		}
		c.value(child, join(where, k), e)
	}
	// Documented fields of this object that are missing.
	for p, sp := range c.spec {
		rest, ok := strings.CutPrefix(p, join(path, ""))
		if path == "" {
			rest, ok = p, true
			if _, named := c.spec[p]; named && !strings.ContainsAny(p, ".[") && isNamedType(c.spec, p) {
				continue
			}
		}
		if !ok || rest == "" || strings.ContainsAny(rest, ".[*") || sp.optional {
			continue
		}
		if _, there := m[rest]; !there {
			c.errorf("%s: missing (documented)", join(where, rest))
		}
	}
}

// isNamedType reports whether top-level name p is used as a type.
func isNamedType(spec map[string]fieldSpec, p string) bool {
	for _, sp := range spec {
		for _, t := range sp.types {
			if t == p {
				return true
			}
		}
	}
	return false
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
