package objective

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
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
//     asks for on the command pipe (soma-trial's own signals never reach
//     the guard's children otherwise, and a signal sent by pid could hit
//     a reused pid once the guard has reaped it: only the guard knows when
//     it has);
//   - tells soma-trial, on the status pipe, the objective's pid and then
//     its wait status (exit code or signal, as if soma-trial had waited
//     for it itself);
//   - when the objective has exited, gives what it left running
//     leftoverGrace to end on its own, then SIGTERM, then SIGKILL
//     leftoverGrace later, and exits once nothing is left;
//   - when soma-trial dies, by any death including SIGKILL (the command
//     pipe's last writer closes), kills the whole tree with SIGKILL at
//     once: the attempt is lost and will be retried elsewhere, so nothing
//     of it may run on.
//
// The guard ignores the stop signals sent to it directly (Ctrl-C reaches
// soma-trial's process group, Slurm signals every process of a step):
// soma-trial decides what the objective gets. Its descriptors: 0-2 are
// the objective's stdin, stdout and stderr; 3 and 4 the report and
// verdict pipes, passed on and closed; 5 the command pipe (lines
// "signal <n>" and "kill"); 6 the status pipe (lines "pid <n>", then
// "exit <wait status>", or "error <message>" if the objective could not
// be started).
const guardArg = "__soma-objective-guard-v1"

// guard's descriptors (see guardArg).
const (
	guardCommandFD = 5
	guardStatusFD  = 6
)

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

// guard is the guard's main: args are the leftover grace, the objective's
// resolved path and its argv.
func guard(args []string) int {
	status := os.NewFile(guardStatusFD, "guard-status")
	if len(args) < 3 {
		fmt.Fprintf(status, "error guard: want GRACE PATH ARGV..., got %q\n", args)
		return 2
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintf(status, "error guard: grace %q: %v\n", args[0], err)
		return 2
	}
	path, argv := args[1], args[2:]
	// Pdeathsig belongs to the thread that forks: keep this one alive for
	// as long as the guard lives.
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
		fmt.Fprintf(status, "error guard: prctl(PR_SET_CHILD_SUBREAPER): %v\n", err)
		return 2
	}
	// The command and status pipes are the guard's alone.
	unix.CloseOnExec(guardCommandFD)
	unix.CloseOnExec(guardStatusFD)
	commands := os.NewFile(guardCommandFD, "guard-commands")
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2, 3, 4},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	// The objective holds the report and verdict pipes now: the report
	// pipe's end of file means that every process of its tree is gone.
	unix.Close(3)
	unix.Close(4)
	if err != nil {
		fmt.Fprintf(status, "error %s: %v\n", path, err)
		return 0
	}
	fmt.Fprintf(status, "pid %d\n", pid)

	type reaped struct {
		pid int
		ws  syscall.WaitStatus
	}
	// One goroutine reaps every child: the objective and whatever of its
	// tree is reparented here. (Between its reaping the objective and the
	// main loop hearing of it, a forwarded signal still goes to the
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
			if err != nil { // ECHILD: nothing left, and nothing can come
				close(exits)
				return
			}
			exits <- reaped{p, ws}
		}
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(commands)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines) // soma-trial has gone
	}()

	running := true // the objective, not reaped yet
	var term, kill <-chan time.Time
	var sweep *time.Ticker
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
				return 0
			}
			if e.pid == pid {
				running = false
				fmt.Fprintf(status, "exit %d\n", int(e.ws))
				status.Close()
				term = time.After(grace)
			}
		case l, ok := <-lines:
			if !ok {
				lines = nil
				killAll()
				continue
			}
			verb, arg, _ := strings.Cut(l, " ")
			switch verb {
			case "signal":
				if n, err := strconv.Atoi(arg); err == nil && running {
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
