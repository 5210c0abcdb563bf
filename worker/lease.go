package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Leases: how a slot of a worker is taken, kept, released and reclaimed,
// with no lock and no server, by any number of placers on any number of
// machines sharing the folder.
//
// A lease and its end markers are claimed and unbound without fsyncs
// (fsstore.ClaimEphemeral, UnbindEphemeral): nothing here needs them to
// outlive a crash. A crash that loses one is the crash of every process
// that held it (a local disk) or of a file server, which NFS makes commit
// a link or an unlink before it replies; a lease whose record's bytes
// were lost reads as corrupt and is ended like a stale one. And a worker
// never runs more plans than its slots whatever the leases say.
//
// A lease is the name leases/<worker>/<slot>, bound by Claim (link(2)):
// exactly one claimer binds it. Its record's meta carries a nonce, new for
// every claim, that names this incarnation of the lease, and its mtime is
// the holder's last heartbeat (Touch). A lease whose mtime is older than
// the timeout (against the server's now, read before the record) is stale.
//
// The danger is in ending a lease. "See it stale, Unbind it, Claim it"
// lets two reclaimers that both saw the same stale incarnation N both
// win: the first unbinds N and claims M; the second, still acting on its
// read of N, unbinds M and claims its own. So the name is unbound only by
// whoever wins an end marker for that incarnation: leases/<w>/<slot>.end.
// <N>.<k>, claimed by link(2) like everything else. The holder releasing
// its lease and every reclaimer go through the same marker, so at most one
// of them ends N. The winner then reads the lease again and unbinds it
// only if it still carries nonce N; then it unbinds its marker.
//
// Why that is exact: the lease name leaves incarnation N only by an
// Unbind done by a winner of an end marker for N that has just read N
// there. While a marker is bound nobody else wins it, so nobody else can
// unbind N between that read and that Unbind. A marker is unbound (pruned)
// only after N has left the name, and nonces are never reused, so a late
// reclaimer that wins a pruned marker reads the name, finds another nonce
// or nothing, and unbinds nothing.
//
// The one window left is a process that wins marker k and then stops
// (SIGKILL, or a pause) before unbinding it: a marker older than the
// timeout is taken as abandoned and the next level k+1 is claimed. If the
// paused winner of level k wakes after a whole timeout between its read
// and its Unbind, both could unbind; that is the same assumption every
// lease makes (no process pauses for longer than the timeout between two
// system calls). A killed ender leaves its marker behind; it is never read
// again once its lease has moved on.
//
// A holder learns it lost a stale lease from its own heartbeats: a
// reclaimer needs now_r - m > timeout, where m is the last heartbeat and
// now_r was read before the record, so the holder's next Touch after the
// reclaim is later than now_r and more than a timeout after its previous
// Touch, which is m. A heartbeat gap longer than the timeout therefore
// means "maybe lost", and the holder stops (Placement.Lost).
//
// The holder's own release (releaseHeld) skips the end marker when its
// heartbeats vouch for it: it touches the lease, and if that Touch landed
// within the timeout of its last renewal that landed (and no gap was seen
// before), it reads the lease and unbinds it if it still carries its
// nonce. Why no reclaimer can be ending the same incarnation meanwhile:
// a reclaimer needs now_r - m > timeout for the mtime m it read; by the
// argument above, that puts a gap of more than the timeout between two
// of the holder's renewals that landed, the release Touch included, and
// the holder then takes the marker path like everyone else. Once the
// release Touch has landed, a reclaimer judging anew needs a whole
// timeout to pass before the holder's Unbind: the assumption every lease
// makes (no pause longer than the timeout between two system calls).
// That saves the marker's claim and unbind, three of the seven fsyncs of
// a placement and its release (issue 15: placed no-op plans ran at 0.34x
// of the same plans sent straight to known workers). A coordinator keeps
// no heartbeat history, so its /complete goes through the marker.

// Lease is one held placement slot. Its fields are what a coordinator
// hands to a client and takes back on /complete.
type Lease struct {
	Worker WorkerID `json:"worker"`
	Slot   int      `json:"slot"`
	// Nonce names this incarnation of the lease: only its holder knows
	// it, and renewing or releasing checks it.
	Nonce string `json:"nonce"`
}

