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
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soma-hpc/soma/study"
)

type testFunc struct {
	name    string
	low     []float64
	high    []float64
	f       func(x []float64) float64
	optimum float64
}

func branin(x []float64) float64 {
	b, c, r, t := 5.1/(4*math.Pi*math.Pi), 5/math.Pi, 6.0, 1/(8*math.Pi)
	d := x[1] - b*x[0]*x[0] + c*x[0] - r
	return d*d + 10*(1-t)*math.Cos(x[0]) + 10
}

var (
	hartA = [4][6]float64{{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}}
	hartP = [4][6]float64{{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
		{2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}}
	hartAlpha = [4]float64{1, 1.2, 3, 3.2}
)

func hartmann6(x []float64) float64 {
	s := 0.0
	for i := range 4 {
		e := 0.0
		for j := range 6 {
			d := x[j] - 1e-4*hartP[i][j]
			e += hartA[i][j] * d * d
		}
		s += hartAlpha[i] * math.Exp(-e)
	}
	return -s
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
		{"branin", []float64{-5, 0}, []float64{10, 15}, branin, 5 / (4 * math.Pi)},
		{"hartmann6", rep(0, 6), rep(1, 6), hartmann6, -3.32237},
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

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func main() {
	seeds := flag.Int("seeds", 10, "seeds per row (0..seeds-1)")
	trials := flag.Int("trials", 100, "trials per run")
	sampler := flag.String("sampler", "tpe", "soma sampler (as --sampler)")
	optunaFile := flag.String("optuna", "", "JSON lines from scripts/bench_samplers.py")
	only := flag.String("funcs", "", "comma-separated functions to run (default all)")
	flag.Parse()

	opt := map[string][]float64{}
	if *optunaFile != "" {
		f, err := os.Open(*optunaFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r optunaResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				fmt.Fprintf(os.Stderr, "samplerbench: %s: %v\n", *optunaFile, err)
				os.Exit(1)
			}
			opt[r.Func+"/"+r.Mode] = append(opt[r.Func+"/"+r.Mode], r.Best)
		}
		f.Close()
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
			m := median(bests)
			med["soma/"+mode.name] = m
			om := median(opt[tf.name+"/"+mode.name])
			med["optuna/"+mode.name] = om
			fmt.Printf("| %s | %s | %.4f | %s | %.4f |\n", tf.name, mode.name, m, fmtNaN("%.4f", om), tf.optimum)
		}
		pens = append(pens, pen{tf.name,
			fmt.Sprintf("%+.4f", med["soma/parallel4"]-med["soma/sequential"]),
			fmtNaN("%+.4f", med["optuna/parallel4"]-med["optuna/sequential"])})
	}
	fmt.Println()
	fmt.Println("| function | soma parallel penalty | optuna parallel penalty |")
	fmt.Println("|---|---:|---:|")
	for _, p := range pens {
		fmt.Printf("| %s | %s | %s |\n", p.name, p.soma, p.optuna)
	}
	fmt.Fprintf(os.Stderr, "soma side took %v\n", time.Since(start).Round(time.Millisecond))
}

// fmtNaN formats x, or "n/a" when there is no Optuna result.
func fmtNaN(format string, x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf(format, x)
}
