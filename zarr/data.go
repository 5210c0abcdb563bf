package zarr

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Data is a dense block of elements: Bytes holds product(Shape) elements
// of Type, little-endian, in C (row-major) order. ReadRegion returns one;
// WriteRegion and Append take one. A Data is a plain value: it is not safe
// to modify while a call that uses it is running.
type Data struct {
	Type  DataType
	Shape []int64
	Bytes []byte
}

// Element is the set of Go types that correspond one-to-one to a DataType.
type Element interface {
	bool | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

// TypeOf returns the DataType that holds elements of Go type T.
func TypeOf[T Element]() DataType {
	var z T
	switch any(z).(type) {
	case bool:
		return Bool
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case float32:
		return Float32
	default:
		return Float64
	}
}

// NewData returns a zeroed Data of type t and the given shape.
func NewData(t DataType, shape []int64) (*Data, error) {
	if !t.valid() {
		return nil, fmt.Errorf("zarr: new data: invalid data type %v", t)
	}
	n, err := numElements(shape)
	if err != nil {
		return nil, fmt.Errorf("zarr: new data: %w", err)
	}
	return &Data{Type: t, Shape: append([]int64(nil), shape...), Bytes: make([]byte, n*int64(t.Size()))}, nil
}

// DataOf returns a Data of the given shape holding a copy of values; the
// number of values must equal the product of shape.
func DataOf[T Element](shape []int64, values []T) (*Data, error) {
	t := TypeOf[T]()
	d, err := NewData(t, shape)
	if err != nil {
		return nil, err
	}
	if int64(len(values))*int64(t.Size()) != int64(len(d.Bytes)) {
		return nil, fmt.Errorf("zarr: data of shape %v needs %d values, got %d", shape, len(d.Bytes)/t.Size(), len(values))
	}
	b := d.Bytes
	switch v := any(values).(type) {
	case []bool:
		for i, x := range v {
			if x {
				b[i] = 1
			}
		}
	case []int8:
		for i, x := range v {
			b[i] = byte(x)
		}
	case []uint8:
		copy(b, v)
	case []int16:
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x))
		}
	case []uint16:
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
	case []int32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
	case []uint32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
	case []float32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
	case []int64:
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		}
	case []uint64:
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
	case []float64:
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		}
	}
	return d, nil
}

// Values returns a copy of d's elements as a []T in C order. T must match
// d.Type exactly (float32 for Float32, and so on).
func Values[T Element](d *Data) ([]T, error) {
	if want := TypeOf[T](); d.Type != want {
		return nil, fmt.Errorf("zarr: data holds %v, not %v (call Values[%s])", d.Type, want, goTypeName(d.Type))
	}
	es := d.Type.Size()
	if len(d.Bytes)%es != 0 {
		return nil, fmt.Errorf("zarr: data of %v has %d bytes, not a multiple of %d", d.Type, len(d.Bytes), es)
	}
	n := len(d.Bytes) / es
	out := make([]T, n)
	b := d.Bytes
	switch v := any(out).(type) {
	case []bool:
		for i := range v {
			v[i] = b[i] != 0
		}
	case []int8:
		for i := range v {
			v[i] = int8(b[i])
		}
	case []uint8:
		copy(v, b)
	case []int16:
		for i := range v {
			v[i] = int16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case []uint16:
		for i := range v {
			v[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
	case []int32:
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []uint32:
		for i := range v {
			v[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
	case []float32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []int64:
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []uint64:
		for i := range v {
			v[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	case []float64:
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	return out, nil
}

func goTypeName(t DataType) string {
	if t == Bool {
		return "bool"
	}
	return t.String()
}

// Len returns the number of elements in d according to its shape.
func (d *Data) Len() int64 {
	n, _ := numElements(d.Shape)
	return n
}

// At returns element i (in C order) as a Go value of d.Type's Go type.
// It panics, like a slice index, if i is out of range.
func (d *Data) At(i int64) any {
	es := int64(d.Type.Size())
	return goValue(d.Type, d.Bytes[i*es:(i+1)*es])
}

// check verifies that d is well-formed.
func (d *Data) check() error {
	if d == nil {
		return fmt.Errorf("data is nil")
	}
	if !d.Type.valid() {
		return fmt.Errorf("data has invalid type %v", d.Type)
	}
	n, err := numElements(d.Shape)
	if err != nil {
		return err
	}
	if n*int64(d.Type.Size()) != int64(len(d.Bytes)) {
		return fmt.Errorf("data of shape %v and type %v needs %d bytes, has %d", d.Shape, d.Type, n*int64(d.Type.Size()), len(d.Bytes))
	}
	return nil
}

// WriteText writes d as text, one line per index of the first dimension
// (all other dimensions flattened, C order), values separated by tabs. It
// is what `soma zarr cat` prints. Floats use the shortest representation
// that round-trips; NaN and infinities are written NaN, +Inf, -Inf.
func (d *Data) WriteText(w io.Writer) error {
	if err := d.check(); err != nil {
		return fmt.Errorf("zarr: write text: %w", err)
	}
	bw := bufio.NewWriter(w)
	es := int64(d.Type.Size())
	n := d.Len()
	perRow := n
	if len(d.Shape) > 0 && d.Shape[0] > 0 {
		perRow = n / d.Shape[0]
	}
	var buf []byte
	for i := int64(0); i < n; i++ {
		buf = buf[:0]
		buf = appendText(buf, d.Type, d.Bytes[i*es:(i+1)*es])
		if (i+1)%perRow == 0 || perRow == 0 {
			buf = append(buf, '\n')
		} else {
			buf = append(buf, '\t')
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func appendText(buf []byte, t DataType, b []byte) []byte {
	switch v := goValue(t, b).(type) {
	case bool:
		return strconv.AppendBool(buf, v)
	case int8:
		return strconv.AppendInt(buf, int64(v), 10)
	case int16:
		return strconv.AppendInt(buf, int64(v), 10)
	case int32:
		return strconv.AppendInt(buf, int64(v), 10)
	case int64:
		return strconv.AppendInt(buf, v, 10)
	case uint8:
		return strconv.AppendUint(buf, uint64(v), 10)
	case uint16:
		return strconv.AppendUint(buf, uint64(v), 10)
	case uint32:
		return strconv.AppendUint(buf, uint64(v), 10)
	case uint64:
		return strconv.AppendUint(buf, v, 10)
	case float32:
		return strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
	case float64:
		return strconv.AppendFloat(buf, v, 'g', -1, 64)
	}
	return buf
}