// Name returns the lease's name in the store: leases/<worker>/<slot>.
func (l Lease) Name() string { return leaseName(l.Worker, l.Slot) }

func (l Lease) String() string { return l.Name() }

func leaseName(w WorkerID, slot int) string {
	return leasesPrefix + "/" + w.String() + "/" + strconv.Itoa(slot)
}

// ParseLeaseName splits leases/<worker>/<slot> into its worker and slot.
func ParseLeaseName(name string) (WorkerID, int, error) {
	id, slot, ok := parseLeaseName(name)
	if !ok {
		return WorkerID{}, 0, fmt.Errorf("worker: %q is not a lease name (leases/<worker>/<slot>)", name)
	}
	return id, slot, nil
}

func parseLeaseName(name string) (WorkerID, int, bool) {
	rest, ok := strings.CutPrefix(name, leasesPrefix+"/")
	if !ok {
		return WorkerID{}, 0, false
	}
	w, s, ok := strings.Cut(rest, "/")
	if !ok {
		return WorkerID{}, 0, false
	}
	id, err := ParseWorkerID(w)
	if err != nil {
		return WorkerID{}, 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return WorkerID{}, 0, false
	}
	return id, n, true
}

// Meta keys of a lease record.
const (
	leaseMetaVersion = "v"
	leaseMetaNonce   = "nonce"
	leaseMetaHolder  = "holder"
	leaseMetaGPUs    = "gpus"
	leaseMetaCPUs    = "cpus"
	leaseMetaMemory  = "memory"
)

// leaseBlob is the bytes every lease record points at: a lease says all
// it has to say in its meta, and a record needs a digest.
var leaseBlob = []byte("soma placement lease v1\n")

// ErrLeaseLost means a lease is no longer held by the caller: it was
// released, or reclaimed by another placer after it went stale.
var ErrLeaseLost = errors.New("worker: lease lost")

// leaseStore is what placement, the registry's listing and leases use of
// a store: *fsstore.Store, or a counting wrapper around one (the cost
// tests pin the file operations of a placement).
type leaseStore interface {
	Now(ctx context.Context) (time.Time, error)
	Scan(ctx context.Context, prefix string) ([]fsstore.Bound, []*fsstore.CorruptError, error)
	Put(ctx context.Context, b []byte) (fsstore.Digest, error)
	// Leases and their end markers are claimed and unbound without
	// fsyncs (fsstore.ClaimEphemeral says why that is safe for them).
	ClaimEphemeral(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error)
	Resolve(ctx context.Context, name string) (fsstore.Bound, error)
	UnbindEphemeral(ctx context.Context, name string) error
	Touch(ctx context.Context, name string) (time.Time, error)
	TouchResolve(ctx context.Context, name string) (fsstore.Bound, error)
}

var _ leaseStore = (*fsstore.Store)(nil)

func newNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claimLease claims slot of worker for holder, first ending the stale
// incarnation seen in stale, if any. It reports whether it won.
func claimLease(ctx context.Context, store leaseStore, w WorkerID, slot int, stale *fsstore.Bound, holder string, req Requirement, timeout time.Duration) (Lease, bool, error) {
	l, _, won, err := claimLeaseState(ctx, store, nil, w, slot, stale, holder, req, timeout)
	return l, won, err
}

