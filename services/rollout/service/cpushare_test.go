package service_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuSample is the CPU time used so far by the benchmark's own process
// (every anvil service, the simulated fleet, nats-server) and by each
// process of the Kubernetes control plane, and the API server's request
// counts by verb and resource: what a rollout's steps wait on when the
// machine's cores are busy.
type cpuSample struct {
	self     time.Duration
	procs    map[string]time.Duration
	requests map[string]float64
}

func (s *stack) sampleCPU(b *testing.B) cpuSample {
	b.Helper()
	out := cpuSample{procs: map[string]time.Duration{}, requests: map[string]float64{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for name, pid := range s.cp.PIDs() {
		if d, ok := processCPU(pid); ok {
			out.procs[name] = d
		}
	}
	raw, err := s.cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(s.ctx)
	if err != nil {
		b.Logf("the API server's metrics: %v", err)
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		key := label(line, "verb") + " " + label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		out.requests[key] += v
	}
	return out
}

// label is a Prometheus text line's value of label name.
func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// processCPU reads a process's user and system time from /proc (Linux).
func processCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// the fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th of them, in clock ticks (100 per second)
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * 10 * time.Millisecond, true
}

// cpuReport says where the CPU went between two samples over wall time
// wall, for n machines, during what (the rollout, a floor).
func cpuReport(what string, before, after cpuSample, wall time.Duration, n int) string {
	type share struct {
		name string
		d    time.Duration
	}
	shares := []share{{"this process (the anvil services, nats-server, the simulated fleet)", after.self - before.self}}
	var total, kube time.Duration
	for name, d := range after.procs {
		shares = append(shares, share{name, d - before.procs[name]})
		kube += d - before.procs[name]
	}
	slices.SortFunc(shares, func(a, b share) int { return int(b.d - a.d) })
	var parts []string
	for _, s := range shares {
		total += s.d
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.2f cores)", s.name, s.d.Seconds(), s.d.Seconds()/wall.Seconds()))
	}
	type count struct {
		key string
		n   float64
	}
	var counts []count
	var requests float64
	for k, v := range after.requests {
		if d := v - before.requests[k]; d > 0 {
			counts = append(counts, count{k, d})
			requests += d
		}
	}
	slices.SortFunc(counts, func(a, b count) int { return int(b.n - a.n) })
	var top []string
	for _, c := range counts[:min(len(counts), 8)] {
		top = append(top, fmt.Sprintf("%s %.0f (%.1f per machine)", c.key, c.n, c.n/float64(n)))
	}
	// The control plane shares the cores with what is measured: its CPU
	// spread over all of them is the least wall time it alone leaves.
	return fmt.Sprintf("  CPU during %s: %.1f s of %.1f s on %d cores: %s; the Kubernetes processes together %.1f s, %.1f s of all %d cores\n"+
		"  API server requests: %.0f (%.1f per machine); most: %s",
		what, total.Seconds(), wall.Seconds(), runtime.NumCPU(), strings.Join(parts, ", "), kube.Seconds(), kube.Seconds()/float64(runtime.NumCPU()), runtime.NumCPU(),
		requests, requests/float64(n), strings.Join(top, ", "))
}
