package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/admin"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/study"
)

const gcDescription = `Tidies a store, safely while trials run:

  1. packs the records of ended trials (done, pruned, failed for good) of
     every study into a few immutable pack files, so that soma status and
     the samplers read a few files instead of one per trial (the trials'
     own records stay: nothing can run a packed trial again);
  2. removes temp files older than --older-than (left by writers that
     died between writing and publishing; never NFS's .nfsXXXX files;
     on a bucket, the time probes of processes that stopped);
  3. removes blobs nothing refers to and older than --older-than. It is
     conservative: a blob is kept if a name points at it, if any record
     or pack mentions its digest, or if it is young (storing bytes that
     are already stored makes their blob young again); and while any
     record in the store is corrupt or is a symbolic link, no blob is
     removed at all (it says which). --older-than must exceed the time
     a writer takes from storing a blob to recording it (soma-trial
     reuses a blob it stored for 10 s), so it is at least a minute, and
     on NFS more (listings lag): keep the default.

ROOT is a folder or a bucket (s3://bucket/prefix): the same steps, the
same output.

EXAMPLES:
   soma gc ROOT --dry-run         what would go (packs nothing, removes nothing)
   soma gc ROOT                   pack, then remove
   soma gc ROOT --keep-blobs      pack and remove temp files only`

func newGCCommand() *cli.Command {
	return &cli.Command{
		Name:        "gc",
		Usage:       "pack ended trials; remove stale temp files and unreferenced blobs",
		UsageText:   "soma gc ROOT [--dry-run] [--older-than D] [--keep-blobs] [--no-pack]",
		Description: gcDescription,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "say what would be removed; change nothing"},
			&cli.DurationFlag{Name: "older-than", Value: time.Hour, Usage: "keep temp files and blobs younger than this (file-server time)"},
			&cli.BoolFlag{Name: "keep-blobs", Usage: "do not collect blobs"},
			&cli.BoolFlag{Name: "no-pack", Usage: "do not pack ended trials"},
		},
		Action: func(c *cli.Context) error {
			root, err := rootArg(c, 0)
			if err != nil {
				return err
			}
			if c.Duration("older-than") < study.MinGCAge {
				return usagef("--older-than %s: want %s or more, such as 1h (a trial runner binds a blob up to %s after storing it)", c.Duration("older-than"), study.MinGCAge, study.BlobReuse)
			}
			s, err := status.Open(root)
			if err != nil {
				return err
			}
			defer s.Close()
			dry := c.Bool("dry-run")
			res, err := admin.GC(c.Context, s.Backend(), admin.GCOptions{
				DryRun:    dry,
				OlderThan: c.Duration("older-than"),
				KeepBlobs: c.Bool("keep-blobs"),
				NoPack:    c.Bool("no-pack"),
			})
			if err != nil {
				return err
			}
			w := c.App.Writer
			verb := "removed"
			if dry {
				verb = "would remove"
			}
			names := make([]string, 0, len(res.Packed))
			for n := range res.Packed {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				p := res.Packed[n]
				fmt.Fprintf(w, "study %s: packed %d ended trials, merged %d packs; %d packs now\n", n, p.Packed, p.Merged, p.Packs)
			}
			fmt.Fprintf(w, "temp files: %s %d (%s)\n", verb, res.TempFiles, bytesText(res.TempBytes))
			switch {
			case c.Bool("keep-blobs"):
				fmt.Fprintln(w, "blobs: kept (--keep-blobs)")
			case res.BlobsSkipped != "":
				fmt.Fprintf(c.App.ErrWriter, "soma: warning: no blob removed while %d records are unreadable (any of them might point at any blob); fix or remove them, then run soma gc again:\n", len(res.Corrupt))
				for i, p := range res.Corrupt {
					if i == 20 {
						fmt.Fprintf(c.App.ErrWriter, "  … %d more\n", len(res.Corrupt)-i)
						break
					}
					fmt.Fprintf(c.App.ErrWriter, "  %s\n", p)
				}
			default:
				fmt.Fprintf(w, "blobs: %s %d (%s); kept %d\n", verb, res.Blobs, bytesText(res.BlobBytes), res.BlobsKept)
			}
			return nil
		},
	}
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
