package boot

import (
	"path"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/anvil-fleet/anvil/tools/testos/internal/units"
)

// systemd's default start rate limit: more than 5 starts in 10 s and a
// unit is given up.
const (
	startLimitBurst    = 5
	startLimitInterval = 10 * time.Second
)

// service supervises one started unit.
type service struct {
	s    *system
	d    units.Decision
	mu   sync.Mutex
	cur  *proc
	gone chan struct{} // closed when the supervisor has ended
}

// startServices emulates systemd's first boot: the units Ignition enabled
// (preset file and .wants links), minus the masked ones, in dependency
// order, each chrooted into /sysroot with its EnvironmentFile= and
// Environment=, restarted as its Restart= says. Units this OS cannot run
// are skipped with one line saying why.
func (s *system) startServices() {
	plan, err := units.Plan(sysroot)
	if err != nil {
		s.say("reading the units Ignition wrote: %v; starting none", err)
		return
	}
	if len(plan) == 0 {
		s.say("no enabled units to start")
	}
	for _, d := range plan {
		switch {
		case d.Reason == "masked":
			s.say("%s is masked; not starting it", d.Name)
			continue
		case !d.Start:
			s.say("skipping %s: %s", d.Name, d.Reason)
			continue
		}
		if why := d.Unit.CheckConditions(sysroot); why != "" {
			s.say("skipping %s: %s", d.Name, why)
			continue
		}
		for _, c := range d.Unit.UnsupportedConditions {
			s.note("%s: %s is not evaluated by this test OS", d.Name, c)
		}
		for _, k := range d.Unit.IgnoredServiceDirectives {
			s.note("%s: [Service] %s= is ignored by this test OS", d.Name, k)
		}
		if slices.Contains(d.Unit.After, "network-online.target") {
			// systemd would hold the unit until the network is online.
			s.waitForNetwork(d.Name + " (After=network-online.target)")
		}
		svc := &service{s: s, d: d, gone: make(chan struct{})}
		s.svcMu.Lock()
		if s.stopping {
			s.svcMu.Unlock()
			return
		}
		s.services = append(s.services, svc)
		s.svcMu.Unlock()
		desc := d.Unit.Description
		if desc == "" {
			desc = d.Name
		}
		s.say("starting %s (%s)", d.Name, desc)
		if d.Unit.Type == "oneshot" {
			svc.supervise() // later units are ordered after it
		} else {
			go svc.supervise()
		}
	}
}

func (svc *service) stopping() bool {
	svc.s.svcMu.Lock()
	defer svc.s.svcMu.Unlock()
	return svc.s.stopping
}

// exec runs one command of the unit and waits for it.
func (svc *service) exec(c units.Command, main bool) (syscall.WaitStatus, error) {
	name := path.Base(c.Argv[0])
	sp := spec{
		argv:   c.Argv,
		path:   c.Path, // resolved inside the chroot
		env:    svc.d.Env,
		dir:    svc.d.Unit.WorkingDirectory,
		chroot: sysroot,
		line:   func(pid int, l string) { svc.s.log.Log(name, pid, l, true) },
	}
	p, err := svc.s.reaper.start(sp)
	if err != nil {
		return 0, err
	}
	svc.mu.Lock()
	svc.cur = p
	svc.mu.Unlock()
	if main {
		svc.s.note("%s: started %s (pid %d)", svc.d.Name, c.Path, p.pid)
	}
	<-p.done
	svc.mu.Lock()
	svc.cur = nil
	svc.mu.Unlock()
	return p.ws, nil
}

// supervise runs the unit's commands and restarts it per Restart=.
func (svc *service) supervise() {
	defer close(svc.gone)
	u := svc.d.Unit
	var starts []time.Time
	for {
		if svc.stopping() {
			return
		}
		now := time.Now()
		starts = append(starts, now)
		for len(starts) > 0 && now.Sub(starts[0]) > startLimitInterval {
			starts = starts[1:]
		}
		if len(starts) > startLimitBurst {
			svc.s.say("%s: start request repeated too quickly (%d starts in %s); giving up, as systemd does", svc.d.Name, len(starts), startLimitInterval)
			return
		}

		failed, why := svc.runOnce()
		if svc.stopping() {
			return
		}
		restart := false
		switch u.Restart {
		case "always":
			restart = true
		case "on-failure", "on-abnormal", "on-abort":
			restart = failed
		}
		switch {
		case failed && restart:
			svc.s.say("%s failed (%s); restarting in %s", svc.d.Name, why, u.RestartDelay)
		case failed:
			svc.s.say("%s failed (%s)", svc.d.Name, why)
		case restart:
			svc.s.say("%s exited (%s); restarting in %s", svc.d.Name, why, u.RestartDelay)
		case u.Type == "oneshot":
			svc.s.say("finished %s", svc.d.Name)
		default:
			svc.s.say("%s exited (%s)", svc.d.Name, why)
		}
		if !restart {
			return
		}
		time.Sleep(u.RestartDelay)
	}
}

// runOnce runs ExecStartPre= then ExecStart= (all of them for oneshot).
func (svc *service) runOnce() (failed bool, why string) {
	pre := len(svc.d.ExecStartPre)
	cmds := append(append([]units.Command(nil), svc.d.ExecStartPre...), svc.d.ExecStart...)
	for i, c := range cmds {
		ws, err := svc.exec(c, i >= pre)
		if err != nil {
			return true, "cannot start " + c.Path + ": " + err.Error()
		}
		why = describe(ws)
		ok := ws.Exited() && ws.ExitStatus() == 0
		if !ok && !c.IgnoreFailure {
			return true, c.Path + ": " + why
		}
	}
	return false, why
}

// stop sends SIGTERM to the running process and waits up to grace for the
// supervisor to end, then SIGKILLs it.
func (svc *service) stop(grace time.Duration) {
	svc.mu.Lock()
	p := svc.cur
	svc.mu.Unlock()
	if p != nil {
		svc.s.say("stopping %s (pid %d)", svc.d.Name, p.pid)
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	select {
	case <-svc.gone:
		return
	case <-time.After(grace):
	}
	svc.mu.Lock()
	p = svc.cur
	svc.mu.Unlock()
	if p != nil {
		svc.s.say("%s did not stop within %s; killing it", svc.d.Name, grace)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}
