package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/zarr"
)

func newZarrCommand() *cli.Command {
	return &cli.Command{
		Name:  "zarr",
		Usage: "look into Zarr arrays (v2 and v3): their metadata, and rows as text",
		Subcommands: []*cli.Command{
			{
				Name:      "info",
				Usage:     "print an array's shape, chunks, data type, codecs and attributes",
				UsageText: "soma zarr info PATH",
				Description: `PATH is the array's folder (holding zarr.json for v3, .zarray for v2).
It also reads the first stored chunk: a codec or compressed frame soma
cannot decode is named here, with exit status 1, before any read fails.

EXAMPLES:
   soma zarr info /scratch/data/train.zarr`,
				Action: func(c *cli.Context) error {
					path, err := zarrPath(c)
					if err != nil {
						return err
					}
					a, err := zarr.Open(c.Context, path, zarr.Options{})
					if err != nil {
						return err // an unknown codec is named here
					}
					if err := a.Info().WriteText(c.App.Writer); err != nil {
						return err
					}
					// Decode one stored chunk, so that a frame soma cannot
					// decode (say, blosc2's) is named now, not by a later read.
					key, err := a.CheckDecode(c.Context)
					switch {
					case err != nil:
						return fmt.Errorf("%w (soma cannot read this array's data)", err)
					case key == "":
						fmt.Fprintf(c.App.Writer, "%-18s %s\n", "decodes:", "no chunk stored to try")
					default:
						fmt.Fprintf(c.App.Writer, "%-18s %s\n", "decodes:", "yes (chunk "+key+" read)")
					}
					return nil
				},
			},
			{
				Name:      "cat",
				Usage:     "print rows of an array as text, reading only the chunks that cover them",
				UsageText: "soma zarr cat PATH [--rows A:B] [--cache DIR] [--cache-size SIZE] [--no-cache]",
				Description: `Rows are a Python-style range over the first dimension: A:B is rows
[A, B); A: runs to the end; :B starts at 0; A is one row; negative numbers
count from the end (-10: is the last ten rows). By default chunks are read
through the node-local chunk cache ($SOMA_ZARR_CACHE, else Slurm's
$SLURM_TMPDIR, else $TMPDIR), so a second read of the same rows costs no
shared-filesystem read. The cache holds at most --cache-size bytes on disk
($SOMA_ZARR_CACHE_SIZE; default 8G), evicting the least recently used
chunks; the processes sharing it on a node keep to that bound together.

EXAMPLES:
   soma zarr cat /scratch/data/train.zarr --rows 120000:121000
   soma zarr cat train.zarr --rows -5:`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "rows", Value: "0:10", Usage: "the row range `A:B`"},
					&cli.StringFlag{Name: "cache", Usage: "the chunk cache `DIR` (default: node-local scratch)"},
					&cli.StringFlag{Name: "cache-size", EnvVars: []string{"SOMA_ZARR_CACHE_SIZE"}, Usage: "the chunk cache's limit, `SIZE` bytes on disk (K, M, G, T: powers of 1024)", DefaultText: "8G"},
					&cli.BoolFlag{Name: "no-cache", Usage: "read the array directly"},
				},
				Action: func(c *cli.Context) error {
					path, err := zarrPath(c)
					if err != nil {
						return err
					}
					opts := zarr.Options{}
					if !c.Bool("no-cache") {
						dir := c.String("cache")
						if dir == "" {
							dir = zarr.DefaultCacheDir()
						}
						var copts zarr.CacheOptions
						if v := c.String("cache-size"); v != "" {
							if copts.MaxBytes, err = zarr.ParseCacheSize(v); err != nil {
								return usageError{err}
							}
						}
						cache, err := zarr.OpenCache(dir, copts)
						if err != nil {
							return fmt.Errorf("%w (or read without it: --no-cache)", err)
						}
						defer cache.Close()
						opts.Cache = cache
					}
					a, err := zarr.Open(c.Context, path, opts)
					if err != nil {
						return err
					}
					shape := a.Shape()
					if len(shape) == 0 {
						return fmt.Errorf("zarr: %s is a scalar array; use soma zarr info", path)
					}
					start, stop, err := zarr.ParseRowRange(c.String("rows"), shape[0])
					if err != nil {
						return usageError{err}
					}
					d, err := a.ReadRows(c.Context, start, stop)
					if err != nil {
						return err
					}
					return d.WriteText(c.App.Writer)
				},
			},
		},
	}
}

func zarrPath(c *cli.Context) (string, error) {
	switch c.NArg() {
	case 0:
		return "", usagef("no PATH: give the array's folder, e.g. soma zarr %s data/train.zarr", c.Command.Name)
	case 1:
		return c.Args().First(), nil
	}
	return "", usagef("too many arguments: %q", c.Args().Tail())
}
