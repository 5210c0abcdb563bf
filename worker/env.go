package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"
)

// EnvSpec says what a plan's Python environment holds. Two specs that
// differ only in spelling (requirement order, whitespace, the case of a
// project name, "_" for "-") name the same environment.
type EnvSpec struct {
	Requirements       []string `json:"requirements" msgpack:"requirements"`                 // pip requirement specs, as the plan lists them
	SystemSitePackages bool     `json:"system_site_packages" msgpack:"system_site_packages"` // venv --system-site-packages: see the interpreter's packages (Debian's numpy, torch)
	NoIndex            bool     `json:"no_index" msgpack:"no_index"`                         // pip --no-index: install only from FindLinks
	FindLinks          []string `json:"find_links" msgpack:"find_links"`                     // pip --find-links: folders (or URLs) of wheels on this node
	IndexURL           string   `json:"index_url" msgpack:"index_url"`                       // pip --index-url; "" = pip's default
}

// EnvOptions configures an EnvPool.
type EnvOptions struct {
	Dir      string       // node-local cache folder for venvs
	Python   string       // the interpreter venvs are built from; required, explicit, an absolute path
	MaxBytes int64        // LRU eviction bound, 0 = DefaultEnvMaxBytes
	Logger   *slog.Logger // nil = discard
}

// DefaultEnvMaxBytes bounds an EnvPool's folder when EnvOptions.MaxBytes
// is 0: room for a few torch environments (about 5 GB each).
const DefaultEnvMaxBytes = 20 << 30

// EnvBuildError is returned when a venv cannot be built. It carries the
// failing step's output (pip's own message, e.g. "No matching
// distribution found for ..."); nothing falls back to the system
// interpreter.
type EnvBuildError struct {
	Key    string // the environment's key
	Step   string // "venv" or "pip install"
	Output string // the step's stdout and stderr
	Err    error  // how the step ended
}

func (e *EnvBuildError) Error() string {
	out := e.Output
	const max = 16 << 10
	if len(out) > max {
		out = "...\n" + out[len(out)-max:]
	}
	return fmt.Sprintf("worker: build env %s: %s failed (%v); its output:\n%s", e.Key, e.Step, e.Err, strings.TrimRight(out, "\n"))
}

func (e *EnvBuildError) Unwrap() error { return e.Err }

// EnvPool builds Python virtual environments once per content and hands
// them out. An environment's key is a hash of its normalised EnvSpec and
// the interpreter's identity (resolved path, version, and the file's
// device, inode, size and mtime, so an upgrade in place is a new
// interpreter). The key covers the spec's text, not what an index or a
// find-links folder serves: pin versions (==) to get a new env when a
// wheel changes.
//
// Several goroutines and several OS processes (workers sharing a node's
// cache folder) may call Get at once: one builds while the others wait on
// a lock file (flock(2), which the kernel drops when the builder dies),
// then all use the result. A build happens in a fresh folder and is
// published by renaming a symlink onto envs/<key> only after pip has
// finished and a completion marker is written, so a builder killed
// mid-pip leaves an unpublished folder that is never used and is removed
// by a later Prune. The folder is not moved after pip ran because pip
// writes the venv's absolute path into the scripts it installs.
//
// An env is in use while an Env of it is held, and for envLinger after
// this process released its last one (the next plan then takes no lock);
// Prune evicts envs not in use, least recently used first, by the use
// time each process refreshes at most once per envTouchEvery.
//
// Layout under Dir:
//
//	envs/<key>          symlink to ../store/<key>.<nonce>, the published env
//	store/<key>.<nonce> a venv; .soma-env.json marks it complete, .soma-in-use is its users' lock
//	locks/<key>.lock    held while <key> is being built
//	locks/prune.lock    held while pruning
type EnvPool struct {
	dir      string
	python   string // as configured
	interp   interpreter
	basePip  bool // the interpreter's own pip can install into a venv (pip >= 22.3, --python)
	maxBytes int64
	log      *slog.Logger

	// checked holds the folders (under envs/) that passed check. A folder
	// is published only once complete and never rewritten (a rebuild
	// gets a fresh, randomly named folder), so a pass holds as long as
	// the link points at it. Before this cache every warm plan re-read
	// the marker and pyvenv.cfg and resolved the interpreter: about a
	// third of a warm no-op plan's CPU (pprof, BenchmarkRoundTrip).
	checked sync.Map // folder path -> struct{}

	// holds are this process's in-use locks, by env folder (envHold);
	// keys are the keys of the specs seen, by spelling.
	mu    sync.Mutex
	holds map[string]*envHold
	keys  map[string]string
	// dropped are called (under mu) with an env folder whose in-use lock
	// this process lets go: from then on another process may evict it,
	// so whatever still runs out of it (an idle daemon) must end.
	dropped []func(dir string)

	// Test seams: pipStarted is called once pip runs in dir as process
	// pid; poll is how often a waiter retries a held lock; now is the
	// clock of use times; linger is how long an unused hold is kept.
	pipStarted func(dir string, pid int)
	poll       time.Duration
	now        func() time.Time
	linger     time.Duration
}