// claimLeaseState is claimLease taking the lease blob's digest from st
// (placeState.leaseDigest; nil: a Put for every claim). It also returns
// the meta of the lease record it bound.
func claimLeaseState(ctx context.Context, store leaseStore, st *placeState, w WorkerID, slot int, stale *fsstore.Bound, holder string, req Requirement, timeout time.Duration) (Lease, fsstore.Meta, bool, error) {
	name := leaseName(w, slot)
	if stale != nil {
		if n, ok := stale.Meta.Get(leaseMetaNonce); ok {
			if err := endLease(ctx, store, name, n, timeout); err != nil {
				return Lease{}, nil, false, err
			}
		} else if err := endLease(ctx, store, name, "", timeout); err != nil {
			return Lease{}, nil, false, err
		}
	}
	d, err := st.leaseDigest(ctx, store)
	if err != nil {
		return Lease{}, nil, false, fmt.Errorf("worker: lease %s: %w", name, err)
	}
	l := Lease{Worker: w, Slot: slot, Nonce: newNonce()}
	meta := fsstore.Meta{}.
		Set(leaseMetaVersion, "1").
		Set(leaseMetaNonce, l.Nonce).
		Set(leaseMetaHolder, holder).
		Set(leaseMetaGPUs, strconv.Itoa(req.GPUs)).
		Set(leaseMetaCPUs, strconv.Itoa(req.CPUs)).
		Set(leaseMetaMemory, strconv.FormatUint(req.Memory, 10))
	won, err := store.ClaimEphemeral(ctx, name, d, meta)
	if err != nil {
		return Lease{}, nil, false, fmt.Errorf("worker: lease %s: %w", name, err)
	}
	return l, meta, won, nil
}

// leaseUse is the part of a lease's meta that says what its plan asked
// for (what fillSlots sums).
func leaseUse(req Requirement) fsstore.Meta {
	return fsstore.Meta{}.
		Set(leaseMetaGPUs, strconv.Itoa(req.GPUs)).
		Set(leaseMetaCPUs, strconv.Itoa(req.CPUs)).
		Set(leaseMetaMemory, strconv.FormatUint(req.Memory, 10))
}

// endLease unbinds lease name if it still carries nonce (see the comment
// at the top of this file). It returns nil when the lease has been ended
// by this call, was already gone, or is being ended by another process
// right now. A nonce of "" stands for a lease record without one
// (corrupt or foreign): its marker is keyed "none".
func endLease(ctx context.Context, store leaseStore, name, nonce string, timeout time.Duration) error {
	key := nonce
	if key == "" {
		key = "none"
	}
	d, err := store.Put(ctx, leaseBlob)
	if err != nil {
		return fmt.Errorf("worker: end lease %s: %w", name, err)
	}
	for k := 0; ; k++ {
		marker := name + ".end." + key + "." + strconv.Itoa(k)
		won, err := store.ClaimEphemeral(ctx, marker, d, nil)
		if err != nil {
			return fmt.Errorf("worker: end lease %s: %w", name, err)
		}
		if won {
			b, err := store.Resolve(ctx, name)
			switch {
			case err == nil:
				if got, _ := b.Meta.Get(leaseMetaNonce); got == nonce {
					if err := store.UnbindEphemeral(ctx, name); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
						return fmt.Errorf("worker: end lease %s: %w", name, err)
					}
				}
			case isCorrupt(err):
				if nonce == "" {
					if err := store.UnbindEphemeral(ctx, name); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
						return fmt.Errorf("worker: end lease %s: %w", name, err)
					}
				}
			case !errors.Is(err, fsstore.ErrNotFound):
				return fmt.Errorf("worker: end lease %s: %w", name, err)
			}
			if err := store.UnbindEphemeral(ctx, marker); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
				return fmt.Errorf("worker: end lease %s: %w", name, err)
			}
			return nil
		}
		// Someone else holds this level. Fresh: they are ending it now.
		// Older than the timeout: they died between claim and unbind;
		// take the next level.
		now, err := store.Now(ctx)
		if err != nil {
			return fmt.Errorf("worker: end lease %s: %w", name, err)
		}
		m, err := store.Resolve(ctx, marker)
		switch {
		case errors.Is(err, fsstore.ErrNotFound):
			k-- // pruned meanwhile: try the same level again
			continue
		case err != nil && !isCorrupt(err):
			return fmt.Errorf("worker: end lease %s: %w", name, err)
		case err == nil && now.Sub(m.Time) <= timeout:
			return nil
		}
		if k > 64 {
			return fmt.Errorf("worker: end lease %s: more than 64 abandoned end markers (%s); remove them by hand", name, marker)
		}
	}
}

