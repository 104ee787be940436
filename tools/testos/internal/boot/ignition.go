package boot

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// stages is Flatcar's order of Ignition stages: fetch-offline [-> fetch]
// [-> kargs] -> disks -> mount -> files, and umount when the initramfs is
// left (dracut/30ignition's units, which Flatcar's bootengine uses).
var stages = []string{"fetch-offline", "fetch", "kargs", "disks", "mount", "files", "umount"}

// stageResult is what one run of ignition --stage=… left behind.
type stageResult struct {
	ok     bool
	reason string   // why it failed, in Ignition's words
	tail   []string // its last lines, for the console
}

// ignitionPlatform is --platform: ignition.platform.id from the kernel
// command line, "metal" (what Flatcar's PXE image uses) by default.
func (s *system) ignitionPlatform() string {
	if p := s.cmdline["ignition.platform.id"]; p != "" {
		return p
	}
	return "metal"
}

// runIgnitionUntilItSucceeds prepares /sysroot and runs every stage; when
// a stage fails it prints why and starts again from an empty /sysroot,
// with a backoff from 5 s to 60 s, for as long as it takes (a boot service
// that is down, say, comes back).
func (s *system) runIgnitionUntilItSucceeds() {
	backoff := 5 * time.Second
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			s.resetSysroot()
		}
		if err := s.prepareSysroot(); err != nil {
			s.emergency("preparing " + sysroot + ": " + err.Error())
		}
		if s.runIgnition() {
			return
		}
		s.say("Ignition failed (attempt %d); starting over from an empty %s in %s", attempt, sysroot, backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, 60*time.Second)
	}
}

// runIgnition runs the stages in order and says how each went.
func (s *system) runIgnition() bool {
	platform := s.ignitionPlatform()
	if err := os.MkdirAll("/run/ignition", 0o700); err != nil {
		s.say("creating /run/ignition: %v", err)
	}
	for _, stage := range stages {
		if stage == "fetch" {
			// As ignition-fetch.service: only when fetch-offline found that
			// the config needs the network, and has not cached one.
			if _, err := os.Stat("/run/ignition/neednet"); err != nil {
				s.say("ignition fetch: skipped (fetch-offline needed no network)")
				continue
			}
			if _, err := os.Stat("/run/ignition.json"); err == nil {
				s.say("ignition fetch: skipped (fetch-offline already has the config)")
				continue
			}
			s.waitForNetwork("Ignition's fetch stage")
		}
		start := time.Now()
		res := s.runStage(platform, stage)
		took := time.Since(start).Seconds()
		if !res.ok {
			s.say("ignition %s: failed after %.1fs: %s", stage, took, res.reason)
			for _, l := range res.tail {
				s.say("  | %s", l)
			}
			return false
		}
		s.say("ignition %s: ok (%.1fs)", stage, took)
	}
	return true
}

// runStage runs one stage. Every output line goes to the journal; lines at
// NOTICE and above also to the console. Ignition dumps the whole config
// after a failure: that dump (it holds the agent credential) is dropped.
func (s *system) runStage(platform, stage string) stageResult {
	var mu sync.Mutex
	var tail []string
	var lastCrit, lastErr string
	dumping := false
	sp := spec{
		argv: []string{ignitionBin, "--platform=" + platform, "--stage=" + stage, "--root=" + sysroot, "--log-to-stdout"},
		env:  []string{"PATH=/usr/sbin:/usr/bin"},
	}
	sp.line = func(pid int, l string) {
		mu.Lock()
		defer mu.Unlock()
		if dumping {
			return
		}
		if strings.TrimSpace(l) == "Full config:" {
			dumping = true
			s.log.Log("ignition", pid, "(the full config Ignition prints after a failure is not logged: it holds secrets)", false)
			return
		}
		level, msg, _ := strings.Cut(l, ":")
		level = strings.TrimSpace(level)
		msg = strings.TrimSpace(msg)
		important := false
		switch level {
		case "CRITICAL", "EMERGENCY", "ALERT":
			lastCrit, important = msg, true
		case "ERROR":
			lastErr, important = msg, true
		case "WARNING", "NOTICE":
			important = true
		case "INFO", "DEBUG":
		default:
			important = true // stderr of the Go runtime, flag errors, ...
		}
		s.log.Log("ignition", pid, l, important)
		if level != "DEBUG" {
			tail = append(tail, l)
			if len(tail) > 6 {
				tail = tail[1:]
			}
		}
	}
	// A stage that waits (Ignition retries a config fetch for up to two
	// minutes, logging at INFO) must not look like a hang: say so every
	// 10 s, with its last line.
	stop := make(chan struct{})
	go func() {
		start := time.Now()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				last := ""
				if len(tail) > 0 {
					last = tail[len(tail)-1]
				}
				mu.Unlock()
				s.say("ignition %s: still running after %.0fs; its last line: %s", stage, time.Since(start).Seconds(), last)
			}
		}
	}()
	ws, err := s.reaper.run(sp)
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return stageResult{reason: fmt.Sprintf("cannot run %s: %v", ignitionBin, err)}
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		return stageResult{ok: true}
	}
	reason := lastCrit
	if reason == "" {
		reason = lastErr
	}
	if reason == "" && len(tail) > 0 {
		reason = tail[len(tail)-1]
	}
	return stageResult{reason: fmt.Sprintf("%s (%s)", reason, describe(ws)), tail: tail}
}
