// Command soma-coordinator places plans on soma workers for clients that
// cannot see the shared folder: it reads the worker registry out of the
// folder, hands out a worker's address and a lease, and steps aside. It
// keeps no state; run as many as you like, restart them at will.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/worker"
)

// Exit statuses (documented in --help).
const (
	exitOK    = 0 // stopped by SIGINT or SIGTERM after a graceful shutdown
	exitError = 1 // an error: the folder, the token file, the listen address
	exitUsage = 2 // bad flags
)

// shutdownGrace bounds how long a graceful shutdown waits for requests
// in flight; each is a few file reads, so this is generous.
const shutdownGrace = 10 * time.Second

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

const description = `soma-coordinator serves placement over HTTP for clients that cannot see
the folder (--root) that soma-workers register in. Each answer is read
from the folder at that moment: it keeps nothing in memory, so several may
serve one folder and a restarted one answers the same. It never sees a
plan or its data: /submit returns a worker's address and a lease, and the
client talks to the worker directly.

   GET  /health     the folder answers
   GET  /workers    every worker, alive or not (JSON, as soma workers --json)
   GET  /summary    counts: workers, alive, slots, leases, GPUs
   POST /submit     {"requirement":{"gpus":1,"tags":["torch"]}} -> worker, address, lease
   POST /renew      {"lease":{...}}: keep the lease fresh, every renew_every_s
   POST /complete   {"lease":{...}}: the plan is over, free the slot

Every request carries "Authorization: Bearer TOKEN", TOKEN being the one
line of --token-file. The file must be readable by its owner only (chmod
600), and without one soma-coordinator listens on loopback only.

EXAMPLE:
   head -c 24 /dev/urandom | base64 > ~/.soma/token; chmod 600 ~/.soma/token
   soma-coordinator --root /scratch/$USER/soma --listen 0.0.0.0:7071 --token-file ~/.soma/token

EXIT STATUS: 0 stopped by SIGINT/SIGTERM after a graceful shutdown;
1 error (one line on stderr says which, and what to do); 2 bad usage.`

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:            "soma-coordinator",
		Usage:           "place plans on soma workers over HTTP, from the folder",
		UsageText:       "soma-coordinator --root DIR [--listen ADDR] [--token-file FILE] [--timeout D]",
		Description:     description,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "the soma folder the workers register in (their --root)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7071", Usage: "`ADDR` to serve on; beyond loopback needs --token-file"},
			&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the bearer token (mode 600)"},
			&cli.DurationFlag{Name: "timeout", Value: worker.DefaultHeartbeatTimeout, Usage: "a worker or lease silent this long is dead or stale"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError{fmt.Errorf("unexpected arguments %q (everything is a flag)", c.Args().Slice())}
			}
			if c.String("root") == "" {
				return usageError{errors.New("--root is required: the folder the workers register in")}
			}
			if c.Duration("timeout") <= 0 {
				return usageError{fmt.Errorf("--timeout %s: want a positive duration such as 30s", c.Duration("timeout"))}
			}
			return serve(c.Context, options{
				root: c.String("root"), listen: c.String("listen"), tokenFile: c.String("token-file"),
				timeout: c.Duration("timeout"), stderr: stderr,
			})
		},
	}
}

type options struct {
	root, listen, tokenFile string
	timeout                 time.Duration
	stderr                  io.Writer
}

// serve runs the coordinator until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, o options) error {
	store, err := fsstore.Open(o.root, fsstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	token := ""
	if o.tokenFile != "" {
		if token, err = worker.ReadTokenFile(o.tokenFile); err != nil {
			return err
		}
	}
	if err := worker.CheckListen(o.listen, token); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.listen, err)
	}
	log := slog.New(slog.NewTextHandler(o.stderr, nil))
	srv := &http.Server{
		Handler:           worker.NewCoordinator(store, worker.CoordinatorOptions{Token: token, Timeout: o.timeout, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(o.stderr, "soma-coordinator: serving %s on http://%s\n", store.Root(), ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done // Serve has returned ErrServerClosed
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(o.stderr, "soma-coordinator: stopped")
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := newApp(stdout, stderr).RunContext(ctx, args)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "soma-coordinator: %v (see soma-coordinator --help)\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "soma-coordinator: %v\n", err)
		return exitError
	}
}
