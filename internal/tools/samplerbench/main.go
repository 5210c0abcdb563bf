// Command samplerbench measures soma's samplers on standard test functions
// and prints a markdown table next to Optuna's results. It is a benchmark
// of search quality, not a test; run it with scripts/bench-samplers.sh.
//
// Each run minimises a function for -trials trials with one seed, either
// sequentially or as 4 simulated workers: trial t is asked while trials
// t-3, t-2 and t-1 are running (their points are in the history as
// StateRunning, their scores are not), as if 4 machines took equally long
// per trial. The Python side (scripts/bench_samplers.py) simulates the
// same with Optuna's ask/tell.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soma-hpc/soma/internal/tools/benchfn"
	"github.com/soma-hpc/soma/study"
)

type testFunc struct {
	name    string
	low     []float64
	high    []float64
	f       func(x []float64) float64
	optimum float64
}

func styblinskiTang(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v*v*v*v - 16*v*v + 5*v
	}
	return s / 2
}

func funcs() []testFunc {
	rep := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	return []testFunc{
		{"branin", []float64{-5, 0}, []float64{10, 15}, func(x []float64) float64 { return benchfn.Branin(x[0], x[1]) }, benchfn.BraninMin},
		{"hartmann6", rep(0, 6), rep(1, 6), benchfn.Hartmann6, -3.32237},
		{"styblinski_tang10", rep(-5, 10), rep(5, 10), styblinskiTang, -39.166166 * 10},
	}
}

// run minimises tf with sampler and returns the best value found.
func run(tf testFunc, sampler string, seed uint64, trials, workers int) (float64, error) {
	var params []string
	for i := range tf.low {
		params = append(params, fmt.Sprintf("x%d=float:%v:%v", i, tf.low[i], tf.high[i]))
	}
	spec, err := study.SpecFromFlags(params, "minimize", sampler, "", trials, seed)
	if err != nil {
		return 0, err
	}
	s, err := spec.NewSampler()
	if err != nil {
		return 0, err
	}
	h := study.History{Direction: study.Minimize}
	best := math.Inf(1)
	x := make([]float64, len(tf.low))
	for t := range trials {
		// Trials before t-workers+1 have finished; the rest are running.
		for i := range h.Trials {
			if h.Trials[i].Number <= t-workers && h.Trials[i].State == study.StateRunning {
				h.Trials[i].State = study.StateDone
				h.Trials[i].HasScore = true
			}
		}
		p, err := s.Ask(spec.Space, t, h)
		if err != nil {
			return 0, err
		}
		for i, kv := range spec.Space.Values(p) {
			if x[i], err = strconv.ParseFloat(kv.Text, 64); err != nil {
				return 0, err
			}
		}
		v := tf.f(x)
		best = min(best, v)
		h.Trials = append(h.Trials, study.Trial{Number: t, State: study.StateRunning, Point: p, Score: v, LastStep: -1})
	}
	return best, nil
}

type optunaResult struct {
	Func string  `json:"func"`
	Mode string  `json:"mode"`
	Seed int     `json:"seed"`
	Best float64 `json:"best"`
}

func main() {
	seeds := flag.Int("seeds", 10, "seeds per row (0..seeds-1)")
	trials := flag.Int("trials", 100, "trials per run")
	sampler := flag.String("sampler", "tpe", "soma sampler (as --sampler)")
	optunaFile := flag.String("optuna", "", "JSON lines from scripts/bench_samplers.py")
	only := flag.String("funcs", "", "comma-separated functions to run (default all)")
	flag.Parse()

	opt := map[string][]float64{}
	if err := benchfn.ReadLines(*optunaFile, func(r optunaResult) { opt[r.Func+"/"+r.Mode] = append(opt[r.Func+"/"+r.Mode], r.Best) }); err != nil {
		fmt.Fprintf(os.Stderr, "samplerbench: %v\n", err)
		os.Exit(1)
	}
	start := time.Now()
	fmt.Printf("soma sampler %s vs Optuna %s TPESampler; %d trials, seeds 0..%d; median best value (lower is better)\n\n",
		*sampler, "3.1", *trials, *seeds-1)
	fmt.Println("| function | mode | soma median best | optuna median best | optimum |")
	fmt.Println("|---|---|---:|---:|---:|")
	type pen struct{ name, soma, optuna string }
	var pens []pen
	for _, tf := range funcs() {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), tf.name) {
			continue
		}
		med := map[string]float64{}
		for _, mode := range []struct {
			name    string
			workers int
		}{{"sequential", 1}, {"parallel4", 4}} {
			var bests []float64
			for seed := range *seeds {
				b, err := run(tf, *sampler, uint64(seed), *trials, mode.workers)
				if err != nil {
					fmt.Fprintln(os.Stderr, "samplerbench:", err)
					os.Exit(1)
				}
				bests = append(bests, b)
			}
			m := benchfn.Median(bests)
			med["soma/"+mode.name] = m
			om := benchfn.Median(opt[tf.name+"/"+mode.name])
			med["optuna/"+mode.name] = om
			fmt.Printf("| %s | %s | %.4f | %s | %.4f |\n", tf.name, mode.name, m, benchfn.Format("%.4f", om), tf.optimum)
		}
		pens = append(pens, pen{tf.name,
			fmt.Sprintf("%+.4f", med["soma/parallel4"]-med["soma/sequential"]),
			benchfn.Format("%+.4f", med["optuna/parallel4"]-med["optuna/sequential"])})
	}
	fmt.Println()
	fmt.Println("| function | soma parallel penalty | optuna parallel penalty |")
	fmt.Println("|---|---:|---:|")
	for _, p := range pens {
		fmt.Printf("| %s | %s | %s |\n", p.name, p.soma, p.optuna)
	}
	fmt.Fprintf(os.Stderr, "soma side took %v\n", time.Since(start).Round(time.Millisecond))
}