// envTouchEvery is how often a use of an env refreshes its use time (the
// mtime of its marker, which Prune's least-recently-used order reads),
// and envLinger how long this process keeps an env's in-use lock after
// its last plan ended. Both were per plan: a warm no-op plan opened and
// locked .soma-in-use, and set the marker's mtime twice (at Get and at
// Release): 6 of its syscalls and about 60 µs of its 300 (os.Open is
// about 40 µs here; BenchmarkRoundTrip, strace -c). A minute is far finer
// than eviction needs (envs are built in seconds to minutes and evicted
// when the cache folder is full), and an env a worker used within the
// last minute is the last one LRU would pick anyway.
const (
	envTouchEvery = time.Minute
	envLinger     = time.Minute
)

// envHold is this process's shared flock on a published env's in-use
// file, shared by every Env handed out for that folder: the first Get
// takes it, later ones count themselves in (refs), and it is let go
// envLinger after the last Release, or at once by this pool's Prune.
// While it is held no process evicts the env (Prune takes the lock
// exclusively, which a shared lock on another descriptor, even in this
// process, refuses).
type envHold struct {
	key, dir string
	lock     *flock.Flock
	refs     int         // Envs not yet released
	touched  time.Time   // when this process last set the marker's mtime
	idle     *time.Timer // lets the lock go envLinger after refs reached 0
	armed    bool        // idle will fire (and expire then decides)
	released time.Time   // when refs last reached 0
}

// Env is a ready virtual environment, held in use until Release.
type Env struct {
	Key    string // content hash of (normalised spec, interpreter identity)
	Dir    string // the venv's folder; stays put while the Env is in use
	Python string // path of the venv's python

	hold *envHold // the shared lock on Dir/.soma-in-use
	once sync.Once
	pool *EnvPool
}

// Release marks the env no longer in use by a running plan (eviction
// never removes an env in use, by this process or another; this process
// keeps the in-use lock envLinger longer, for its next plan). Calling it
// more than once is harmless.
func (e *Env) Release() {
	e.once.Do(func() { e.pool.release(e.hold) })
}

// handLocked returns a new Env of h, counted in its users, and refreshes
// the env's use time if it is stale. p.mu is held.
func (p *EnvPool) handLocked(h *envHold) *Env {
	h.refs++
	p.touchLocked(h)
	return &Env{Key: h.key, Dir: h.dir, Python: filepath.Join(h.dir, "bin", "python"), hold: h, pool: p}
}

// touchLocked sets the use time of h's env (its marker's mtime, for
// least-recently-used eviction) unless this process did within
// envTouchEvery. p.mu is held.
func (p *EnvPool) touchLocked(h *envHold) {
	now := p.now()
	if !h.touched.IsZero() && now.Sub(h.touched) < envTouchEvery {
		return
	}
	h.touched = now
	if err := os.Chtimes(filepath.Join(h.dir, markerFile), now, now); err != nil {
		p.log.Warn("env use time", "key", h.key, "err", err)
	}
}

// release ends one use of h; the end of a use counts as a use.
func (p *EnvPool) release(h *envHold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.refs--
	p.touchLocked(h)
	if h.refs > 0 {
		return
	}
	// The timer is armed once and re-armed by expire for what is left of
	// the linger: it was stopped at every take and reset at every
	// release, and a reset timer wakes an idle thread (~6 us of a warm
	// no-op plan's Go CPU, pprof).
	h.released = time.Now()
	switch {
	case h.idle == nil:
		h.idle = time.AfterFunc(p.linger, func() { p.expire(h) })
	case !h.armed:
		h.idle.Reset(p.linger)
	}
	h.armed = true
}

