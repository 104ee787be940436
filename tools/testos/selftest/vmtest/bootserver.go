package vmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// BootServer answers what the VM asks for, minimally: the Ignition config
// (a new revision on each boot), the agent binary, and the agent API
// (docs/agent.md): heartbeats, reports and acks are recorded, and an
// instruction the test issues is served until the agent acks it.
//
// It stands in for the boot service only because what is under test here
// is the OS image; the real boot service drives the same image in the
// end-to-end tests.
type BootServer struct {
	UUID       string
	Credential string
	Agent      []byte                         // the agent binary, served at /assets/anvil-agent
	Files      map[string]string              // more files to serve: URL path -> file on this host
	Config     func(boot int) ([]byte, error) // the Ignition config of each boot, counted from 1

	mu           sync.Mutex
	fetches      []Fetch
	heartbeats   []Heartbeat
	reports      []Report
	acks         []Ack
	pending      *Instruction // served until acked
	delivered    int
	agentFetches int
	fileFetches  []string
	problems     []string // requests the server refused, for the failure message
}

// Fetch is one Ignition config request.
type Fetch struct {
	At    time.Time
	Query string
}

// Heartbeat is one agent heartbeat (the fields the tests read).
type Heartbeat struct {
	At             time.Time
	BootedRevision string `json:"booted_revision"`
}

// Report is one agent report (the fields the tests read; Raw is the body).
type Report struct {
	At             time.Time
	BootedRevision string `json:"booted_revision"`
	Hardware       struct {
		CPUs        int   `json:"cpus"`
		MemoryBytes int64 `json:"memory_bytes"`
		Disks       []struct {
			Name      string `json:"name"`
			SizeBytes int64  `json:"size_bytes"`
		} `json:"disks"`
		NICs []NIC `json:"nics"`
	} `json:"hardware"`
	StartupLog []string `json:"startup_log"`
	Raw        string   `json:"-"`
}

// NIC is a network interface in a report.
type NIC struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
}

// Ack is the agent's answer to an instruction.
type Ack struct {
	At      time.Time
	ID      string
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Instruction is what the agent API hands the agent (docs/agent.md).
type Instruction struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Revision string `json:"revision"`
	IssuedAt string `json:"issued_at"`
}

func (b *BootServer) refuse(w http.ResponseWriter, r *http.Request, status int, why string) {
	b.mu.Lock()
	b.problems = append(b.problems, fmt.Sprintf("%s %s: %d %s", r.Method, r.URL.Path, status, why))
	b.mu.Unlock()
	http.Error(w, why, status)
}

func (b *BootServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/ignition":
		if got := r.URL.Query().Get("uuid"); got != b.UUID {
			b.refuse(w, r, http.StatusNotFound, "unknown uuid "+got)
			return
		}
		b.mu.Lock()
		b.fetches = append(b.fetches, Fetch{At: time.Now(), Query: r.URL.RawQuery})
		n := len(b.fetches)
		b.mu.Unlock()
		cfg, err := b.Config(n)
		if err != nil {
			b.refuse(w, r, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/vnd.coreos.ignition+json")
		_, _ = w.Write(cfg)
	case r.Method == http.MethodGet && r.URL.Path == "/assets/anvil-agent":
		b.mu.Lock()
		b.agentFetches++
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b.Agent)
	case r.Method == http.MethodGet && b.Files[r.URL.Path] != "":
		b.mu.Lock()
		b.fileFetches = append(b.fileFetches, r.URL.Path)
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeFile(w, r, b.Files[r.URL.Path])
	case strings.HasPrefix(r.URL.Path, "/agent/v1/machines/"):
		b.agentAPI(w, r)
	default:
		b.refuse(w, r, http.StatusNotFound, "no such route")
	}
}

func (b *BootServer) agentAPI(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/agent/v1/machines/")
	uuid, call, _ := strings.Cut(rest, "/")
	if uuid != b.UUID {
		b.refuse(w, r, http.StatusNotFound, "unknown machine "+uuid)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+b.Credential {
		b.refuse(w, r, http.StatusUnauthorized, "wrong or missing credential")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		b.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	now := time.Now()
	switch {
	case r.Method == http.MethodPost && call == "heartbeat":
		hb := Heartbeat{At: now}
		if err := json.Unmarshal(body, &hb); err != nil {
			b.refuse(w, r, http.StatusBadRequest, err.Error())
			return
		}
		b.mu.Lock()
		b.heartbeats = append(b.heartbeats, hb)
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && call == "report":
		rep := Report{At: now, Raw: string(body)}
		if err := json.Unmarshal(body, &rep); err != nil {
			b.refuse(w, r, http.StatusBadRequest, err.Error())
			return
		}
		b.mu.Lock()
		b.reports = append(b.reports, rep)
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && call == "instructions":
		b.mu.Lock()
		in := b.pending
		if in != nil {
			b.delivered++
		}
		b.mu.Unlock()
		if in == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"instructions": []*Instruction{in}})
	case r.Method == http.MethodPost && strings.HasPrefix(call, "instructions/") && strings.HasSuffix(call, "/ack"):
		a := Ack{At: now, ID: strings.TrimSuffix(strings.TrimPrefix(call, "instructions/"), "/ack")}
		if err := json.Unmarshal(body, &a); err != nil {
			b.refuse(w, r, http.StatusBadRequest, err.Error())
			return
		}
		b.mu.Lock()
		b.acks = append(b.acks, a)
		if b.pending != nil && a.ID == b.pending.ID {
			b.pending = nil // a real boot service stops delivering too
		}
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		b.refuse(w, r, http.StatusNotFound, "no such agent call "+call)
	}
}

// Issue makes one instruction available to the agent's next poll.
func (b *BootServer) Issue(in Instruction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = &in
}

// Snapshot returns copies of what the server saw.
func (b *BootServer) Snapshot() (fetches []Fetch, hbs []Heartbeat, reps []Report, acks []Ack, problems []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Fetch(nil), b.fetches...), append([]Heartbeat(nil), b.heartbeats...),
		append([]Report(nil), b.reports...), append([]Ack(nil), b.acks...), append([]string(nil), b.problems...)
}
