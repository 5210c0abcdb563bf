package trialrun

import (
	"testing"

	"github.com/soma-hpc/soma/study"
)

// A trial's log line leaves an absent conditional knob out (it printed
// "opt=adam,mom=" as if mom's value were empty).
func TestShortPointAbsent(t *testing.T) {
	tests := []struct {
		kvs  []study.KV
		want string
	}{
		{[]study.KV{{Name: "opt", Text: "adam"}, {Name: "mom", Absent: true}}, "opt=adam"},
		{[]study.KV{{Name: "mom", Absent: true}, {Name: "opt", Text: "adam"}}, "opt=adam"},
		{[]study.KV{{Name: "opt", Text: "sgd"}, {Name: "mom", Text: "0.20731234"}}, "opt=sgd,mom=0.2073"},
	}
	for _, tc := range tests {
		if got := shortPoint(tc.kvs); got != tc.want {
			t.Errorf("shortPoint(%+v) = %q, want %q", tc.kvs, got, tc.want)
		}
	}
}
