package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/worker"
	"github.com/soma-hpc/soma/zarr"
)

const runDescription = `Runs a plan (a TOML file) on a soma-worker, waits, and prints the
result: each output, the trained states of a fit (blob references to send
back with --state, or in the plan's [states]), the filters' printed
output, and on failure the error and the Python traceback. ^C cancels the
plan on the worker. Exits 1 when the plan fails or is cancelled.

WHERE IT RUNS:
   soma run ROOT plan.toml            placement through the folder: a live
                                      worker registered in ROOT (soma-worker
                                      --root ROOT) that has the plan's
                                      [resources] and tags, on a free slot
                                      (waits while every such worker is busy).
                                      With no live worker at all, the plan
                                      runs here, in a local Python (--python
                                      or SOMA_PYTHON), and soma run says so.
   soma run --coordinator URL plan.toml   placement through soma-coordinator
                                      (no local fallback: the coordinator
                                      answers when nobody fits)
   soma run --worker URL plan.toml    straight to that worker, no placement
The lease on the worker's slot is kept alive while the plan runs; if it
is lost (this machine could not reach the folder for --timeout), the plan
is cancelled.
Each run gets its own plan id, the plan file's id with a random suffix
(digits-fit-1a2b3c4d; printed with the result), so the same plan file may
run any number of times at once; --id NAME runs it under NAME exactly.

EXAMPLES:
   soma run /scratch/$USER/soma examples/worker-digits/fit.toml
   soma run --worker http://127.0.0.1:7070 examples/worker-digits/fit.toml
   soma run --worker http://node12:7070 --token-file ~/.soma/token plan.toml --json
   soma run --worker URL forward.toml --state scale=blob:sha256:9f86... --save-dir out/
   soma-trial --root study --study s --param "lr=float:1e-3:0.1:log" -- \
     soma run ROOT plan.toml --id s-{trial}.{attempt} --param embed.lr={lr} --score acc
                                      (a study over a plan: --param sets a node's
                                      config, --score prints an output last)

A PLAN FILE (paths relative to it):
   id = "digits-fit"
   mode = "fit"                       # or "forward"
   seed = 1
   timeout = "10m"                    # optional; the worker's default otherwise
   outputs = ["clf"]                  # optional; default: the last node
   tags = ["torch"]                   # optional: placement picks a worker with these
   [resources]                        # optional: gpus, cpus, memory (bytes)
   gpus = 1
   [env]
   requirements = []                  # pip specs; system_site_packages, no_index,
   system_site_packages = true        #   find_links, index_url for offline nodes
   [input]                            # one of: npy = "X.npy", ref = "zarr:data/x.zarr?rows=0:100",
   npy = "X.npy"                      #   ref = "blob:sha256:..." (with dtype, shape),
   [targets]                          #   dtype + shape + values = [...], object = ...
   npy = "y.npy"
   [[nodes]]
   id = "scale"
   file = "filters.py"                # shipped with the plan
   class = "Standardize"
   [[nodes]]
   id = "clf"
   file = "filters.py"
   class = "Classifier"
   inputs = ["scale"]
   at = { tags = ["torch"], gpus = 1 } # optional: where this node runs; soma run ROOT
                                      #   cuts the plan into segments by it (values
                                      #   cross the cut as blobs of ROOT);
                                      #   at = { client = true }: in soma run's Python
   [nodes.env]                        # optional: this node's env (as [env]); a
   system_site_packages = false       #   change of env cuts the plan too
   [nodes.config]                     # keyword arguments of the class
   k = 3`

