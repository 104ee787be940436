package agent

import (
	"sync"

	"github.com/anvil-fleet/anvil/agent/api"
)

// recentCapacity bounds the in-memory dedup: enough for any realistic backlog,
// small enough that a server sending fresh ids forever cannot grow the agent.
const recentCapacity = 1000

// recentAcks remembers the last ack sent for the most recent instruction ids,
// so a redelivered instruction is answered again but never executed twice.
type recentAcks struct {
	mu    sync.Mutex
	acks  map[string]api.Ack
	order []string // ring of ids, oldest at next
	next  int
}

func newRecentAcks() *recentAcks {
	return &recentAcks{acks: make(map[string]api.Ack, recentCapacity)}
}

func (r *recentAcks) get(id string) (api.Ack, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.acks[id]
	return a, ok
}

func (r *recentAcks) put(id string, a api.Ack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.acks[id]; ok {
		r.acks[id] = a
		return
	}
	if len(r.order) < recentCapacity {
		r.order = append(r.order, id)
	} else {
		delete(r.acks, r.order[r.next])
		r.order[r.next] = id
		r.next = (r.next + 1) % recentCapacity
	}
	r.acks[id] = a
}
