package zarr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DataType is the element type of an array. Its String form is the Zarr v3
// data_type name ("float32"); the zero value is not a valid type.
type DataType uint8

// The data types soma reads and writes. In memory every element is stored
// little-endian (the bytes codec or a v2 ">" dtype handles big-endian data
// on disk); Bool is one byte, 0 or 1.
const (
	Bool DataType = iota + 1
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float32
	Float64
)

// dataTypeName returns the v3 name of t, or "" if t is invalid.
func dataTypeName(t DataType) string {
	switch t {
	case Bool:
		return "bool"
	case Int8:
		return "int8"
	case Int16:
		return "int16"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Uint8:
		return "uint8"
	case Uint16:
		return "uint16"
	case Uint32:
		return "uint32"
	case Uint64:
		return "uint64"
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	}
	return ""
}

// String returns the Zarr v3 name of t, or "DataType(n)" for an invalid t.
func (t DataType) String() string {
	if s := dataTypeName(t); s != "" {
		return s
	}
	return fmt.Sprintf("DataType(%d)", uint8(t))
}

// Size returns the number of bytes of one element of t, or 0 for an
// invalid t.
func (t DataType) Size() int {
	switch t {
	case Bool, Int8, Uint8:
		return 1
	case Int16, Uint16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

func (t DataType) valid() bool { return t.Size() > 0 }

func (t DataType) isFloat() bool { return t == Float32 || t == Float64 }
func (t DataType) isSigned() bool {
	return t == Int8 || t == Int16 || t == Int32 || t == Int64
}
func (t DataType) isUnsigned() bool {
	return t == Uint8 || t == Uint16 || t == Uint32 || t == Uint64
}

const supportedTypes = "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64"

// ParseDataType parses a Zarr v3 data_type name such as "int32".
func ParseDataType(s string) (DataType, error) {
	for t := Bool; t <= Float64; t++ {
		if dataTypeName(t) == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("zarr: data type %q: %w (soma supports %s)", s, ErrUnsupported, supportedTypes)
}

// MarshalText returns the v3 name of t.
func (t DataType) MarshalText() ([]byte, error) {
	if !t.valid() {
		return nil, fmt.Errorf("zarr: marshal invalid %v", t)
	}
	return []byte(t.String()), nil
}

// UnmarshalText parses a v3 name, as ParseDataType.
func (t *DataType) UnmarshalText(b []byte) error {
	v, err := ParseDataType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// parseV2DType parses a NumPy typestr ("<f4", ">i8", "|b1") into a type and
// whether it is stored big-endian.
func parseV2DType(s string) (DataType, bool, error) {
	if len(s) != 3 {
		return 0, false, fmt.Errorf("dtype %q: %w (soma supports simple NumPy typestrs such as \"<f4\", \"|b1\", not structured or datetime types)", s, ErrUnsupported)
	}
	order, kind, size := s[0], s[1], s[2]
	var t DataType
	switch kind {
	case 'b':
		if size == '1' {
			t = Bool
		}
	case 'i':
		t = map[byte]DataType{'1': Int8, '2': Int16, '4': Int32, '8': Int64}[size]
	case 'u':
		t = map[byte]DataType{'1': Uint8, '2': Uint16, '4': Uint32, '8': Uint64}[size]
	case 'f':
		t = map[byte]DataType{'4': Float32, '8': Float64}[size]
	}
	if t == 0 {
		return 0, false, fmt.Errorf("dtype %q: %w (soma supports %s)", s, ErrUnsupported, supportedTypes)
	}
	switch order {
	case '<', '|':
		return t, false, nil
	case '>':
		return t, t.Size() > 1, nil
	}
	return 0, false, fmt.Errorf("%w: dtype %q: byte order %q is not one of '<', '>', '|'", ErrBadMetadata, s, order)
}

// v2DType is the NumPy typestr of t.
func v2DType(t DataType, bigEndian bool) string {
	var kind byte
	switch {
	case t == Bool:
		kind = 'b'
	case t.isSigned():
		kind = 'i'
	case t.isUnsigned():
		kind = 'u'
	default:
		kind = 'f'
	}
	order := byte('<')
	if t.Size() == 1 {
		order = '|'
	} else if bigEndian {
		order = '>'
	}
	return string([]byte{order, kind, byte('0' + t.Size())})
}

// fillValue is one element in memory layout (little-endian), plus how it
// was spelled so that metadata round-trips.
type fillValue struct {
	b    []byte // t.Size() bytes, little-endian
	null bool   // v2 "fill_value": null (undefined; soma reads zeros)
}

func (f fillValue) isZero() bool {
	for _, c := range f.b {
		if c != 0 {
			return false
		}
	}
	return true
}

func putUint(t DataType, b []byte, u uint64) {
	switch t.Size() {
	case 1:
		b[0] = byte(u)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(u))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(u))
	case 8:
		binary.LittleEndian.PutUint64(b, u)
	}
}

func getUint(t DataType, b []byte) uint64 {
	switch t.Size() {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	case 8:
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func intRange(t DataType) (lo int64, hi uint64) {
	bits := uint(t.Size() * 8)
	if t.isSigned() {
		return -1 << (bits - 1), 1<<(bits-1) - 1
	}
	if bits == 64 {
		return 0, math.MaxUint64
	}
	return 0, 1<<bits - 1
}

// parseFill decodes a JSON fill_value for t. v3 selects the v3 rules (hex
// bit patterns allowed, null refused); v2 allows null.
func parseFill(t DataType, raw json.RawMessage, v3 bool) (fillValue, error) {
	out := fillValue{b: make([]byte, t.Size())}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if v3 {
			return out, fmt.Errorf("fill_value is null or missing (v3 requires a value; write e.g. 0 or \"NaN\")")
		}
		out.null = true
		return out, nil
	}
	switch {
	case t == Bool:
		switch string(raw) {
		case "true":
			out.b[0] = 1
			return out, nil
		case "false":
			return out, nil
		}
		if !v3 && (string(raw) == "0" || string(raw) == "1") {
			out.b[0] = raw[0] - '0'
			return out, nil
		}
		return out, fmt.Errorf("fill_value %s is not true or false (data type bool)", raw)
	case t.isSigned() || t.isUnsigned():
		s := string(raw)
		lo, hi := intRange(t)
		if t.isSigned() {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < lo || v > int64(hi) {
				return out, fmt.Errorf("fill_value %s is not an integer in [%d, %d] (data type %v)", raw, lo, hi, t)
			}
			putUint(t, out.b, uint64(v))
			return out, nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v > hi {
			return out, fmt.Errorf("fill_value %s is not an integer in [0, %d] (data type %v)", raw, hi, t)
		}
		putUint(t, out.b, v)
		return out, nil
	case t.isFloat():
		var f float64
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return out, fmt.Errorf("fill_value %s: %w", raw, err)
			}
			switch s {
			case "NaN":
				f = math.NaN()
			case "Infinity":
				f = math.Inf(1)
			case "-Infinity":
				f = math.Inf(-1)
			default:
				if v3 && strings.HasPrefix(s, "0x") && len(s) == 2+2*t.Size() {
					u, err := strconv.ParseUint(s[2:], 16, 64)
					if err == nil {
						putUint(t, out.b, u)
						return out, nil
					}
				}
				return out, fmt.Errorf("fill_value %q is not a number, \"NaN\", \"Infinity\", \"-Infinity\" or a 0x bit pattern of %d hex digits (data type %v)", s, 2*t.Size(), t)
			}
		} else {
			bits := 64
			if t == Float32 {
				bits = 32 // parse straight to float32: no double rounding
			}
			v, err := strconv.ParseFloat(string(raw), bits)
			if err != nil && !isRangeErr(err) {
				return out, fmt.Errorf("fill_value %s is not a number (data type %v)", raw, t)
			}
			f = v
		}
		if t == Float32 {
			if math.IsNaN(f) {
				// The spec's "NaN": sign 0, quiet bit set, payload 0.
				binary.LittleEndian.PutUint32(out.b, 0x7fc00000)
			} else {
				binary.LittleEndian.PutUint32(out.b, math.Float32bits(float32(f)))
			}
		} else {
			if math.IsNaN(f) {
				binary.LittleEndian.PutUint64(out.b, 0x7ff8000000000000)
			} else {
				binary.LittleEndian.PutUint64(out.b, math.Float64bits(f))
			}
		}
		return out, nil
	}
	return out, fmt.Errorf("data type %v: %w", t, ErrUnsupported)
}

// isRangeErr reports a number too large for the type: JSON 1e999 parses to
// ±Inf, as NumPy does.
func isRangeErr(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange)
}

// fillJSON encodes f for metadata. v3 spells non-canonical NaNs as a 0x bit
// pattern; v2 can only say "NaN".
func fillJSON(t DataType, f fillValue, v3 bool) json.RawMessage {
	if f.null && !v3 {
		return json.RawMessage("null")
	}
	switch {
	case t == Bool:
		if f.b[0] != 0 {
			return json.RawMessage("true")
		}
		return json.RawMessage("false")
	case t.isSigned():
		u := getUint(t, f.b)
		bits := uint(64 - 8*t.Size())
		v := int64(u<<bits) >> bits
		return json.RawMessage(strconv.FormatInt(v, 10))
	case t.isUnsigned():
		return json.RawMessage(strconv.FormatUint(getUint(t, f.b), 10))
	case t == Float32:
		u := binary.LittleEndian.Uint32(f.b)
		v := math.Float32frombits(u)
		return floatJSON(float64(v), math.IsNaN(float64(v)) && u != 0x7fc00000, uint64(u), 8, 32, v3)
	case t == Float64:
		u := binary.LittleEndian.Uint64(f.b)
		v := math.Float64frombits(u)
		return floatJSON(v, math.IsNaN(v) && u != 0x7ff8000000000000, u, 16, 64, v3)
	}
	return json.RawMessage("null")
}

func floatJSON(v float64, oddNaN bool, bits uint64, digits, size int, v3 bool) json.RawMessage {
	switch {
	case oddNaN && v3:
		return json.RawMessage(fmt.Sprintf("\"0x%0*x\"", digits, bits))
	case math.IsNaN(v):
		return json.RawMessage(`"NaN"`)
	case math.IsInf(v, 1):
		return json.RawMessage(`"Infinity"`)
	case math.IsInf(v, -1):
		return json.RawMessage(`"-Infinity"`)
	case v == 0 && math.Signbit(v):
		return json.RawMessage("-0.0")
	}
	s := strconv.FormatFloat(v, 'g', -1, size)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return json.RawMessage(s)
}

// fillFromGo converts a Spec.FillValue to the element layout of t.
func fillFromGo(t DataType, v any) (fillValue, error) {
	out := fillValue{b: make([]byte, t.Size())}
	if v == nil {
		return out, nil
	}
	var raw []byte
	switch x := v.(type) {
	case string:
		if !t.isFloat() {
			return out, fmt.Errorf("fill value %q is a string but data type %v is not a float type", x, t)
		}
		raw, _ = json.Marshal(x)
	case bool:
		if t != Bool {
			return out, fmt.Errorf("fill value %v is a bool but data type is %v", x, t)
		}
		raw = []byte(strconv.FormatBool(x))
	case float32:
		return fillFromFloat(t, float64(x), math.Float32bits(x), true)
	case float64:
		return fillFromFloat(t, x, 0, false)
	case int:
		raw = []byte(strconv.FormatInt(int64(x), 10))
	case int8:
		raw = []byte(strconv.FormatInt(int64(x), 10))
	case int16:
		raw = []byte(strconv.FormatInt(int64(x), 10))
	case int32:
		raw = []byte(strconv.FormatInt(int64(x), 10))
	case int64:
		raw = []byte(strconv.FormatInt(x, 10))
	case uint:
		raw = []byte(strconv.FormatUint(uint64(x), 10))
	case uint8:
		raw = []byte(strconv.FormatUint(uint64(x), 10))
	case uint16:
		raw = []byte(strconv.FormatUint(uint64(x), 10))
	case uint32:
		raw = []byte(strconv.FormatUint(uint64(x), 10))
	case uint64:
		raw = []byte(strconv.FormatUint(x, 10))
	default:
		return out, fmt.Errorf("fill value of Go type %T is not supported (use bool, an integer, a float or \"NaN\", \"Infinity\", \"-Infinity\")", v)
	}
	if t.isFloat() && raw[0] != '"' && raw[0] != 't' && raw[0] != 'f' {
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return out, err
		}
		return fillFromFloat(t, f, 0, false)
	}
	return parseFill(t, raw, true)
}