func newRunCommand() *cli.Command {
	return &cli.Command{
		Name:        "run",
		Usage:       "run a plan of Python filters on a soma-worker and print the result",
		UsageText:   "soma run ROOT PLAN.toml | soma run (--worker URL | --coordinator URL) PLAN.toml  [--token-file FILE] [--json] [--state NODE=REF]... [--save-dir DIR]",
		Description: runDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "worker", Usage: "send the plan straight to this worker, http://HOST:PORT (no placement)", EnvVars: []string{"SOMA_WORKER"}},
			&cli.DurationFlag{Name: "wait-worker", Usage: "with --worker: how long to wait for a worker that does not listen yet (just started)", Value: 15 * time.Second},
			&cli.StringFlag{Name: "coordinator", Usage: "place the plan through this soma-coordinator, http://HOST:PORT", EnvVars: []string{"SOMA_COORDINATOR"}},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the workers' (and coordinator's) bearer token (mode 600)", EnvVars: []string{"SOMA_TOKEN_FILE"}},
			&cli.StringFlag{Name: "root", Usage: "with --worker or --coordinator: the workers' --root, if this machine sees it too: files and large outputs go through it"},
			&cli.DurationFlag{Name: "timeout", Value: worker.DefaultHeartbeatTimeout, Usage: "with ROOT: a worker or lease silent this long is dead or stale (the workers' --timeout)"},
			&cli.StringFlag{Name: "python", Usage: "with ROOT: the interpreter for a plan run here when no worker is alive", EnvVars: []string{"SOMA_PYTHON"}},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.StringSliceFlag{Name: "state", Usage: "NODE=blob:sha256:... a trained state to load (repeatable; overrides the plan's [states])"},
			&cli.StringFlag{Name: "save-dir", Usage: "write each array output to DIR/NODE.npy"},
			&cli.StringSliceFlag{Name: "param", Usage: "NODE.KEY=VALUE: set a key of a node's [nodes.config] (repeatable; VALUE is an integer, a number, true/false, or else a string)"},
			&cli.StringFlag{Name: "id", Usage: "run the plan under exactly this id (a study's objective: --id NAME-{trial}.{attempt}); default: the plan file's id with a random suffix, new for every run"},
			&cli.StringFlag{Name: "score", Usage: "NODE: print output NODE (one number) as the last line of stdout, the score soma-trial reads from an objective"},
		},
		Action: runPlan,
	}
}

func runPlan(c *cli.Context) error {
	var rootArg, planArg string
	switch c.NArg() {
	case 1:
		planArg = c.Args().First()
	case 2:
		rootArg, planArg = c.Args().Get(0), c.Args().Get(1)
	default:
		return usagef("want ROOT PLAN.toml, or PLAN.toml with --worker or --coordinator; got %d arguments", c.NArg())
	}
	direct, coord := c.String("worker"), c.String("coordinator")
	switch {
	case direct != "" && coord != "":
		return usagef("--worker and --coordinator: give one (--worker skips placement)")
	case rootArg != "" && c.String("root") != "":
		return usagef("ROOT given twice (as an argument and as --root)")
	case rootArg == "" && direct == "" && coord == "":
		return usagef("no ROOT, --worker or --coordinator: say where the plan runs (e.g. soma run ROOT plan.toml, or --worker http://127.0.0.1:7070)")
	}
	root := rootArg
	if root == "" {
		root = c.String("root")
	}
	p, err := worker.ParsePlanFile(planArg)
	if err != nil {
		return err
	}
	if id := c.String("id"); id != "" {
		p.ID = id // checked by applyStates' ValidatePlan
	}
	if err := applyParams(p, c.StringSlice("param")); err != nil {
		return err
	}
	if err := applyStates(p, c.StringSlice("state")); err != nil {
		return err
	}
	score := c.String("score")
	if score != "" {
		if c.Bool("json") {
			return usagef("--score and --json: give one (--score's number must be stdout's last line)")
		}
		if !slices.Contains(p.Outputs, score) && (len(p.Outputs) > 0 || p.Nodes[len(p.Nodes)-1].ID != score) {
			return usagef("--score %s: not an output of plan %s (add it to outputs = [...])", score, p.ID)
		}
	}
	if c.String("id") == "" {
		// After the checks above, whose messages name the file's id.
		p.ID = runID(p.ID)
	}
	token := ""
	if f := c.String("token-file"); f != "" {
		if token, err = worker.ReadTokenFile(f); err != nil {
			return err
		}
	}
	var store *fsstore.Store
	if root != "" {
		if store, err = fsstore.Open(root, fsstore.Options{}); err != nil {
			return err
		}
		defer store.Close()
	}
	segs, err := worker.CutPlan(p)
	if err != nil {
		return err
	}
	if len(segs) > 1 {
		if store == nil {
			return usagef("plan %s has nodes with different at = {...} (%d segments): the values crossing between them go through the store; give ROOT (or --root)", p.ID, len(segs))
		}
		for _, s := range segs {
			needs := s.Plan.Requirement().String()
			if s.Plan.Resources.Client {
				needs = "the client (runs here)"
			}
			fmt.Fprintf(c.App.ErrWriter, "soma run: segment %s: nodes %s, needs %s\n", s.Plan.ID, nodeList(s.Plan), needs)
		}
	}
	res, err := worker.RunCut(c.Context, p, segs, func(ctx context.Context, sp *worker.Plan) (*worker.Result, error) {
		if sp.Resources.Client {
			return runLocally(c, store, sp, "nodes "+nodeList(sp)+" ask for the client (at = { client = true })")
		}
		if direct != "" {
			if err := waitForWorker(ctx, direct, c.Duration("wait-worker"), c.App.ErrWriter); err != nil {
				return nil, err
			}
			return runOn(ctx, direct, token, store, sp, nil)
		}
		return placeAndRun(c, store, coord, token, sp)
	})
	if err != nil {
		return err
	}
	if dir := c.String("save-dir"); dir != "" && res.State == worker.StateSucceeded {
		if err := saveOutputs(c, dir, store, res); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		err = writeResultJSON(c.App.Writer, res)
	} else {
		err = writeResultText(c.App.Writer, res)
	}
	if err != nil {
		return err
	}
	if res.State != worker.StateSucceeded {
		return errPlanFailed{res.State}
	}
	if score != "" {
		x, err := scoreOf(res.Outputs[score])
		if err != nil {
			return fmt.Errorf("--score %s: %w", score, err)
		}
		fmt.Fprintln(c.App.Writer, strconv.FormatFloat(x, 'g', -1, 64))
	}
	return nil
}

