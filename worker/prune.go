package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// DefaultPruneAge is how long a worker must have been silent before
// PruneWorkers removes it, unless told otherwise: long past any heartbeat
// timeout, short enough that a day of Slurm jobs (each of whose workers
// registers under a new id when its port is chosen at random) does not
// pile up in soma workers.
const DefaultPruneAge = time.Hour

// PruneOptions says what PruneWorkers removes.
type PruneOptions struct {
	// OlderThan: a worker whose last heartbeat is older than this (in
	// the file server's time) is removed with its leases. It must be at
	// least the heartbeat timeout (Timeout), so that a live worker is
	// never removed; zero means DefaultPruneAge.
	OlderThan time.Duration
	// Timeout is the workers' heartbeat timeout (zero:
	// DefaultHeartbeatTimeout).
	Timeout time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
}

// PrunedWorker is one worker record PruneWorkers removed (or would).
type PrunedWorker struct {
	ID            string    `json:"id"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	AgeSeconds    float64   `json:"age_s"`
}

// PruneReport is what PruneWorkers removed (or, with DryRun, would).
type PruneReport struct {
	ServerTime time.Time      `json:"server_time"`
	OlderThanS float64        `json:"older_than_s"`
	DryRun     bool           `json:"dry_run"`
	Workers    []PrunedWorker `json:"workers"`
	// Leases are the lease names (and their end markers) of workers that
	// have no record left, untouched for OlderThan.
	Leases []string `json:"leases"`
	// Kept counts the worker records left in place.
	Kept int `json:"kept"`
}

// ErrPruneAge is a PruneOptions.OlderThan shorter than the heartbeat
// timeout: it could remove a live worker.
var ErrPruneAge = errors.New("worker: prune age below the heartbeat timeout")

// PruneWorkers removes the records of workers silent for longer than
// opts.OlderThan, and the leases (with their end markers) of workers
// that have no record left and that nobody has touched for as long. A
// dead worker's record otherwise stays forever (soma workers lists it as
// dead), and so do the leases of a worker that died with plans placed
// on it, and the end markers a killed releaser leaves.
//
// Why it is safe beside running placers and workers: a record that old
// belongs to a worker that is not heartbeating, and a worker that comes
// back binds its record again at its next heartbeat (Registration.
// Heartbeat); a lease that old is held by nobody (its holder renews it
// every HeartbeatInterval, and a placer reclaims it anyway once it is
// older than the timeout), and markers are ended the same way (see
// lease.go). Every removal is one Unbind; a name already gone is not an
// error.
func PruneWorkers(ctx context.Context, store *fsstore.Store, opts PruneOptions) (PruneReport, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	age := opts.OlderThan
	if age == 0 {
		age = DefaultPruneAge
	}
	if age < timeout {
		return PruneReport{}, fmt.Errorf("%w: %s is shorter than the heartbeat timeout %s (a live worker could be removed)", ErrPruneAge, age, timeout)
	}
	now, err := store.Now(ctx)
	if err != nil {
		return PruneReport{}, fmt.Errorf("worker: prune: %w", err)
	}
	rep := PruneReport{ServerTime: now, OlderThanS: age.Seconds(), DryRun: opts.DryRun, Workers: []PrunedWorker{}, Leases: []string{}}
	unbind := func(name string) error {
		if opts.DryRun {
			return nil
		}
		if err := store.Unbind(ctx, name); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
			return fmt.Errorf("worker: prune: %w", err)
		}
		return nil
	}
	bound, _, err := store.Scan(ctx, workersPrefix)
	if err != nil {
		return PruneReport{}, fmt.Errorf("worker: prune: %w", err)
	}
	// Workers that keep a record: their leases are theirs to manage.
	kept := map[string]bool{}
	for _, b := range bound {
		id := strings.TrimPrefix(b.Name, workersPrefix+"/")
		if now.Sub(b.Time) <= age {
			kept[id] = true
			rep.Kept++
			continue
		}
		if err := unbind(b.Name); err != nil {
			return rep, err
		}
		rep.Workers = append(rep.Workers, PrunedWorker{ID: id, LastHeartbeat: b.Time, AgeSeconds: now.Sub(b.Time).Seconds()})
	}
	leases, _, err := store.Scan(ctx, leasesPrefix)
	if err != nil {
		return rep, fmt.Errorf("worker: prune: %w", err)
	}
	for _, b := range leases {
		id, _, _ := strings.Cut(strings.TrimPrefix(b.Name, leasesPrefix+"/"), "/")
		if kept[id] || now.Sub(b.Time) <= age {
			continue
		}
		if err := unbind(b.Name); err != nil {
			return rep, err
		}
		rep.Leases = append(rep.Leases, b.Name)
	}
	return rep, nil
}
