// Command slowfs runs the slow filesystem of package slowfs (issue 18): a
// FUSE loopback that waits a delay in every metadata operation, caches
// nothing in the kernel, and counts operations by kind. scripts/slowfs.sh
// starts and stops it; use that.
//
//	slowfs serve -backing DIR -ctl SOCK [-delay 1ms] [-trace FILE] MOUNTPOINT
//	slowfs counts -ctl SOCK [-reset]
//
// serve mounts, answers the counters on the unix socket SOCK, and runs
// until SIGTERM or SIGINT, then unmounts (retrying while the mount is
// busy) and exits. counts prints the counts as one JSON object; -reset
// also starts them from zero.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/soma-hpc/soma/internal/tools/slowfs"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slowfs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: slowfs serve -backing DIR -ctl SOCK [-delay D] MOUNTPOINT | slowfs counts -ctl SOCK [-reset]")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "counts":
		fl := flag.NewFlagSet("counts", flag.ContinueOnError)
		sock := fl.String("ctl", "", "the control socket of the running slowfs")
		reset := fl.Bool("reset", false, "start the counts from zero after printing them")
		if err := fl.Parse(args[1:]); err != nil {
			return err
		}
		if *sock == "" {
			return errors.New("counts: -ctl SOCK is required")
		}
		c, err := slowfs.Fetch(context.Background(), *sock, *reset)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(c)
	}
	return fmt.Errorf("unknown command %q (serve or counts)", args[0])
}

func serve(args []string) error {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	backing := fl.String("backing", "", "the folder the mount shows (on a local disk)")
	sock := fl.String("ctl", "", "the unix socket to answer the counters on")
	delay := fl.Duration("delay", time.Millisecond, "the wait in every metadata operation")
	trace := fl.String("trace", "", "write one line per request to this file (kind, path, name)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *backing == "" || *sock == "" || fl.NArg() != 1 {
		return errors.New("serve: usage: slowfs serve -backing DIR -ctl SOCK [-delay D] MOUNTPOINT")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	o := slowfs.Options{Delay: *delay}
	if *trace != "" {
		f, err := os.Create(*trace)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Trace = f
	}
	m, err := slowfs.New(fl.Arg(0), *backing, o)
	if err != nil {
		return err
	}
	os.Remove(*sock) // a socket left by a killed run
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		m.Unmount()
		return fmt.Errorf("control socket: %w", err)
	}
	srv := &http.Server{Handler: m.Handler()}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "slowfs: %s mounted (backing %s, delay %v, control %s)\n", fl.Arg(0), *backing, *delay, *sock)
	<-ctx.Done()
	srv.Close()
	os.Remove(*sock)
	// A process that still has a file open in the mount makes umount
	// fail with EBUSY; it is usually one that is about to exit.
	for i := 0; ; i++ {
		err := m.Unmount()
		if err == nil {
			return nil
		}
		if i == 50 {
			// Still busy after 10 s: leave no dead mount behind.
			return errors.Join(err, m.Detach())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