// runID returns the id of one run of the plan whose file says id: id and
// a random suffix (32 bits), cut to the 128 characters a plan id may
// have. Bug (issue 15): every run used the file's id, and a worker refuses
// a plan whose id a running plan has, so running one plan file twice at
// once failed with 409 unless each run was given --id.
func runID(id string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := "-" + hex.EncodeToString(b[:])
	const maxID = 128 // worker.ValidatePlan's limit
	if len(id) > maxID-len(suffix) {
		id = id[:maxID-len(suffix)]
	}
	return id + suffix
}

// applyParams sets node config keys from --param NODE.KEY=VALUE, so that
// an objective of soma-trial can run one plan file at many points
// (soma run ROOT plan.toml --param embed.lr={lr}). A node that is not in
// the plan is refused: a typo must not run the default. A key that is
// not in [nodes.config] is added (a filter's defaults live in its
// __init__, whose TypeError names a misspelt keyword).
func applyParams(p *worker.Plan, specs []string) error {
	for _, s := range specs {
		lhs, val, ok := strings.Cut(s, "=")
		node, key, ok2 := strings.Cut(lhs, ".")
		if !ok || !ok2 || node == "" || key == "" {
			return usagef("--param %q: want NODE.KEY=VALUE (e.g. --param embed.lr=0.01)", s)
		}
		i := slices.IndexFunc(p.Nodes, func(n worker.Node) bool { return n.ID == node })
		if i < 0 {
			return usagef("--param %q: plan %s has no node %q (nodes: %s)", s, p.ID, node, nodeList(p))
		}
		n := &p.Nodes[i]
		cfg := make(map[string]any, len(n.Config)+1)
		maps.Copy(cfg, n.Config) // the plan's map may be shared
		cfg[key] = paramValue(val)
		n.Config = cfg
	}
	return nil
}

// paramValue reads VALUE as TOML would type it: an integer stays an int
// (a layer width must not arrive in Python as 16.0), then a float, a
// bool, and anything else is a string.
func paramValue(s string) any {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f
	}
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return b
	}
	return s
}

