package slurm

import (
	"reflect"
	"strings"
	"testing"
)

type arrayCase struct {
	in      string
	want    Array
	wantLen int
	wantStr string // String()'s result when it is not the input
	wantErr string
}

var arrayCases = []arrayCase{
	{in: "0-63%16", want: Array{Ranges: []Range{{0, 63, 1}}, Throttle: 16}, wantLen: 64},
	{in: "0-3", want: Array{Ranges: []Range{{0, 3, 1}}}, wantLen: 4},
	{in: "7", want: Array{Ranges: []Range{{7, 7, 1}}}, wantLen: 1},
	{in: "1,3,5-9", want: Array{Ranges: []Range{{1, 1, 1}, {3, 3, 1}, {5, 9, 1}}}, wantLen: 7},
	{in: "0-30:10", want: Array{Ranges: []Range{{0, 30, 10}}}, wantLen: 4},
	{in: "0-15:4%2", want: Array{Ranges: []Range{{0, 15, 4}}, Throttle: 2}, wantLen: 4},
	{in: "1-5,3-7", want: Array{Ranges: []Range{{1, 5, 1}, {3, 7, 1}}}, wantLen: 7},
	{in: "0-4000000", want: Array{Ranges: []Range{{0, 4000000, 1}}}, wantLen: 4000001},
	{in: "", wantErr: "empty"},
	{in: "0-63%0", wantErr: "throttle %0 would run nothing"},
	{in: "0-63%", wantErr: `throttle "" is not a number`},
	{in: "5-2", wantErr: "range 5-2 runs backwards (write 2-5)"},
	{in: "-3", wantErr: `index "" is not a number`},
	{in: "1,,2", wantErr: "empty element"},
	{in: "1,", wantErr: "empty element"},
	{in: "a-b", wantErr: `index "a" is not a number`},
	{in: "0-10:0", wantErr: `step "0" is not a positive number`},
	{in: "5:2", wantErr: "needs a range"},
	{in: "0-4000001", wantErr: `index "4000001" is not a number from 0 to 4000000`},
	{in: " 0-3", wantErr: `index " 0" is not a number`},
	{in: "0-3%2%2", wantErr: "throttle"},
	{in: "[0-3]", wantErr: "not a number"},
	{in: "1-2-3", wantErr: "not a number"},
	{in: "00-3", wantErr: `index "00" is not a number`},
	{in: "5-5:3", want: Array{Ranges: []Range{{5, 5, 1}}}, wantLen: 1, wantStr: "5"},
}

func TestParseArray(t *testing.T) {
	for _, tc := range arrayCases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseArray(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseArray(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArray(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseArray(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if n := got.Len(); n != tc.wantLen {
				t.Errorf("ParseArray(%q).Len() = %d, want %d", tc.in, n, tc.wantLen)
			}
			if s, want := got.String(), orDefault(tc.wantStr, tc.in); s != want {
				t.Errorf("ParseArray(%q).String() = %q, want %q", tc.in, s, want)
			}
		})
	}
}

// FuzzParseArray: whatever parses prints back to an equal Array with at
// least one task.
func FuzzParseArray(f *testing.F) {
	for _, tc := range arrayCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArray(s)
		if err != nil {
			return
		}
		back, err := ParseArray(a.String())
		if err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("ParseArray(%q) = %+v; ParseArray(%q) = %+v, %v", s, a, a.String(), back, err)
		}
		if a.Len() < 1 {
			t.Fatalf("ParseArray(%q).Len() = %d", s, a.Len())
		}
	})
}
