package status

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/soma-hpc/soma/worker"
)

// Workers is the short workers section of soma status: the soma-workers
// registered in the root (ROOT/workers/), alive or dead. soma workers
// ROOT shows each in full.
type Workers struct {
	Alive    int          `json:"alive"`
	Dead     int          `json:"dead"`
	Slots    int          `json:"slots"`  // of live workers
	Leases   int          `json:"leases"` // slots held on live workers
	TimeoutS float64      `json:"timeout_s"`
	List     []WorkerLine `json:"list"`
	// Problems counts records that cannot be read (soma workers lists
	// them).
	Problems int `json:"problems"`
}

// WorkerLine is one worker in the section.
type WorkerLine struct {
	ID      string   `json:"id"`
	Alive   bool     `json:"alive"`
	Address string   `json:"address"`
	Leases  int      `json:"leases"`
	Slots   int      `json:"slots"`
	Tags    []string `json:"tags"`
	AgeS    float64  `json:"age_s"` // seconds since its last heartbeat
}

// ReadWorkersSection reads the registry under s; nil when no worker has
// ever registered there (no record, no problem), so a root without
// workers shows no section. timeout is the workers' heartbeat timeout
// (zero: worker.DefaultHeartbeatTimeout).
func ReadWorkersSection(ctx context.Context, s *Store, timeout time.Duration) (*Workers, error) {
	// s.Now: on a root this process cannot write, ages are judged by
	// this machine's clock, and the view says so (Store.Clock).
	if s.FS() == nil {
		return nil, nil // a bucket: no worker registers there
	}
	rep, err := worker.ReadWorkers(ctx, s.FS(), worker.ListOptions{Timeout: timeout, Now: s.Now})
	if err != nil {
		return nil, err
	}
	if len(rep.Workers) == 0 && len(rep.Problems) == 0 {
		return nil, nil
	}
	sum := rep.Summary()
	ws := &Workers{Alive: sum.Alive, Dead: sum.Dead, Slots: sum.Slots, Leases: sum.Leases,
		TimeoutS: rep.TimeoutSeconds, List: []WorkerLine{}, Problems: sum.Problems}
	for _, w := range rep.Workers {
		tags := w.Tags
		if tags == nil {
			tags = []string{}
		}
		ws.List = append(ws.List, WorkerLine{ID: w.ID.String(), Alive: w.Alive, Address: w.Address,
			Leases: w.Leases, Slots: w.Slots, Tags: tags, AgeS: w.AgeSeconds})
	}
	return ws, nil
}

// WriteWorkersText writes the section as text: a count line, then one
// line per worker.
func WriteWorkersText(w io.Writer, ws *Workers) error {
	if ws == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "workers  %d alive, %d dead; %d of %d slots held (soma workers ROOT for more)\n", ws.Alive, ws.Dead, ws.Leases, ws.Slots)
	for _, l := range ws.List {
		state := "alive"
		if !l.Alive {
			state = "dead "
		}
		tags := strings.Join(l.Tags, ",")
		if tags == "" {
			tags = "-"
		}
		fmt.Fprintf(&b, "  %s  %s  %d/%d  %s  %s  heartbeat %s ago\n", l.ID, state, l.Leases, l.Slots, tags, l.Address, dur(l.AgeS))
	}
	if ws.Problems > 0 {
		fmt.Fprintf(&b, "  %d worker record(s) cannot be read (soma workers ROOT lists them)\n", ws.Problems)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