// scoreOf reads one number from an output: a plain number (an object) or
// an array of one element.
func scoreOf(v worker.Value) (float64, error) {
	switch v.Kind {
	case worker.KindObject:
		switch x := v.Object.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		case int8, int16, int32, int, uint8, uint16, uint32, uint64, float32:
			return strconv.ParseFloat(fmt.Sprint(x), 64)
		}
		return 0, fmt.Errorf("output is %s, not a number", describe(v))
	case worker.KindArray:
		if v.Ref == "" && elements(v) == 1 {
			vals, err := numbers(v, 1)
			if err == nil {
				return strconv.ParseFloat(fmt.Sprint(vals[0]), 64)
			}
		}
	}
	return 0, fmt.Errorf("output is %s; want one number (return a float from forward)", describe(v))
}

// runOn sends p to the worker at url and waits for its result. With a
// placement, the plan is cancelled when pl.Lost() closes: the lease may
// then belong to another placer, which may send that slot a plan.
func runOn(ctx context.Context, url, token string, store *fsstore.Store, p *worker.Plan, pl *worker.Placement) (*worker.Result, error) {
	client, err := worker.NewClient(url, token, nil)
	if err != nil {
		return nil, usageError{err}
	}
	client.Store = store
	// The plan socket Run opens is this plan's alone: close it after.
	defer client.CloseIdle()
	if pl == nil {
		return client.Run(ctx, p)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lostErr error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-pl.Lost():
			lostErr = pl.Err()
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := client.Run(ctx, p)
	cancel()
	<-watched
	if lostErr != nil {
		return nil, fmt.Errorf("plan %s cancelled: %w", p.ID, lostErr)
	}
	return res, err
}

// waitForWorker waits up to limit for something to listen at url, saying
// once that it waits: a worker started in the background a moment ago
// (soma-worker ... &, then soma run --worker) may not listen yet, and the
// run used to fail at once with "connection refused". Only a refused
// connection is waited out; any other answer or error is left to the run.
func waitForWorker(ctx context.Context, url string, limit time.Duration, errw io.Writer) error {
	client, err := worker.NewClient(url, "", nil)
	if err != nil {
		return usageError{err}
	}
	deadline := time.Now().Add(limit)
	said := false
	for {
		_, err := client.Health(ctx)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("nothing listens at %s (waited %s): start soma-worker there, or check --worker (%w)", url, limit, err)
		}
		if !said {
			fmt.Fprintf(errw, "soma run: nothing listens at %s yet; waiting up to %s for the worker (--wait-worker)\n", url, limit)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// placeAndRun places p through the folder (store) or a coordinator, runs
// it on the chosen worker under the lease, and releases the lease. With
// the folder and no live worker at all, p runs here instead.
func placeAndRun(c *cli.Context, store *fsstore.Store, coord, token string, p *worker.Plan) (*worker.Result, error) {
	ctx := c.Context
	holder := "soma run"
	if me, err := slurm.Self(); err == nil {
		holder = "soma run on " + me.Who()
	}
	opts := worker.PlaceOptions{Wait: true, Holder: holder, Timeout: c.Duration("timeout")}
	req := p.Requirement()
	var (
		pl  *worker.Placement
		err error
	)
	if coord != "" {
		pl, err = (&worker.CoordinatorClient{URL: coord, Token: token}).Place(ctx, req, opts)
	} else {
		pl, err = worker.Place(ctx, store, req, opts)
	}
	var nm *worker.NoMatchError
	if coord == "" && errors.As(err, &nm) && nm.Alive == 0 {
		why := "no worker has registered in " + store.Root()
		if nm.Dead > 0 {
			why = fmt.Sprintf("the %d worker(s) registered in %s are dead (no heartbeat for %s)", nm.Dead, store.Root(), c.Duration("timeout"))
		}
		return runLocally(c, store, p, why)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pl.Release(rctx); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "soma run: %v (the lease goes stale and is reclaimed after the timeout)\n", err)
		}
	}()
	fmt.Fprintf(c.App.ErrWriter, "soma run: plan %s placed on worker %s (%s), slot %d\n", p.ID, pl.Worker.ID, pl.Worker.Address, pl.Lease.Slot)
	return runOn(ctx, pl.Worker.Address, token, store, p, pl)
}

// runLocally runs p in this process's own worker (no HTTP server, no
// daemon to start): a laptop needs no soma-worker. It says so on stderr,
// once, with the reason.
func runLocally(c *cli.Context, store *fsstore.Store, p *worker.Plan, why string) (*worker.Result, error) {
	python := c.String("python")
	if python == "" {
		return nil, fmt.Errorf("%s, and no Python to run plan %s here: pass --python /usr/bin/python3 or set SOMA_PYTHON (or start a soma-worker)", why, p.ID)
	}
	base := filepath.Join(os.TempDir(), "soma-run-"+strconv.Itoa(os.Getuid()))
	fmt.Fprintf(c.App.ErrWriter, "soma run: %s; running plan %s here, with %s (venvs under %s)\n", why, p.ID, python, base)
	envs, err := worker.NewEnvPool(worker.EnvOptions{Dir: filepath.Join(base, "envs"), Python: python})
	if err != nil {
		return nil, err
	}
	res, err := worker.DetectResources(worker.ResourceOptions{Env: os.Getenv})
	if err != nil {
		return nil, err
	}
	cache, err := zarr.OpenCache(zarr.DefaultCacheDir(), zarr.CacheOptions{})
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Options{Store: store, Envs: envs, Python: python, WorkDir: filepath.Join(base, "work"),
		ZarrCache: cache, Resources: res, Limits: worker.Limits{MaxPlans: 1}})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.Run(c.Context, p)
}

