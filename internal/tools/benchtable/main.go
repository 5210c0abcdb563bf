// Command benchtable reads `go test -bench` output on stdin and prints the
// benchmarks side by side: each benchmark named ".../<variant>" becomes a
// row keyed by the rest of its name, with one column per variant (soma,
// raw, peer...) and the ratio of soma's time to the first other variant.
// Lines that are not benchmark results are passed through to stderr.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var line = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)$`)

type result struct {
	nsPerOp float64
	extra   string // MB/s or custom metric
}

func main() {
	rows := map[string]map[string]result{}
	var order []string
	variants := map[string]bool{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			fmt.Fprintln(os.Stderr, sc.Text())
			continue
		}
		name := m[1]
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			continue
		}
		key, variant := name[:i], name[i+1:]
		ns, _ := strconv.ParseFloat(m[3], 64)
		if rows[key] == nil {
			rows[key] = map[string]result{}
			order = append(order, key)
		}
		rows[key][variant] = result{ns, metric(m[4])}
		variants[variant] = true
	}
	cols := []string{"soma"}
	var others []string
	for v := range variants {
		if v != "soma" {
			others = append(others, v)
		}
	}
	slices.Sort(others)
	cols = append(cols, others...)
	fmt.Printf("| benchmark | %s | soma/%s time |\n", strings.Join(cols, " | "), firstOr(others, "-"))
	fmt.Printf("|---|%s---|\n", strings.Repeat("---|", len(cols)))
	for _, k := range order {
		r := rows[k]
		var cells []string
		for _, c := range cols {
			if v, ok := r[c]; ok {
				cells = append(cells, format(v))
			} else {
				cells = append(cells, "")
			}
		}
		ratio := ""
		for _, o := range others {
			if base, ok := r[o]; ok {
				if s, ok := r["soma"]; ok {
					ratio = fmt.Sprintf("%.2fx", s.nsPerOp/base.nsPerOp)
				}
				break
			}
		}
		fmt.Printf("| %s | %s | %s |\n", k, strings.Join(cells, " | "), ratio)
	}
}

func firstOr(s []string, d string) string {
	if len(s) == 0 {
		return d
	}
	return s[0]
}

var metricRe = regexp.MustCompile(`([\d.]+) (MB/s|[a-z_/]+/s)`)

func metric(rest string) string {
	if m := metricRe.FindStringSubmatch(rest); m != nil {
		return m[1] + " " + m[2]
	}
	return ""
}

func format(r result) string {
	per := fmt.Sprintf("%.0f/s", 1e9/r.nsPerOp)
	if r.nsPerOp > 1e8 {
		per = fmt.Sprintf("%.3f s", r.nsPerOp/1e9)
	}
	if r.extra != "" {
		return r.extra + " (" + per + ")"
	}
	return per
}
