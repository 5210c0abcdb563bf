package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// Array is an sbatch --array specification: index ranges and an optional
// throttle, as in "0-63%16" (64 tasks, at most 16 running at once),
// "1,3,5-9" or "0-30:10" (0, 10, 20, 30).
type Array struct {
	Ranges   []Range
	Throttle int // at most this many tasks run at once; 0 means no limit
}

// Range is one comma-separated element of an Array: the indices First,
// First+Step, ... up to Last. A single index has First == Last and Step 1.
type Range struct {
	First, Last, Step int
}

// ParseArray parses an sbatch --array value. It accepts exactly what
// sbatch(1) documents: comma-separated indices or ranges "N-M" with an
// optional ":STEP", then an optional "%THROTTLE"; indices go from 0 to
// 4000000 (the largest MaxArraySize allows). Whether the cluster's
// MaxArraySize admits the largest index is for sbatch to say.
func ParseArray(s string) (Array, error) {
	fail := func(why string) (Array, error) {
		return Array{}, fmt.Errorf("slurm: array %q: %s (want indices like 0-63%%16, 1,3,5-9 or 0-30:10)", s, why)
	}
	if s == "" {
		return fail("empty")
	}
	var a Array
	list, throttle, hasThrottle := strings.Cut(s, "%")
	if hasThrottle {
		n, err := parseUint(throttle, maxArrayIndex+1)
		if err != nil {
			return fail(fmt.Sprintf("throttle %q is not a number", throttle))
		}
		if n == 0 {
			return fail("throttle %0 would run nothing (use at least %1, or leave it out)")
		}
		a.Throttle = int(n)
	}
	for _, item := range strings.Split(list, ",") {
		if item == "" {
			return fail("empty element")
		}
		span, step, hasStep := strings.Cut(item, ":")
		first, last, isRange := strings.Cut(span, "-")
		if !isRange {
			last = first
		}
		f, err := parseUint(first, maxArrayIndex)
		if err != nil {
			return fail(fmt.Sprintf("index %q is not a number from 0 to %d", first, maxArrayIndex))
		}
		l, err := parseUint(last, maxArrayIndex)
		if err != nil {
			return fail(fmt.Sprintf("index %q is not a number from 0 to %d", last, maxArrayIndex))
		}
		if l < f {
			return fail(fmt.Sprintf("range %s runs backwards (write %s-%s)", span, last, first))
		}
		r := Range{First: int(f), Last: int(l), Step: 1}
		if hasStep {
			if !isRange {
				return fail(fmt.Sprintf("step in %q needs a range (N-M:STEP)", item))
			}
			st, err := parseUint(step, maxArrayIndex+1)
			if err != nil || st == 0 {
				return fail(fmt.Sprintf("step %q is not a positive number", step))
			}
			if l > f {
				r.Step = int(st) // a single index keeps step 1, as String writes it
			}
		}
		a.Ranges = append(a.Ranges, r)
	}
	return a, nil
}

// String returns the canonical --array value: for an Array from
// ParseArray, ParseArray(a.String()) returns an equal Array.
func (a Array) String() string {
	var b strings.Builder
	for i, r := range a.Ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r.First))
		if r.Last != r.First {
			b.WriteString("-" + strconv.Itoa(r.Last))
			if r.Step != 1 {
				b.WriteString(":" + strconv.Itoa(r.Step))
			}
		}
	}
	if a.Throttle > 0 {
		b.WriteString("%" + strconv.Itoa(a.Throttle))
	}
	return b.String()
}

// Len returns the number of distinct task indices: the number of array
// tasks sbatch creates. Overlapping ranges count an index once, as Slurm
// does.
func (a Array) Len() int {
	top := 0
	for _, r := range a.Ranges {
		top = max(top, r.Last)
	}
	seen := make([]uint64, top/64+1)
	n := 0
	for _, r := range a.Ranges {
		step := max(r.Step, 1)
		for i := max(r.First, 0); i <= r.Last; i += step {
			if seen[i/64]&(1<<(i%64)) == 0 {
				seen[i/64] |= 1 << (i % 64)
				n++
			}
		}
	}
	return n
}
