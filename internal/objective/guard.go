package objective

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An objective runs under a guard: a small process between soma-trial and
// the objective, which is the calling program itself re-executed
// (Options.Guard, soma-trial's /proc/self/exe) with guardArg as its first
// argument, so that no second binary has to be installed. It exists
// because a process tree cannot be made to end with one signal (issue 13:
// `sh -c 'sleep 6; echo end'` under a soma-trial killed with SIGKILL left
// `sleep` running, reparented to init, while the retry of its trial ran
// elsewhere; Pdeathsig reaches the direct child only, and a process
// group misses whatever calls setsid). The guard
//
//   - is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): every process
//     of the objective's tree that loses its parent, setsid or not, is
//     reparented to the guard rather than to init, so that the tree stays
//     findable and reaped;
//   - starts the objective in its own process group, with Pdeathsig
//     SIGKILL (if the guard itself is killed, the objective dies too);
//   - forwards to the objective's process group the signals soma-trial
//     asks for (soma-trial's own signals never reach the guard's children
//     otherwise, and a signal sent by pid could hit a reused pid once the
//     guard has reaped it: only the guard knows when it has);
//   - tells soma-trial the objective's pid, then its wait status (exit
//     code or signal, as if soma-trial had waited for it itself), then
//     "done" once nothing of its tree is left;
//   - when the objective has exited, gives what it left running
//     leftoverGrace to end on its own, then SIGTERM, then SIGKILL
//     leftoverGrace later;
//   - when soma-trial dies, by any death including SIGKILL (the last
//     holder of soma-trial's end of the socket closes it), kills the
//     whole tree with SIGKILL at once and exits: the attempt is lost and
//     will be retried elsewhere, so nothing of it may run on.
//
// A guard runs one objective at a time and then waits for the next: it
// is started once per concurrent run and kept (guardPool). It used to be
// started once per objective, and a Go program's start (exec of a 9 MB
// binary, its runtime and package initialisation) cost soma-trial about
// 18 ms of CPU per trial: 39-53 trials/s of /bin/echo where it had done
// 232-496 before the guard (scripts/bench-trial.sh). Kept, the guard
// costs a fork and an exec of the objective per trial, as running it
// directly would.
//
// The guard ignores the stop signals sent to it directly (Ctrl-C reaches
// soma-trial's process group, Slurm signals every process of a step):
// soma-trial decides what the objective gets. Its fd 3 is a
// SOCK_SEQPACKET socket to soma-trial; each packet one message:
//
//	soma-trial → guard: "run SEQ LEN" with the objective's fds 0-4 as
//	    SCM_RIGHTS, then LEN bytes of JSON (guardRun) in packets of at
//	    most guardChunk bytes; "signal SEQ N"; "kill SEQ"
//	guard → soma-trial: "pid SEQ N" or "error SEQ MESSAGE", then
//	    "exit SEQ WAITSTATUS", then "done SEQ"
//
// SEQ numbers the runs of one guard: a command for a run that has ended
// (a kill sent as the objective exited) must not reach the next one.
const guardArg = "__soma-objective-guard-v2"

// guardFD is the guard's socket to soma-trial (see guardArg).
const guardFD = 3

// guardChunk is the largest packet of a run's JSON: far below the
// socket's buffer, which bounds a SOCK_SEQPACKET packet (an environment
// may be larger than that).
const guardChunk = 32 << 10

// guardRun is what a guard needs to start one objective, besides its
// descriptors.
type guardRun struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
}

// LeftoverGrace is how long the processes an objective leaves running
// when it exits get to end on their own, and then between their SIGTERM
// and SIGKILL (soma-trial --help documents it).
const LeftoverGrace = 2 * time.Second

// GuardMain runs the guard and exits if this process was started as an
// objective's guard (see guardArg); otherwise it returns at once. A
// program that runs objectives (soma-trial's main, and the TestMain of
// tests that call Run) calls it first and passes its own executable as
// Options.Guard.
func GuardMain() {
	if len(os.Args) < 2 || os.Args[1] != guardArg {
		return
	}
	os.Exit(guard(os.Args[2:]))
}

