// Command synthstudy writes a large synthetic study into a store, for
// benchmarks (scripts/bench-status.sh): go run ./internal/tools/synth/synthstudy
// -root DIR -n 100000 [-pack].
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/tools/synth"
	"github.com/soma-hpc/soma/study"
)

func main() {
	root := flag.String("root", "", "the store folder (created)")
	name := flag.String("study", "bench", "the study's name")
	n := flag.Int("n", 1000, "number of ended trials")
	pack := flag.Bool("pack", false, "pack the ended trials afterwards (as soma gc does)")
	flag.Parse()
	if *root == "" {
		fmt.Fprintln(os.Stderr, "synthstudy: -root is required")
		os.Exit(2)
	}
	if err := run(context.Background(), *root, *name, *n, *pack); err != nil {
		fmt.Fprintf(os.Stderr, "synthstudy: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, name string, n int, pack bool) error {
	t0 := time.Now()
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		return err
	}
	st, err := synth.Study(ctx, s, name, n, synth.Options{Workers: synth.DefaultWorkers()})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "synthstudy: %d trials in %s (%s)\n", n, root, time.Since(t0).Round(time.Millisecond))
	if pack {
		t1 := time.Now()
		rep, err := st.Pack(ctx, study.PackOptions{})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "synthstudy: packed %d trials, %d packs (%s)\n", rep.Packed, rep.Packs, time.Since(t1).Round(time.Millisecond))
	}
	return nil
}