func nodeList(p *worker.Plan) string {
	ids := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		ids[i] = n.ID
	}
	return strings.Join(ids, ",")
}

// errPlanFailed exits 1 after the result has been printed.
type errPlanFailed struct{ state worker.PlanState }

func (e errPlanFailed) Error() string { return "plan " + string(e.state) }

func applyStates(p *worker.Plan, specs []string) error {
	for _, s := range specs {
		node, ref, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(ref, "blob:") {
			return usagef("--state %q: want NODE=blob:sha256:...", s)
		}
		if p.States == nil {
			p.States = map[string]worker.Value{}
		}
		p.States[node] = worker.Value{Kind: worker.KindBytes, Ref: ref}
	}
	return worker.ValidatePlan(p)
}

// describe returns one line about a value.
func describe(v worker.Value) string {
	switch v.Kind {
	case worker.KindArray:
		where := fmt.Sprintf("inline, %d bytes", len(v.Data))
		if v.Ref != "" {
			where = v.Ref
		}
		s := fmt.Sprintf("%s%v (%s)", v.DType, v.Shape, where)
		if v.Ref == "" {
			if vals, err := numbers(v, 8); err == nil {
				s += ": " + strings.Trim(fmt.Sprint(vals), "[]")
				if int64(len(vals)) < elements(v) {
					s += " ..."
				}
			}
		}
		return s
	case worker.KindBytes:
		if v.Ref != "" {
			return v.Ref
		}
		return fmt.Sprintf("%d bytes inline", len(v.Data))
	case worker.KindObject:
		b, _ := json.Marshal(v.Object)
		return string(b)
	}
	return "None"
}

func elements(v worker.Value) int64 {
	n := int64(1)
	for _, s := range v.Shape {
		n *= s
	}
	return n
}

// numbers decodes up to limit elements of an inline array (all if limit
// is negative).
func numbers(v worker.Value, limit int) ([]any, error) {
	t, err := zarr.ParseDataType(v.DType)
	if err != nil {
		return nil, err
	}
	d := &zarr.Data{Type: t, Shape: v.Shape, Bytes: v.Data}
	n := d.Len()
	if limit >= 0 && int64(limit) < n {
		n = int64(limit)
	}
	out := make([]any, n)
	for i := range n {
		x := d.At(i)
		if f, ok := x.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			x = fmt.Sprint(f)
		}
		if f, ok := x.(float32); ok && (math.IsNaN(float64(f)) || math.IsInf(float64(f), 0)) {
			x = fmt.Sprint(f)
		}
		out[i] = x
	}
	return out, nil
}