// guardMsg is one message the guard got from soma-trial.
type guardMsg struct {
	verb string
	seq  uint64
	arg  string
	fds  []int     // "run": the objective's 0-4
	run  *guardRun // "run"
	err  error     // "run": the JSON did not arrive whole
}

// guard is the guard's main: args are the leftover grace.
func guard(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "soma objective guard: want GRACE, got %q\n", args)
		return 2
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "soma objective guard: grace %q: %v\n", args[0], err)
		return 2
	}
	// Pdeathsig belongs to the thread that forks: every objective is
	// started from this goroutine, locked to this thread, which lives as
	// long as the guard.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 16)
	// Notify, not Ignore: an ignored signal stays ignored across exec,
	// and the objective must get the default dispositions.
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "soma objective guard: prctl(PR_SET_CHILD_SUBREAPER): %v\n", err)
		return 2
	}
	f := os.NewFile(guardFD, "guard-socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "soma objective guard: fd %d: %v\n", guardFD, err)
		return 2
	}
	conn, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintf(os.Stderr, "soma objective guard: fd %d is a %T, not a unix socket\n", guardFD, c)
		return 2
	}
	msgs := make(chan guardMsg)
	go readGuardMsgs(conn, msgs)
	send := func(format string, a ...any) {
		_, _ = conn.Write(fmt.Appendf(nil, format, a...))
	}
	for {
		m, ok := <-msgs
		if !ok {
			return 0 // soma-trial has gone, and nothing is running
		}
		if m.verb != "run" {
			continue // a command for a run that has ended
		}
		if !runGuarded(m, grace, msgs, send) {
			return 0
		}
		send("done %d", m.seq)
	}
}

// readGuardMsgs reads soma-trial's messages into msgs until the socket
// closes (soma-trial has gone), then closes msgs.
func readGuardMsgs(conn *net.UnixConn, msgs chan<- guardMsg) {
	defer close(msgs)
	buf := make([]byte, guardChunk+1)
	oob := make([]byte, syscall.CmsgSpace(5*4))
	for {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 && oobn == 0 {
			return
		}
		var fds []int
		if oobn > 0 {
			fds = unixRights(oob[:oobn])
		}
		if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
			closeAll(fds)
			fmt.Fprintf(os.Stderr, "soma objective guard: a message was truncated; giving up\n")
			return
		}
		f := strings.Fields(string(buf[:n]))
		if len(f) < 2 {
			closeAll(fds)
			continue
		}
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			closeAll(fds)
			continue
		}
		m := guardMsg{verb: f[0], seq: seq, fds: fds}
		if len(f) > 2 {
			m.arg = f[2]
		}
		if m.verb == "run" {
			size, _ := strconv.Atoi(m.arg)
			var js []byte
			for len(js) < size {
				n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
				if err != nil || n == 0 {
					closeAll(fds)
					return
				}
				js = append(js, buf[:n]...)
			}
			m.run = new(guardRun)
			if err := json.Unmarshal(js, m.run); err != nil {
				m.err = fmt.Errorf("the run's description: %w", err)
			} else if len(fds) != 5 {
				m.err = fmt.Errorf("got %d descriptors with the run, want 5", len(fds))
			}
		} else {
			closeAll(fds)
			m.fds = nil
		}
		msgs <- m
	}
}

