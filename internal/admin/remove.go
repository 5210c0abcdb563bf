package admin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/s3store"
	"github.com/soma-hpc/soma/study"
)

// ErrRunning: soma rm refuses a study whose trials are running.
var ErrRunning = errors.New("admin: trials are running")

// RemoveOptions configure Remove.
type RemoveOptions struct {
	// Force removes the study even while trials run (their runners then
	// fail at their next write, or write a last record back: stop them
	// first), and a study's leftovers without a spec record.
	Force bool
	// DryRun says what would be removed and removes nothing.
	DryRun bool
	// Local is, for a bucket, the folder that holds the files soma-trial
	// wrote beside it (its --local: logs/ and work/); empty: none. A
	// folder store holds them itself, and Local is not used.
	Local string
}

// RemovePart is one thing Remove removes.
type RemovePart struct {
	Path  string // absolute, or s3://bucket/prefix/names/study/NAME
	What  string // "records", "logs", "work folders"
	Files int
	Bytes int64
}

// RemoveReport says what Remove found, and removed unless DryRun or
// refused.
type RemoveReport struct {
	Root, Study string
	Parts       []RemovePart
	// Trials counts the study's trials; Running lists those running now
	// (a heartbeat within the lease), with who runs them.
	Trials  int
	Running []study.Record
	NoSpec  bool // records without a spec record (a fork that died midway)
	Removed bool
}

// Remove removes study name from the store s, a folder or a bucket: its
// records (spec, versions, queue, trials, packs), and the files beside
// them: its logs (logs/<name>), its Slurm scripts and logs (slurm/<name>)
// and its work folders (work/<name>), in the root folder, or for a
// bucket in opts.Local. Other studies are not touched; blobs stay until
// soma gc finds nothing refers to them. It refuses, with ErrRunning and
// the report, while any trial is running, unless Force. The spec record
// goes first, so that no runner joins the study while the rest goes.
func Remove(ctx context.Context, s Store, name string, opts RemoveOptions) (RemoveReport, error) {
	rep := RemoveReport{Study: name}
	if err := study.ValidateName(name); err != nil {
		return rep, err
	}
	rep.Root = s.Root()
	beside := rep.Root // the folder of logs/, slurm/ and work/
	recsPath := filepath.Join(rep.Root, "names", "study", name)
	if s3store.IsRoot(rep.Root) {
		beside = opts.Local
		recsPath = rep.Root + "/names/study/" + name
	}
	prefix := "study/" + name
	recs, err := s.List(ctx, prefix)
	if err != nil {
		return rep, err
	}
	st, err := study.Open(ctx, s, name, nil, study.Options{})
	switch {
	case errors.Is(err, study.ErrNoStudy):
		rep.NoSpec = true
	case err != nil:
		return rep, err
	default:
		snap, err := st.Trials(ctx)
		if err != nil {
			return rep, err
		}
		rep.Trials = len(snap.Trials)
		for _, r := range snap.Trials {
			if r.State == study.StateRunning {
				rep.Running = append(rep.Running, r)
			}
		}
	}
	if len(recs) > 0 {
		rep.Parts = append(rep.Parts, RemovePart{Path: recsPath, What: "records", Files: len(recs)})
	}
	for _, d := range []struct{ dir, what string }{{"logs", "logs"}, {"slurm", "slurm files"}, {"work", "work folders"}} {
		if beside == "" {
			break
		}
		p, err := filepath.Abs(filepath.Join(beside, d.dir, name))
		if err != nil {
			return rep, err
		}
		files, bytes, err := du(p)
		if err != nil {
			return rep, err
		}
		if files >= 0 {
			rep.Parts = append(rep.Parts, RemovePart{Path: p, What: d.what, Files: files, Bytes: bytes})
		}
	}
	if rep.NoSpec && len(rep.Parts) == 0 {
		return rep, fmt.Errorf("%w: %q in %s (soma status ROOT lists the studies)", study.ErrNoStudy, name, rep.Root)
	}
	if rep.NoSpec && !opts.Force && !opts.DryRun {
		return rep, fmt.Errorf("admin: %q has files but no study record (a fork or creation that died midway?): remove them with --force", name)
	}
	if len(rep.Running) > 0 && !opts.Force {
		return rep, fmt.Errorf("%w: study %s has %d running trials (stop them first: scancel the array job; or remove anyway with --force)", ErrRunning, name, len(rep.Running))
	}
	if opts.DryRun {
		return rep, nil
	}
	if !rep.NoSpec {
		if err := s.Unbind(ctx, prefix+"/spec"); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
			return rep, err
		}
	}
	if err := s.RemoveTree(ctx, prefix); err != nil {
		return rep, err
	}
	if beside != "" {
		if err := removeFiles(beside, name); err != nil {
			return rep, err
		}
	}
	rep.Removed = true
	return rep, nil
}

// removeFiles removes logs/<name>, slurm/<name> and work/<name> under
// the folder files, through an os.Root: a link in them is removed, never
// followed out of it. A missing files folder has nothing to remove.
func removeFiles(files, name string) error {
	r, err := os.OpenRoot(files)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	for _, d := range []string{"logs", "slurm", "work"} {
		if err := r.RemoveAll(filepath.Join(d, name)); err != nil {
			return fmt.Errorf("admin: remove %s: %w", filepath.Join(files, d, name), err)
		}
	}
	return nil
}

// du counts the files and bytes under p without following links; -1
// files when p does not exist.
func du(p string) (files int, bytes int64, err error) {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return -1, 0, nil
	}
	err = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		files++
		if info, err := d.Info(); err == nil {
			bytes += info.Size()
		}
		return nil
	})
	return files, bytes, err
}
