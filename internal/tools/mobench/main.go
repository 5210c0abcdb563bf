// Command mobench measures soma's multi-objective samplers (tpe, which is
// MOTPE with several objectives, and nsga2) on problems with two
// objectives and prints a markdown table of median hypervolumes next to
// Optuna's. It is a benchmark of search quality, not a test; run it with
// scripts/bench-mo.sh.
//
// Problems (both objectives minimised), as in scripts/bench_mo.py:
//
//	zdt1, zdt2     Zitzler, Deb & Thiele 2000, 30 variables on [0, 1];
//	               reference point (1.1, 11)
//	hartmann6x2    f1 = hartmann6(x), f2 = hartmann6(1 − x), 6 variables;
//	               reference point (0, 0)
//
// The hypervolume is that of every trial's scores (study.Hypervolume).
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/soma-hpc/soma/internal/tools/benchfn"
	"github.com/soma-hpc/soma/study"
)

func zdt(x []float64, two bool) []float64 {
	g := 0.0
	for _, v := range x[1:] {
		g += v
	}
	g = 1 + 9*g/float64(len(x)-1)
	r := x[0] / g
	if two {
		return []float64{x[0], g * (1 - r*r)}
	}
	return []float64{x[0], g * (1 - math.Sqrt(r))}
}

type problem struct {
	name string
	n    int
	f    func([]float64) []float64
	ref  []float64
}

func problems() []problem {
	return []problem{
		{"zdt1", 30, func(x []float64) []float64 { return zdt(x, false) }, []float64{1.1, 11}},
		{"zdt2", 30, func(x []float64) []float64 { return zdt(x, true) }, []float64{1.1, 11}},
		{"hartmann6x2", 6, func(x []float64) []float64 {
			y := make([]float64, len(x))
			for i, v := range x {
				y[i] = 1 - v
			}
			return []float64{benchfn.Hartmann6(x), benchfn.Hartmann6(y)}
		}, []float64{0, 0}},
	}
}

func run(p problem, sampler string, seed uint64, trials int) (float64, error) {
	var params []string
	for i := range p.n {
		params = append(params, fmt.Sprintf("x%d=float:0:1", i))
	}
	// The space only: flags have no several-objectives form.
	spec, err := study.SpecFromFlags(params, "", "random", "", trials, seed)
	if err != nil {
		return 0, err
	}
	dirs := []study.Direction{study.Minimize, study.Minimize}
	var s study.Sampler
	switch sampler {
	case "nsga2":
		s = study.NewNSGA2Sampler(seed, dirs)
	case "motpe":
		s = study.NewTPESampler(seed, study.TPEOptions{Directions: dirs})
	default:
		if s, err = spec.NewSampler(); err != nil {
			return 0, err
		}
	}
	h := study.History{}
	var pts [][]float64
	x := make([]float64, p.n)
	for t := range trials {
		pt, err := s.Ask(spec.Space, t, h)
		if err != nil {
			return 0, err
		}
		for i, kv := range spec.Space.Values(pt) {
			fmt.Sscan(kv.Text, &x[i])
		}
		sc := p.f(x)
		pts = append(pts, sc)
		h.Trials = append(h.Trials, study.Trial{Number: t, State: study.StateDone, Point: pt, Score: sc[0], HasScore: true, Scores: sc, LastStep: -1})
	}
	return study.Hypervolume(pts, dirs, p.ref), nil
}

// optunaResult is one line of scripts/bench_mo.py.
type optunaResult struct {
	Func    string  `json:"func"`
	Sampler string  `json:"sampler"`
	HV      float64 `json:"hv"`
}

// peer is the median of the peer's results, with their count when it
// ran fewer seeds than soma (Optuna's MOTPE is slow: MOTPE_SEEDS).
func peer(hvs []float64, seeds int) string {
	m := benchfn.Format("%.4f", benchfn.Median(hvs))
	if len(hvs) > 0 && len(hvs) != seeds {
		m += fmt.Sprintf(" (%d seeds)", len(hvs))
	}
	return m
}

func main() {
	seeds := flag.Int("seeds", 20, "seeds (0..seeds-1)")
	trials := flag.Int("trials", 200, "trials per run")
	optunaFile := flag.String("optuna", "", "JSON lines from scripts/bench_mo.py")
	flag.Parse()
	opt := map[string][]float64{}
	if err := benchfn.ReadLines(*optunaFile, func(r optunaResult) { opt[r.Func+"/"+r.Sampler] = append(opt[r.Func+"/"+r.Sampler], r.HV) }); err != nil {
		fmt.Fprintf(os.Stderr, "mobench: %v\n", err)
		os.Exit(1)
	}
	start := time.Now()
	fmt.Printf("two objectives, %d trials, seeds 0..%d: median hypervolume of all trials (higher is better)\n\n", *trials, *seeds-1)
	fmt.Println("| problem | soma tpe (MOTPE) | soma nsga2 | soma random | Optuna 3.1 NSGAIISampler | Optuna 3.1 MOTPE |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, p := range problems() {
		med := map[string]float64{}
		for _, sm := range []string{"motpe", "nsga2", "random"} {
			var hvs []float64
			for seed := range *seeds {
				hv, err := run(p, sm, uint64(seed), *trials)
				if err != nil {
					fmt.Fprintln(os.Stderr, "mobench:", err)
					os.Exit(1)
				}
				hvs = append(hvs, hv)
			}
			med[sm] = benchfn.Median(hvs)
		}
		fmt.Printf("| %s | %.4f | %.4f | %.4f | %s | %s |\n", p.name, med["motpe"], med["nsga2"], med["random"],
			peer(opt[p.name+"/nsga2"], *seeds), peer(opt[p.name+"/motpe"], *seeds))
	}
	fmt.Fprintf(os.Stderr, "soma side took %v\n", time.Since(start).Round(time.Millisecond))
}