// unixRights returns the descriptors passed in oob.
func unixRights(oob []byte) []int {
	cms, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, cm := range cms {
		if r, err := syscall.ParseUnixRights(&cm); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// runGuarded starts m's objective and waits until nothing of its tree is
// left. It returns false if soma-trial has gone (the tree was killed).
func runGuarded(m guardMsg, grace time.Duration, msgs <-chan guardMsg, send func(string, ...any)) bool {
	if m.err != nil {
		closeAll(m.fds)
		send("error %d 0 guard: %v", m.seq, m.err)
		return true
	}
	pid, err := syscall.ForkExec(m.run.Path, m.run.Argv, &syscall.ProcAttr{
		Dir:   m.run.Dir,
		Env:   m.run.Env,
		Files: []uintptr{uintptr(m.fds[0]), uintptr(m.fds[1]), uintptr(m.fds[2]), uintptr(m.fds[3]), uintptr(m.fds[4])},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	// The objective holds its descriptors now: the report pipe's end of
	// file means that every process of its tree is gone.
	closeAll(m.fds)
	if err != nil {
		// The errno travels as a number, so that soma-trial's error
		// still says which (errors.Is fs.ErrNotExist, fs.ErrPermission).
		if errno, ok := err.(syscall.Errno); ok {
			send("error %d %d %s", m.seq, int(errno), m.run.Path)
		} else {
			send("error %d 0 %s: %v", m.seq, m.run.Path, err)
		}
		return true
	}
	send("pid %d %d", m.seq, pid)

	type reaped struct {
		pid int
		ws  syscall.WaitStatus
	}
	// One goroutine reaps every child: the objective and whatever of its
	// tree is reparented here, until there is none (ECHILD: the tree is
	// gone, and nothing can join it). (Between its reaping the objective
	// and this loop hearing of it, a forwarded signal still goes to the
	// objective's process group: its id is not reused while any member
	// lives, and a pid is not recycled within moments.)
	exits := make(chan reaped)
	go func() {
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				close(exits)
				return
			}
			exits <- reaped{p, ws}
		}
	}()

	alive := true // soma-trial
	running := true
	var term, kill <-chan time.Time
	var sweep *time.Ticker
	defer func() {
		if sweep != nil {
			sweep.Stop()
		}
	}()
	killAll := func() {
		if running {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		signalTree(syscall.SIGKILL)
		if sweep == nil {
			// Until nothing is left: a process may fork between a look
			// at the tree and its kill.
			sweep = time.NewTicker(50 * time.Millisecond)
		}
	}
	var sweeps <-chan time.Time
	for {
		if sweep != nil {
			sweeps = sweep.C
		}
		select {
		case e, ok := <-exits:
			if !ok {
				return alive
			}
			if e.pid == pid {
				running = false
				if alive {
					send("exit %d %d", m.seq, int(e.ws))
				}
				term = time.After(grace)
			}
		case c, ok := <-msgs:
			if !ok {
				msgs = nil
				alive = false
				killAll()
				continue
			}
			closeAll(c.fds)
			if c.seq != m.seq {
				continue
			}
			switch c.verb {
			case "signal":
				if n, err := strconv.Atoi(c.arg); err == nil && running {
					_ = syscall.Kill(-pid, syscall.Signal(n))
				}
			case "kill":
				killAll()
			}
		case <-term:
			term = nil
			signalTree(syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			kill = nil
			killAll()
		case <-sweeps:
			signalTree(syscall.SIGKILL)
		}
	}
}

// signalTree sends sig to every descendant of this process.
func signalTree(sig syscall.Signal) {
	for _, p := range descendants(os.Getpid()) {
		_ = syscall.Kill(p, sig)
	}
}

// descendants lists the processes below root, read from /proc/*/stat
// (each one's parent). A process that ends meanwhile is simply missed:
// the guard looks again until none is left.
func descendants(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// guardProc is a running guard, seen from soma-trial.
type guardProc struct {
	path string
	cmd  *exec.Cmd
	conn *net.UnixConn
	seq  uint64
	dead chan struct{} // closed when the guard has exited
	werr error         // its wait error, once dead is closed
}

// maxIdleGuards bounds the guards kept between runs: as many as a
// program ran at once, within reason.
const maxIdleGuards = 256

// guardPool keeps the idle guards, by executable.
var guardPool struct {
	mu   sync.Mutex
	idle map[string][]*guardProc
}

// takeGuard returns an idle guard for path, or starts one.
func takeGuard(path string) (*guardProc, error) {
	guardPool.mu.Lock()
	if l := guardPool.idle[path]; len(l) > 0 {
		g := l[len(l)-1]
		guardPool.idle[path] = l[:len(l)-1]
		guardPool.mu.Unlock()
		return g, nil
	}
	guardPool.mu.Unlock()
	return startGuard(path)
}

// startGuard starts a guard: path re-executed with guardArg.
func startGuard(path string) (*guardProc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("objective: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "guard"), os.NewFile(uintptr(fds[1]), "guard")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("objective: guard socket: %w", err)
	}
	cmd := exec.Command(path, guardArg, LeftoverGrace.String())
	cmd.Stderr = os.Stderr // only if the guard itself breaks
	cmd.ExtraFiles = []*os.File{theirs}
	if err := cmd.Start(); err != nil {
		c.Close()
		return nil, err
	}
	g := &guardProc{path: path, cmd: cmd, conn: c.(*net.UnixConn), dead: make(chan struct{})}
	go func() {
		g.werr = cmd.Wait()
		close(g.dead)
	}()
	return g, nil
}

// release ends a run on g: back to the pool if the run ended cleanly
// (its "done" came), else g is closed, which makes it kill what is left
// and exit.
func (g *guardProc) release(clean bool) {
	if clean {
		guardPool.mu.Lock()
		if guardPool.idle == nil {
			guardPool.idle = map[string][]*guardProc{}
		}
		if len(guardPool.idle[g.path]) < maxIdleGuards {
			guardPool.idle[g.path] = append(guardPool.idle[g.path], g)
			guardPool.mu.Unlock()
			return
		}
		guardPool.mu.Unlock()
	}
	g.conn.Close()
}

// start asks g to run r with fds as its 0-4, and returns the run's
// number.
func (g *guardProc) start(r guardRun, fds []int) (uint64, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	g.seq++
	if _, _, err := g.conn.WriteMsgUnix(fmt.Appendf(nil, "run %d %d", g.seq, len(js)), syscall.UnixRights(fds...), nil); err != nil {
		return 0, err
	}
	for len(js) > 0 {
		n := min(len(js), guardChunk)
		if _, err := g.conn.Write(js[:n]); err != nil {
			return 0, err
		}
		js = js[n:]
	}
	return g.seq, nil
}

// command sends soma-trial's command verb (with arg) for run seq.
func (g *guardProc) command(seq uint64, verb, arg string) {
	msg := fmt.Appendf(nil, "%s %d", verb, seq)
	if arg != "" {
		msg = fmt.Appendf(msg, " %s", arg)
	}
	_, _ = g.conn.Write(msg)
}

// guardReply is one message from a guard about run seq.
type guardReply struct {
	verb, arg string
}

// replies reads the guard's messages about run seq into a channel, up to
// "done"; the channel closes after "done", or when the guard has gone.
func (g *guardProc) replies(seq uint64) <-chan guardReply {
	ch := make(chan guardReply, 4)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := g.conn.Read(buf)
			if err != nil || n == 0 {
				return
			}
			verb, rest, _ := strings.Cut(string(buf[:n]), " ")
			s, arg, _ := strings.Cut(rest, " ")
			if s != strconv.FormatUint(seq, 10) {
				continue
			}
			ch <- guardReply{verb, arg}
			if verb == "done" {
				return
			}
		}
	}()
	return ch
}

// execError is the cause carried by a guard's "error" reply, whose arg is
// "<errno> <text>": the text, wrapping the errno when there is one, so
// that a missing program (fs.ErrNotExist) and one that may not be run
// (fs.ErrPermission) can be told apart with errors.Is.
func execError(arg string) error {
	n, text, _ := strings.Cut(arg, " ")
	e, err := strconv.Atoi(n)
	if err != nil {
		return errors.New(arg)
	}
	if e == 0 {
		return errors.New(text)
	}
	return fmt.Errorf("%s: %w", text, syscall.Errno(e))
}

// gone describes the guard's end, after its socket closed.
func (g *guardProc) gone() error {
	select {
	case <-g.dead:
	case <-time.After(5 * time.Second):
		return errors.New("its socket closed")
	}
	if g.werr == nil {
		return errors.New("it exited")
	}
	return g.werr
}