func fillFromFloat(t DataType, f float64, bits32 uint32, is32 bool) (fillValue, error) {
	out := fillValue{b: make([]byte, t.Size())}
	switch t {
	case Float32:
		if is32 {
			binary.LittleEndian.PutUint32(out.b, bits32)
		} else if math.IsNaN(f) {
			binary.LittleEndian.PutUint32(out.b, 0x7fc00000)
		} else {
			binary.LittleEndian.PutUint32(out.b, math.Float32bits(float32(f)))
		}
		return out, nil
	case Float64:
		if math.IsNaN(f) {
			binary.LittleEndian.PutUint64(out.b, 0x7ff8000000000000)
		} else {
			binary.LittleEndian.PutUint64(out.b, math.Float64bits(f))
		}
		return out, nil
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return out, fmt.Errorf("fill value %v is not an integer (data type %v)", f, t)
	}
	if f < -9.3e18 || f > 1.9e19 {
		return out, fmt.Errorf("fill value %v is out of range for data type %v", f, t)
	}
	var raw string
	if f < 0 {
		raw = strconv.FormatInt(int64(f), 10)
	} else {
		raw = strconv.FormatUint(uint64(f), 10)
	}
	return parseFill(t, json.RawMessage(raw), true)
}

// goValue returns element b of type t as a Go value (bool, int8, ...).
func goValue(t DataType, b []byte) any {
	switch t {
	case Bool:
		return b[0] != 0
	case Int8:
		return int8(b[0])
	case Int16:
		return int16(binary.LittleEndian.Uint16(b))
	case Int32:
		return int32(binary.LittleEndian.Uint32(b))
	case Int64:
		return int64(binary.LittleEndian.Uint64(b))
	case Uint8:
		return b[0]
	case Uint16:
		return binary.LittleEndian.Uint16(b)
	case Uint32:
		return binary.LittleEndian.Uint32(b)
	case Uint64:
		return binary.LittleEndian.Uint64(b)
	case Float32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return nil
}