// RenewLease keeps l fresh for another timeout: it checks that l is still
// held (its name carries l's nonce, and its last heartbeat is within the
// timeout) and touches it. It returns the new server time, or an error
// wrapping ErrLeaseLost. It holds no state, so a stateless coordinator
// can renew on a client's behalf. Renewal checks again after the Touch,
// so a lease reclaimed in between is reported lost; one being reclaimed at
// that very moment is reported lost by the next renewal.
func RenewLease(ctx context.Context, store *fsstore.Store, l Lease, timeout time.Duration) (time.Time, error) {
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	name := l.Name()
	now, err := store.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("worker: renew %s: %w", name, err)
	}
	if err := checkHeld(ctx, store, l, now, timeout); err != nil {
		return time.Time{}, err
	}
	t, err := store.Touch(ctx, name)
	if errors.Is(err, fsstore.ErrNotFound) {
		return time.Time{}, fmt.Errorf("worker: renew %s: %w (released or reclaimed)", name, ErrLeaseLost)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("worker: renew %s: %w", name, err)
	}
	if err := checkHeld(ctx, store, l, t, timeout); err != nil {
		return time.Time{}, err
	}
	return t, nil
}

func checkHeld(ctx context.Context, store leaseStore, l Lease, now time.Time, timeout time.Duration) error {
	name := l.Name()
	b, err := store.Resolve(ctx, name)
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return fmt.Errorf("worker: lease %s: %w (released or reclaimed)", name, ErrLeaseLost)
	case err != nil:
		return fmt.Errorf("worker: lease %s: %w", name, err)
	}
	if got, _ := b.Meta.Get(leaseMetaNonce); got != l.Nonce {
		return fmt.Errorf("worker: lease %s: %w (another placer holds it now)", name, ErrLeaseLost)
	}
	if age := now.Sub(b.Time); age > timeout {
		return fmt.Errorf("worker: lease %s: %w (no heartbeat for %s, more than the timeout %s: it may be reclaimed)", name, ErrLeaseLost, age.Round(time.Millisecond), timeout)
	}
	return nil
}

// ReleaseLease ends l: the slot is free for the next placer at once. It
// is idempotent; releasing a lease that was already released or reclaimed
// is not an error (the plan is over either way).
func ReleaseLease(ctx context.Context, store *fsstore.Store, l Lease, timeout time.Duration) error {
	return releaseLease(ctx, store, l, timeout)
}

func releaseLease(ctx context.Context, store leaseStore, l Lease, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	if l.Nonce == "" {
		return fmt.Errorf("worker: release %s: no nonce (give the lease as placement returned it)", l.Name())
	}
	return endLease(ctx, store, l.Name(), l.Nonce, timeout)
}

// releaseHeld ends l for the holder whose heartbeat last landed at last
// (server time) and saw no gap unless lost: without an end marker when
// the heartbeats vouch for it (see the comment at the top of this file),
// through ReleaseLease otherwise. Like ReleaseLease it is idempotent, and
// a lease already released or reclaimed is not an error.
func releaseHeld(ctx context.Context, store leaseStore, l Lease, timeout time.Duration, last time.Time, lost bool) error {
	if lost || last.IsZero() {
		return releaseLease(ctx, store, l, timeout)
	}
	// The Touch and the read of the nonce are one open (TouchResolve):
	// the record read is the one touched. Bug (issue 15): a Touch and a
	// Resolve, two opens, 10 of a Placer's 22 system calls a placement.
	name := l.Name()
	b, err := store.TouchResolve(ctx, name)
	var ce *fsstore.CorruptError
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return nil // released or reclaimed already
	case err != nil && !errors.As(err, &ce):
		return fmt.Errorf("worker: release %s: %w", name, err)
	case !b.Time.IsZero() && b.Time.Sub(last) > timeout:
		// A gap: it may be being reclaimed right now.
		return releaseLease(ctx, store, l, timeout)
	case err != nil:
		return fmt.Errorf("worker: release %s: %w", name, err)
	}
	if got, _ := b.Meta.Get(leaseMetaNonce); got != l.Nonce {
		return nil // another placer's lease now: ours ended
	}
	if err := store.UnbindEphemeral(ctx, name); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
		return fmt.Errorf("worker: release %s: %w", name, err)
	}
	return nil
}
