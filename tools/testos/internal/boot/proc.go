package boot

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// reaper owns every child of PID 1. As PID 1 the init also inherits every
// orphan, so it must wait(-1) for all of them; os/exec's per-process Wait
// would race with that, so all processes are started here and their exit
// statuses are handed out by pid.
//
// start holds mu from fork until the pid is registered, and reap takes mu
// before it hands a status out, so a child that exits at once is still
// delivered; statuses of pids nobody registered (orphans) are dropped.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}}
	sigchld := make(chan os.Signal, 16)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go func() {
		// The ticker is a backstop: signals can coalesce.
		tick := time.NewTicker(time.Second)
		for {
			select {
			case <-sigchld:
			case <-tick.C:
			}
			r.reap()
		}
	}()
	return r
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		}
		r.mu.Unlock()
	}
}

// spec describes a process to start.
type spec struct {
	argv   []string
	path   string // executable; argv[0] when empty
	env    []string
	dir    string
	chroot string
	// line receives every output line (stdout and stderr merged); the
	// default writes it to the journal without the console.
	line func(pid int, s string)
}

// proc is a started process.
type proc struct {
	pid  int
	done chan struct{} // closed when the process exited and its output is drained
	ws   syscall.WaitStatus
}

// start forks and execs sp with stdin on /dev/null and stdout/stderr
// through a pipe into sp.line.
func (r *reaper) start(sp spec) (*proc, error) {
	devnull, err := os.Open("/dev/null")
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if sp.line == nil {
		sp.line = func(int, string) {}
	}
	exe := sp.path
	if exe == "" {
		exe = sp.argv[0]
	}
	dir := sp.dir
	if dir == "" {
		dir = "/"
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   sp.env,
		Files: []uintptr{devnull.Fd(), pw.Fd(), pw.Fd()},
		Sys:   &syscall.SysProcAttr{Chroot: sp.chroot, Setsid: true},
	}
	r.mu.Lock()
	pid, err := syscall.ForkExec(exe, sp.argv, attr)
	if err != nil {
		r.mu.Unlock()
		pw.Close()
		pr.Close()
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[pid] = ch
	r.mu.Unlock()
	pw.Close()

	p := &proc{pid: pid, done: make(chan struct{})}
	out := make(chan struct{})
	go func() {
		defer close(out)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			sp.line(pid, sc.Text())
		}
		// A daemonised grandchild may keep the pipe open; stop reading
		// when the process is gone (below closes pr).
	}()
	go func() {
		p.ws = <-ch
		select {
		case <-out:
		case <-time.After(2 * time.Second):
			pr.Close()
			<-out
		}
		pr.Close()
		close(p.done)
	}()
	return p, nil
}

// run starts sp and waits for it.
func (r *reaper) run(sp spec) (syscall.WaitStatus, error) {
	p, err := r.start(sp)
	if err != nil {
		return 0, err
	}
	<-p.done
	return p.ws, nil
}

// describe says how a process ended, in systemd's words.
func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("killed by signal %s", ws.Signal())
	default:
		return fmt.Sprintf("wait status %#x", uint32(ws))
	}
}