// expire lets h's lock go if nobody took h again meanwhile and it has
// been unused for the linger; if it was used since, it waits for the
// rest.
func (p *EnvPool) expire(h *envHold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.armed = false
	if h.refs > 0 || p.holds[h.dir] != h {
		return // in use: its release arms the timer again
	}
	if rest := p.linger - time.Since(h.released); rest > 0 {
		h.idle.Reset(rest)
		h.armed = true
		return
	}
	p.dropLocked(h)
}

// dropLocked unlocks h and forgets it. p.mu is held.
func (p *EnvPool) dropLocked(h *envHold) {
	if h.idle != nil {
		h.idle.Stop()
		h.armed = false
	}
	delete(p.holds, h.dir)
	for _, f := range p.dropped {
		f(h.dir)
	}
	if err := h.lock.Close(); err != nil {
		p.log.Warn("release env", "key", h.key, "err", err)
	}
}

// onDrop registers f to be called with each env folder this process stops
// holding, before its lock goes. f runs under the pool's mutex: it must
// not call back into the pool.
func (p *EnvPool) onDrop(f func(dir string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = append(p.dropped, f)
}

// dropIdle lets go of the in-use locks that no Env of this process
// holds, so that Prune may evict their envs.
func (p *EnvPool) dropIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		if h.refs == 0 {
			p.dropLocked(h)
		}
	}
}

const (
	envFormat   = 1
	markerFile  = ".soma-env.json"
	inUseFile   = ".soma-in-use"
	keyHexChars = 32
)

// interpreter identifies the Python that venvs are built from.
type interpreter struct {
	Path           string `json:"path"`            // resolved real path
	Version        string `json:"version"`         // "3.11.2"
	BaseExecutable string `json:"base_executable"` // sys._base_executable; venv writes its folder as "home"
	Dev            uint64 `json:"dev"`
	Ino            uint64 `json:"ino"`
	Size           int64  `json:"size"`
	MtimeNS        int64  `json:"mtime_ns"`
}

// marker is the completion record of a built env.
type marker struct {
	Format      int         `json:"format"`
	Key         string      `json:"key"`
	Spec        EnvSpec     `json:"spec"`
	Interpreter interpreter `json:"interpreter"`
	BuiltAt     time.Time   `json:"built_at"`
	SizeBytes   int64       `json:"size_bytes"`
}