func writeResultText(w io.Writer, r *worker.Result) error {
	fmt.Fprintf(w, "plan %s: %s in %.1f ms\n", r.ID, r.State, r.DurationMS)
	for _, id := range sortedKeys(r.Outputs) {
		fmt.Fprintf(w, "output %s: %s\n", id, describe(r.Outputs[id]))
	}
	for _, id := range sortedKeys(r.States) {
		fmt.Fprintf(w, "state %s: %s\n", id, describe(r.States[id]))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	if r.Traceback != "" {
		fmt.Fprintf(w, "traceback:\n%s", indentLines(r.Traceback))
	}
	if r.LogTail != "" {
		fmt.Fprintf(w, "log (what the filters printed):\n%s", indentLines(r.LogTail))
	}
	return nil
}

func indentLines(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func sortedKeys(m map[string]worker.Value) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonValue is a value in soma run --json.
type jsonValue struct {
	Kind   string  `json:"kind"`
	DType  string  `json:"dtype,omitempty"`
	Shape  []int64 `json:"shape,omitempty"`
	Ref    string  `json:"ref,omitempty"`
	Values []any   `json:"values,omitempty"`
	Bytes  int     `json:"bytes,omitempty"`
	Object any     `json:"object,omitempty"`
}

type jsonResult struct {
	ID         string               `json:"id"`
	State      string               `json:"state"`
	DurationMS float64              `json:"duration_ms"`
	Outputs    map[string]jsonValue `json:"outputs,omitempty"`
	States     map[string]jsonValue `json:"states,omitempty"`
	Error      string               `json:"error,omitempty"`
	Traceback  string               `json:"traceback,omitempty"`
	Log        string               `json:"log,omitempty"`
}

func toJSON(v worker.Value) jsonValue {
	j := jsonValue{Kind: string(v.Kind), DType: v.DType, Shape: v.Shape, Ref: v.Ref, Object: v.Object}
	if v.Kind == worker.KindArray && v.Ref == "" {
		j.Values, _ = numbers(v, -1)
	}
	if v.Kind == worker.KindBytes && v.Ref == "" {
		j.Bytes = len(v.Data)
	}
	return j
}

func writeResultJSON(w io.Writer, r *worker.Result) error {
	out := jsonResult{ID: r.ID, State: string(r.State), DurationMS: r.DurationMS, Error: r.Error, Traceback: r.Traceback, Log: r.LogTail}
	if len(r.Outputs) > 0 {
		out.Outputs = map[string]jsonValue{}
		for k, v := range r.Outputs {
			out.Outputs[k] = toJSON(v)
		}
	}
	if len(r.States) > 0 {
		out.States = map[string]jsonValue{}
		for k, v := range r.States {
			out.States[k] = toJSON(v)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// saveOutputs writes each array output as DIR/NODE.npy (numpy.load reads
// it), fetching blob references through --root.
func saveOutputs(c *cli.Context, dir string, store *fsstore.Store, r *worker.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for id, v := range r.Outputs {
		if v.Kind != worker.KindArray {
			continue
		}
		data := v.Data
		if v.Ref != "" {
			if store == nil {
				return fmt.Errorf("output %s is %s: pass --root to fetch it", id, v.Ref)
			}
			d, err := fsstore.ParseDigest(strings.TrimPrefix(v.Ref, "blob:"))
			if err != nil {
				return err
			}
			if data, err = store.Get(c.Context, d); err != nil {
				return err
			}
		}
		path := filepath.Join(dir, id+".npy")
		if err := fsstore.WriteFileAtomic(path, strings.NewReader(string(npyBytes(v.DType, v.Shape, data)))); err != nil {
			return fmt.Errorf("save %s: %w", path, err)
		}
	}
	return nil
}

var npyDescr = map[string]string{
	"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2", "int32": "<i4",
	"uint32": "<u4", "int64": "<i8", "uint64": "<u8", "float32": "<f4", "float64": "<f8",
}

// npyBytes encodes a .npy file (format 1.0).
func npyBytes(dtype string, shape []int64, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, s := range shape {
		dims[i] = fmt.Sprint(s)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", npyDescr[dtype], tuple)
	pad := 64 - (10+len(h)+1)%64
	h += strings.Repeat(" ", pad%64) + "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(out[8:], uint16(len(h)))
	out = append(out, h...)
	return append(out, data...)
}
