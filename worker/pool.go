package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// daemonPool keeps idle daemons warm, by environment and GPU set, so that
// a second plan with the same environment pays no Python start-up. A
// daemon is handed to one plan at a time; a daemon whose call failed
// (crash, kill after a cancel) is never put back.
type daemonPool struct {
	script  string
	logDir  string       // where daemons' logs are (one each, removed with it)
	seq     atomic.Int64 // names logs
	grace   time.Duration
	maxIdle int // per key
	logger  *slog.Logger

	mu     sync.Mutex
	idle   map[string][]*daemon
	closed bool
	starts int // daemons started, for tests and /capabilities
}

// poolKey is the identity of a warm daemon: the same env folder and the
// same GPUs visible. The folder, not the env's key: a key outlives its
// folder when the env is evicted and rebuilt (a fresh folder), and a
// daemon keyed by the key was handed to plans after its venv was deleted
// under it (imports not yet made then failed). See also envDropped.
func poolKey(env *Env, gpus []GPU) string {
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = g.UUID
	}
	return env.Dir + "|" + strings.Join(ids, ",")
}

// envDropped ends the idle daemons that run out of env folder dir: the
// worker has let go of its in-use lock on dir, so another process may now
// evict it, and a warm daemon must never outlive its venv. (EnvPool calls
// it under its mutex; this takes only the daemon pool's.)
func (p *daemonPool) envDropped(dir string) {
	prefix := dir + "|"
	p.mu.Lock()
	var ended []*daemon
	for key, list := range p.idle {
		if strings.HasPrefix(key, prefix) {
			ended = append(ended, list...)
			delete(p.idle, key)
		}
	}
	p.mu.Unlock()
	for _, d := range ended {
		d.discard()
	}
}

// get returns an idle daemon for (env, gpus), or starts one. warm reports
// whether it was reused.
func (p *daemonPool) get(ctx context.Context, env *Env, gpus []GPU) (d *daemon, warm bool, err error) {
	key := poolKey(env, gpus)
	p.mu.Lock()
	if list := p.idle[key]; len(list) > 0 {
		d = list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
	}
	p.mu.Unlock()
	if d != nil {
		select {
		case <-d.exited: // died while idle (OOM killer, a stray signal)
			d.discard() // closes its pipe; the process is already reaped
		default:
			return d, true, nil
		}
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	d, err = startDaemon(ctx, key, daemonSpec{
		python: env.Python,
		script: p.script,
		log:    filepath.Join(p.logDir, fmt.Sprintf("%d-%d.log", os.Getpid(), p.seq.Add(1))),
		// The plan sees only its own GPUs, by UUID (indexes would be
		// renumbered by an outer CUDA_VISIBLE_DEVICES); none if it asked
		// for none, so that two plans never share a GPU unless asked.
		env:    []string{"CUDA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")},
		grace:  p.grace,
		logger: p.logger,
	})
	if err != nil {
		return nil, false, err
	}
	p.mu.Lock()
	p.starts++
	p.mu.Unlock()
	return d, false, nil
}

// put returns d to the pool, or ends it if it is broken, the pool is
// closed or full.
func (p *daemonPool) put(d *daemon) {
	if d.broken {
		d.discard()
		return
	}
	p.mu.Lock()
	if p.closed || len(p.idle[d.key]) >= p.maxIdle {
		p.mu.Unlock()
		d.discard()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*daemon{}
	}
	p.idle[d.key] = append(p.idle[d.key], d)
	p.mu.Unlock()
}

// started returns how many daemons the pool has started.
func (p *daemonPool) started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// close ends every idle daemon; daemons in use end when they are put back.
func (p *daemonPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, list := range idle {
		for _, d := range list {
			d.discard()
		}
	}
}