// NewEnvPool opens (creating) the cache folder o.Dir and identifies
// o.Python by running it once. The interpreter must be an absolute path:
// a bare "python3" would be whatever PATH finds first (on many clusters a
// pyenv or module shim), which is the silent choice soma refuses to make.
func NewEnvPool(o EnvOptions) (*EnvPool, error) {
	if o.Dir == "" {
		return nil, errors.New("worker: env pool: no cache folder (set EnvOptions.Dir to a node-local folder, e.g. /tmp/soma-envs)")
	}
	if o.Python == "" {
		return nil, errors.New("worker: env pool: no Python interpreter configured (name one explicitly, e.g. /usr/bin/python3)")
	}
	if !filepath.IsAbs(o.Python) {
		return nil, fmt.Errorf("worker: env pool: interpreter %q is not an absolute path (name it explicitly, e.g. /usr/bin/python3, rather than rely on PATH)", o.Python)
	}
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("worker: env pool: max bytes %d is negative (0 means the default, %d)", o.MaxBytes, DefaultEnvMaxBytes)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("worker: env pool: %w", err)
	}
	interp, err := identify(o.Python)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"envs", "store", "locks"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("worker: env pool: %w", err)
		}
	}
	p := &EnvPool{dir: dir, python: o.Python, interp: interp, basePip: hasPipPython(o.Python), maxBytes: o.MaxBytes, log: o.Logger,
		holds: map[string]*envHold{}, keys: map[string]string{}, poll: 50 * time.Millisecond, now: time.Now, linger: envLinger}
	if p.maxBytes == 0 {
		p.maxBytes = DefaultEnvMaxBytes
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// identifyScript prints what venv will record about the interpreter.
const identifyScript = `import json, sys
print(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3],
                  "base_executable": getattr(sys, "_base_executable", sys.executable)}))`

func identify(python string) (interpreter, error) {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return interpreter{}, fmt.Errorf("worker: env pool: interpreter %s: %w (install it or name another)", python, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return interpreter{}, fmt.Errorf("worker: env pool: interpreter %s: %w", python, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-I", "-c", identifyScript)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return interpreter{}, fmt.Errorf("worker: env pool: run interpreter %s: %w: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	var id interpreter
	if err := json.Unmarshal(out, &id); err != nil || id.Version == "" || id.BaseExecutable == "" {
		return interpreter{}, fmt.Errorf("worker: env pool: interpreter %s printed %q, not its identity (is it a Python 3?)", python, out)
	}
	id.Path = real
	sys := st.Sys().(*syscall.Stat_t)
	id.Dev, id.Ino, id.Size, id.MtimeNS = uint64(sys.Dev), sys.Ino, st.Size(), st.ModTime().UnixNano()
	return id, nil
}

// hasPipPython reports whether python's own pip has --python (pip 22.3,
// https://pip.pypa.io/en/stable/news/#v22-3): it can then install into a
// venv made --without-pip, which skips ensurepip, the slowest step of a
// small build (measured here: 20 s of a 25 s build on a loaded machine).
func hasPipPython(python string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pip", "--version")
	cmd.Env = append(os.Environ(), "PYTHONNOUSERSITE=1") // as the build runs it
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	// "pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python 3.11)"
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "pip" {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(f[1], "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 22 || major == 22 && minor >= 3
}

// projectName matches the name at the start of a PEP 508 requirement.
var projectName = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(.*)$`)

var nameSeparators = regexp.MustCompile(`[-_.]+`)

// normaliseSpec returns spec in the one spelling its key is computed
// from, or an error naming what is wrong with it.
func normaliseSpec(spec EnvSpec) (EnvSpec, error) {
	var n EnvSpec
	n.SystemSitePackages, n.NoIndex = spec.SystemSitePackages, spec.NoIndex
	for _, r := range spec.Requirements {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if strings.HasPrefix(r, "-") {
			return EnvSpec{}, fmt.Errorf("worker: requirement %q is a pip option, not a requirement (use the plan's index settings: find-links, index URL, no-index)", r)
		}
		if strings.ContainsAny(r, "\n\r\x00") {
			return EnvSpec{}, fmt.Errorf("worker: requirement %q holds a line break (list one requirement per entry)", r)
		}
		n.Requirements = append(n.Requirements, normaliseRequirement(r))
	}
	sort.Strings(n.Requirements)
	n.Requirements = slices.Compact(n.Requirements)
	for _, l := range spec.FindLinks {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if !strings.Contains(l, "://") {
			// pip reads a relative folder from its working directory,
			// which is the worker's, not the plan author's.
			abs, err := filepath.Abs(l)
			if err != nil {
				return EnvSpec{}, fmt.Errorf("worker: find-links %q: %w", l, err)
			}
			if st, err := os.Stat(abs); err != nil || !st.IsDir() {
				return EnvSpec{}, fmt.Errorf("worker: find-links folder %s does not exist on this node (copy the wheels there or fix the path)", abs)
			}
			l = abs
		}
		if !slices.Contains(n.FindLinks, l) {
			n.FindLinks = append(n.FindLinks, l)
		}
	}
	n.IndexURL = strings.TrimSpace(spec.IndexURL)
	if n.IndexURL != "" {
		u, err := url.Parse(n.IndexURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") {
			return EnvSpec{}, fmt.Errorf("worker: index URL %q is not an http, https or file URL", n.IndexURL)
		}
		if n.NoIndex {
			return EnvSpec{}, fmt.Errorf("worker: index URL %q with no-index: pip would ignore the index (drop one of them)", n.IndexURL)
		}
	}
	return n, nil
}

// normaliseRequirement lowercases a requirement's project name and folds
// runs of "-", "_", "." to "-" (PEP 503), and drops whitespace before any
// environment marker. Requirements that are paths or URLs stay as given.
func normaliseRequirement(r string) string {
	// The part before any version, extra, marker or " @ url": a path or
	// URL there ("./pkg", "wheels/Pkg-1.0-py3-none-any.whl",
	// "git+https://...") is not a name, and its case matters.
	head := r
	if i := strings.IndexAny(r, " @[<>=!~;("); i >= 0 {
		head = r[:i]
	}
	if strings.ContainsAny(head, `/\:`) || strings.HasPrefix(head, ".") || strings.HasPrefix(head, "~") {
		return r
	}
	for _, ext := range []string{".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2"} {
		if strings.HasSuffix(strings.ToLower(head), ext) {
			return r
		}
	}
	m := projectName.FindStringSubmatch(r)
	if m == nil {
		return r
	}
	name := nameSeparators.ReplaceAllString(strings.ToLower(m[1]), "-")
	rest := m[2]
	if strings.Contains(rest, "@") || strings.Contains(rest, "://") {
		// A direct reference: a URL needs its spaces (before ";").
		return name + " " + strings.Join(strings.Fields(rest), " ")
	}
	spec, markers, hasMarkers := strings.Cut(rest, ";")
	out := name + strings.Join(strings.Fields(spec), "")
	if hasMarkers {
		out += "; " + strings.Join(strings.Fields(markers), " ")
	}
	return out
}

// Key returns the key Get would give spec's environment.
func (p *EnvPool) Key(spec EnvSpec) (string, error) {
	n, err := normaliseSpec(spec)
	if err != nil {
		return "", err
	}
	return p.key(n), nil
}

func (p *EnvPool) key(n EnvSpec) string {
	// Remembered per spelling: the JSON and the hash were about 10 µs of
	// every warm plan. Each string is length-prefixed, so no two specs
	// share a spelling (a separator byte did: "a","b" and "a\x01b").
	fp := fmt.Sprintf("%t %t %d %d ", n.SystemSitePackages, n.NoIndex, len(n.Requirements), len(n.FindLinks))
	for _, x := range slices.Concat(n.Requirements, n.FindLinks, []string{n.IndexURL}) {
		fp += strconv.Itoa(len(x)) + ":" + x
	}
	p.mu.Lock()
	k, ok := p.keys[fp]
	p.mu.Unlock()
	if ok {
		return k
	}
	k = p.computeKey(n)
	p.mu.Lock()
	if len(p.keys) < maxKeys {
		p.keys[fp] = k
	}
	p.mu.Unlock()
	return k
}

// maxKeys bounds the keys an EnvPool remembers.
const maxKeys = 1024

func (p *EnvPool) computeKey(n EnvSpec) string {
	b, err := json.Marshal(struct {
		Format      int         `json:"format"`
		Spec        EnvSpec     `json:"spec"`
		Interpreter interpreter `json:"interpreter"`
	}{envFormat, n, p.interp})
	if err != nil {
		panic(err) // plain strings and numbers always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:keyHexChars]
}

// errNotReady says an env is not published, or not usable as published.
var errNotReady = errors.New("env not ready")

// Get returns a ready venv for spec, building it once (across goroutines
// and processes) and reusing it afterwards without running pip. The Env
// is in use, and so safe from eviction, until its Release (and envLinger
// longer, unless this pool prunes meanwhile). A spec that
// cannot be built returns an *EnvBuildError; a cancelled ctx stops the
// wait, or the build (pip gets SIGTERM), and leaves nothing published.
func (p *EnvPool) Get(ctx context.Context, spec EnvSpec) (*Env, error) {
	n, err := normaliseSpec(spec)
	if err != nil {
		return nil, err
	}
	key := p.key(n)
	if env, err := p.open(key); err == nil || !errors.Is(err, errNotReady) {
		return env, err
	}
	lock := flock.New(filepath.Join(p.dir, "locks", key+".lock"))
	if _, err := lock.TryLockContext(ctx, p.poll); err != nil {
		return nil, fmt.Errorf("worker: wait for env %s: %w", key, err)
	}
	env, err := p.open(key) // built while we waited?
	if err == nil || !errors.Is(err, errNotReady) {
		lock.Close()
		return env, err
	}
	env, err = p.build(ctx, key, n)
	lock.Close()
	if err != nil {
		return nil, err
	}
	if err := p.Prune(ctx); err != nil {
		p.log.Warn("prune env pool", "dir", p.dir, "err", err)
	}
	return env, nil
}

// open returns the published env for key, in use, or errNotReady.
func (p *EnvPool) open(key string) (*Env, error) {
	// An env this process holds in use for key, and has checked since it
	// was opened through the link, is handed again without reading the
	// link: no one evicts a folder while it is held, and a link another
	// process pointed elsewhere meanwhile (a rebuild) leaves the held
	// folder whole. (A readlink per plan: issue 14's round trip. One this
	// process built is checked once through the link first, as before.)
	p.mu.Lock()
	for _, h := range p.holds {
		if _, ok := p.checked.Load(h.dir); ok && h.key == key {
			env := p.handLocked(h)
			p.mu.Unlock()
			return env, nil
		}
	}
	p.mu.Unlock()
	link := filepath.Join(p.dir, "envs", key)
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotReady
	}
	if err != nil {
		return nil, fmt.Errorf("worker: env %s: %w", key, err)
	}
	dir := filepath.Join(p.dir, "envs", target)
	if _, ok := p.checked.Load(dir); !ok {
		if err := p.check(key, dir); err != nil {
			p.log.Warn("env not usable; rebuilding", "key", key, "dir", dir, "why", err)
			return nil, errNotReady
		}
		p.checked.Store(dir, struct{}{})
	}
	p.mu.Lock()
	if h, ok := p.holds[dir]; ok {
		// This process holds the folder in use, so no one has evicted
		// it, and the link still points at it: no lock to take.
		env := p.handLocked(h)
		p.mu.Unlock()
		return env, nil
	}
	p.mu.Unlock()
	// No O_CREATE: if an eviction removed dir meanwhile, fail rather than
	// recreate a file in a folder being deleted.
	lock := flock.New(filepath.Join(dir, inUseFile), flock.SetFlag(os.O_RDONLY))
	ok, err := lock.TryRLock()
	if err != nil || !ok {
		return nil, errNotReady // being evicted
	}
	// Evicted between Readlink and the lock? Then the link is gone or moved.
	if again, err := os.Readlink(link); err != nil || again != target {
		lock.Close()
		return nil, errNotReady
	}
	return p.hold(key, dir, lock, time.Time{}), nil
}

// hold hands out an Env of dir under this process's in-use lock, which
// the caller has just taken as lock (dropped if another goroutine took
// one meanwhile). touched is when the marker's mtime was last set (zero:
// set it now).
func (p *EnvPool) hold(key, dir string, lock *flock.Flock, touched time.Time) *Env {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.holds[dir]
	if ok {
		lock.Close()
	} else {
		h = &envHold{key: key, dir: dir, lock: lock, touched: touched}
		p.holds[dir] = h
	}
	return p.handLocked(h)
}

// check says why the env in dir cannot be used for key: no completion
// marker, or built by another interpreter than the configured one.
func (p *EnvPool) check(key, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		return fmt.Errorf("no completion marker: %w", err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("completion marker: %w", err)
	}
	if m.Format != envFormat || m.Key != key {
		return fmt.Errorf("completion marker has format %d, key %s; want format %d, key %s", m.Format, m.Key, envFormat, key)
	}
	return p.checkInterpreter(dir)
}

// checkInterpreter compares the interpreter that venv recorded in
// dir/pyvenv.cfg with the configured one: a venv copied in, or left by an
// interpreter upgraded in place, runs another Python than the one asked for.
func (p *EnvPool) checkInterpreter(dir string) error {
	cfg, err := readPyvenvCfg(filepath.Join(dir, "pyvenv.cfg"))
	if err != nil {
		return err
	}
	wantHome := filepath.Dir(p.interp.BaseExecutable)
	version := cfg["version"]
	if version == "" {
		version = cfg["version_info"] // virtualenv's spelling
	}
	if cfg["home"] != wantHome || (version != p.interp.Version && !strings.HasPrefix(version, p.interp.Version+".")) {
		return fmt.Errorf("pyvenv.cfg records Python %s in %s; the configured %s is Python %s in %s",
			version, cfg["home"], p.python, p.interp.Version, wantHome)
	}
	if exe := cfg["executable"]; exe != "" {
		if real, err := filepath.EvalSymlinks(exe); err != nil || real != p.interp.Path {
			return fmt.Errorf("pyvenv.cfg records executable %s; the configured %s is %s", exe, p.python, p.interp.Path)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "python")); err != nil {
		return err
	}
	return nil
}

func readPyvenvCfg(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			cfg[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return cfg, nil
}

// build makes the env for key in a fresh folder and publishes it. The
// caller holds key's build lock.
func (p *EnvPool) build(ctx context.Context, key string, n EnvSpec) (env *Env, err error) {
	host, _ := os.Hostname()
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("%s.%s.%d.%x", key, host, os.Getpid(), r)
	dir := filepath.Join(p.dir, "store", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("worker: build env %s: %w", key, err)
	}
	var lock *flock.Flock
	defer func() {
		if err != nil {
			if lock != nil {
				lock.Close()
			}
			if rmErr := os.RemoveAll(dir); rmErr != nil {
				p.log.Warn("remove failed env build", "dir", dir, "err", rmErr)
			}
		}
	}()
	start := time.Now()
	p.log.Info("building env", "key", key, "dir", dir, "requirements", n.Requirements)

	venv := []string{"-m", "venv"}
	if n.SystemSitePackages {
		venv = append(venv, "--system-site-packages")
	}
	if len(n.Requirements) == 0 || p.basePip {
		venv = append(venv, "--without-pip") // pip comes from the interpreter, or is not needed
	}
	if err := p.run(ctx, exec.CommandContext(ctx, p.python, append(venv, dir)...), key, "venv", ""); err != nil {
		return nil, err
	}
	if len(n.Requirements) > 0 {
		python, args := filepath.Join(dir, "bin", "python"), []string{"-m", "pip"}
		if p.basePip {
			python, args = p.python, append(args, "--python", filepath.Join(dir, "bin", "python"))
		}
		args = append(args, "install", "--no-input", "--disable-pip-version-check")
		if n.NoIndex {
			args = append(args, "--no-index")
		}
		for _, l := range n.FindLinks {
			args = append(args, "--find-links", l)
		}
		if n.IndexURL != "" {
			args = append(args, "--index-url", n.IndexURL)
		}
		args = append(args, n.Requirements...)
		cmd := exec.CommandContext(ctx, python, args...)
		if err := p.run(ctx, cmd, key, "pip install", dir); err != nil {
			return nil, err
		}
	}
	if err := p.checkInterpreter(dir); err != nil {
		return nil, fmt.Errorf("worker: build env %s: the new venv %v", key, err)
	}
	size, err := dirSize(dir)
	if err != nil {
		return nil, fmt.Errorf("worker: build env %s: %w", key, err)
	}
	// Take the in-use lock before publishing, so no Prune can evict the
	// env between its publication and its first use.
	if err := os.WriteFile(filepath.Join(dir, inUseFile), nil, 0o644); err != nil {
		return nil, fmt.Errorf("worker: build env %s: %w", key, err)
	}
	lock = flock.New(filepath.Join(dir, inUseFile), flock.SetFlag(os.O_RDONLY))
	if ok, err := lock.TryRLock(); err != nil || !ok {
		return nil, fmt.Errorf("worker: build env %s: lock %s: %v", key, inUseFile, err)
	}
	m := marker{Format: envFormat, Key: key, Spec: n, Interpreter: p.interp, BuiltAt: time.Now().UTC(), SizeBytes: size}
	if err := writeFileSync(filepath.Join(dir, markerFile), m); err != nil {
		return nil, fmt.Errorf("worker: build env %s: %w", key, err)
	}
	if err := p.publish(key, name); err != nil {
		return nil, fmt.Errorf("worker: build env %s: publish: %w", key, err)
	}
	p.log.Info("built env", "key", key, "dir", dir, "bytes", size, "took", time.Since(start).Round(time.Millisecond))
	return p.hold(key, dir, lock, p.now()), nil // the marker was just written
}

// run runs one build step and turns its failure into an *EnvBuildError.
func (p *EnvPool) run(ctx context.Context, cmd *exec.Cmd, key, step, dir string) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "PIP_NO_INPUT=1", "PYTHONNOUSERSITE=1")
	// Pdeathsig: a worker killed with SIGKILL takes its pip along, rather
	// than leave it writing into a build folder nobody will publish (and
	// that a later Prune removes under it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return &EnvBuildError{Key: key, Step: step, Err: err}
	}
	if p.pipStarted != nil && dir != "" {
		p.pipStarted(dir, cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return &EnvBuildError{Key: key, Step: step, Output: out.String(), Err: err}
	}
	return nil
}

// publish points envs/<key> at store/<name>, atomically: rename(2)
// replaces the link in one step, so readers see the old env or the new.
func (p *EnvPool) publish(key, name string) error {
	envs := filepath.Join(p.dir, "envs")
	tmp := filepath.Join(envs, "."+name+".tmp")
	if err := os.Symlink(filepath.Join("..", "store", name), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(envs, key)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(envs)
}

func writeFileSync(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// Prune removes what the pool no longer needs: builds that never
// completed (their builder died: no marker, build lock free), envs
// replaced by a rebuild, and then, least recently used first, published
// envs until the pool holds at most MaxBytes. An env in use by any
// process is never removed, even if the pool stays above MaxBytes. Get
// prunes after each build; a daemon may also call Prune now and then.
// Only one process prunes at a time; the others return at once.
func (p *EnvPool) Prune(ctx context.Context) error {
	plock := flock.New(filepath.Join(p.dir, "locks", "prune.lock"))
	ok, err := plock.TryLock()
	if err != nil {
		return fmt.Errorf("worker: prune: %w", err)
	}
	if !ok {
		return nil
	}
	defer plock.Close()
	p.dropIdle()

	entries, err := os.ReadDir(filepath.Join(p.dir, "store"))
	if err != nil {
		return fmt.Errorf("worker: prune: %w", err)
	}
	type candidate struct {
		key, name string
		size      int64
		used      time.Time
	}
	var live []candidate
	var total int64
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		key, _, ok := strings.Cut(name, ".")
		if !ok || len(key) != keyHexChars {
			continue
		}
		dir := filepath.Join(p.dir, "store", name)
		published := false
		if t, err := os.Readlink(filepath.Join(p.dir, "envs", key)); err == nil && t == filepath.Join("..", "store", name) {
			published = true
		}
		mb, merr := os.ReadFile(filepath.Join(dir, markerFile))
		var m marker
		if merr == nil {
			merr = json.Unmarshal(mb, &m)
		}
		switch {
		case merr != nil && !published:
			// No completion marker: a build in progress (its key's build
			// lock is held) or one whose builder died.
			p.removeIf(key, dir, "unfinished build", false)
		case !published:
			p.removeIf(key, dir, "replaced env", true)
		default:
			info, err := os.Stat(filepath.Join(dir, markerFile))
			if err != nil {
				continue
			}
			live = append(live, candidate{key, name, m.SizeBytes, info.ModTime()})
			total += m.SizeBytes
		}
	}
	if total <= p.maxBytes {
		return nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].used.Before(live[j].used) })
	for _, c := range live {
		if total <= p.maxBytes {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.evict(c.key, c.name) {
			total -= c.size
		}
	}
	if total > p.maxBytes {
		p.log.Info("env pool above its bound: the rest are in use", "dir", p.dir, "bytes", total, "max_bytes", p.maxBytes)
	}
	return nil
}

// removeIf removes the unpublished store folder dir of key if nobody is
// building key (so it is not a build in progress) and, when checkUse, if
// nobody uses it.
func (p *EnvPool) removeIf(key, dir, why string, checkUse bool) {
	build := flock.New(filepath.Join(p.dir, "locks", key+".lock"))
	if ok, err := build.TryLock(); err != nil || !ok {
		return
	}
	defer build.Close()
	if t, err := os.Readlink(filepath.Join(p.dir, "envs", key)); err == nil && t == filepath.Join("..", "store", filepath.Base(dir)) {
		return // published meanwhile
	}
	if checkUse {
		use := flock.New(filepath.Join(dir, inUseFile), flock.SetFlag(os.O_RDONLY))
		if ok, err := use.TryLock(); err != nil || !ok {
			return
		}
		defer use.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		p.log.Warn("prune env pool", "dir", dir, "err", err)
		return
	}
	p.log.Info("pruned "+why, "dir", dir)
}

// evict unpublishes and removes a published env that nobody uses, and
// reports whether it did.
func (p *EnvPool) evict(key, name string) bool {
	build := flock.New(filepath.Join(p.dir, "locks", key+".lock"))
	if ok, err := build.TryLock(); err != nil || !ok {
		return false // being rebuilt
	}
	defer build.Close()
	dir := filepath.Join(p.dir, "store", name)
	use := flock.New(filepath.Join(dir, inUseFile), flock.SetFlag(os.O_RDONLY))
	if ok, err := use.TryLock(); err != nil || !ok {
		return false // in use
	}
	defer use.Close()
	link := filepath.Join(p.dir, "envs", key)
	if t, err := os.Readlink(link); err != nil || t != filepath.Join("..", "store", name) {
		return false
	}
	// Unpublish first: a reader that opened the link before this sees it
	// gone once it holds its lock, and retries.
	if err := os.Remove(link); err != nil {
		p.log.Warn("evict env", "key", key, "err", err)
		return false
	}
	p.checked.Delete(dir)
	if err := os.RemoveAll(dir); err != nil {
		p.log.Warn("evict env", "key", key, "dir", dir, "err", err)
	}
	p.log.Info("evicted env", "key", key, "dir", dir)
	return true
}
