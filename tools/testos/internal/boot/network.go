package boot

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// command returns a spec for a program of the image whose output goes to
// the journal only.
func (s *system) command(argv ...string) spec {
	name := path.Base(argv[0])
	return spec{
		argv: argv,
		env:  []string{"PATH=/usr/sbin:/usr/bin"},
		line: func(pid int, l string) { s.log.Log(name, pid, l, false) },
	}
}

// startNetwork brings lo up and runs busybox's udhcpc on every Ethernet
// interface, like Flatcar's zz-default.network (DHCP on every NIC). It
// does not wait: Ignition's fetch-offline stage runs meanwhile, and
// waitForNetwork blocks only when Ignition needs the network.
func (s *system) startNetwork() {
	if ws, err := s.reaper.run(s.command("/usr/bin/ip", "link", "set", "lo", "up")); err != nil || ws.ExitStatus() != 0 {
		s.say("bringing lo up failed (%v %s)", err, describe(ws))
	}
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		s.say("creating %s: %v", netDir, err)
	}
	go func() {
		started := map[string]bool{}
		waited := time.Now()
		warned := time.Now()
		for {
			for _, ifc := range ethernetInterfaces() {
				if !started[ifc] {
					started[ifc] = true
					s.note("starting DHCP on %s", ifc)
					go s.dhcp(ifc)
				}
			}
			if len(started) == 0 && time.Since(warned) > 10*time.Second {
				warned = time.Now()
				s.say("no Ethernet interface after %.0fs: is the NIC a virtio-net device (the only driver in this image)?", time.Since(waited).Seconds())
			}
			// Keep looking for late NICs for a while; then stop polling.
			if len(started) > 0 && time.Since(waited) > 30*time.Second {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	go s.watchLeases()
}

// ethernetInterfaces lists /sys/class/net entries of type 1 (ARPHRD_ETHER)
// that are not virtual (they have a device link).
func ethernetInterfaces() []string {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		t, err := os.ReadFile(filepath.Join("/sys/class/net", e.Name(), "type"))
		if err != nil || strings.TrimSpace(string(t)) != "1" {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/class/net", e.Name(), "device")); err != nil {
			continue
		}
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// dhcp keeps udhcpc running in the foreground on ifc (it renews the
// lease); the udhcpc hook configures the interface and writes
// <netDir>/<ifc>.lease.
func (s *system) dhcp(ifc string) {
	for {
		s.svcMu.Lock()
		stopping := s.stopping
		s.svcMu.Unlock()
		if stopping {
			return
		}
		p, err := s.reaper.start(s.command("/usr/bin/udhcpc", "-f", "-i", ifc, "-s", udhcpcScript, "-t", "5", "-T", "2", "-A", "3"))
		if err != nil {
			s.say("starting udhcpc on %s: %v", ifc, err)
		} else {
			s.svcMu.Lock()
			s.dhcpProcs = append(s.dhcpProcs, p)
			s.svcMu.Unlock()
			<-p.done
			s.note("udhcpc on %s ended (%s); restarting it", ifc, describe(p.ws))
		}
		time.Sleep(2 * time.Second)
	}
}

// watchLeases closes netUp at the first lease and prints each lease once.
func (s *system) watchLeases() {
	seen := map[string]bool{}
	for {
		entries, _ := os.ReadDir(netDir)
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".lease")
			if !ok || seen[name] {
				continue
			}
			b, err := os.ReadFile(filepath.Join(netDir, e.Name()))
			if err != nil || len(b) == 0 {
				continue
			}
			seen[name] = true
			s.say("network: %s %s (%s after the init started)", name, strings.TrimSpace(string(b)), s.since())
			s.netOnce.Do(func() { close(s.netUp) })
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitForNetwork blocks until some interface has a lease, saying so every
// 10 s: a machine without network must not hang silently.
func (s *system) waitForNetwork(why string) {
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.netUp:
			return
		case <-tick.C:
			s.say("waiting for a DHCP lease for %s (%.0fs so far; interfaces: %s)", why, time.Since(start).Seconds(), strings.Join(ethernetInterfaces(), " "))
		}
	}
}
