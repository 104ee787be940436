package faults_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
)

// probeEvent is what the probe appends: events of an aggregate type no
// service reads (every service filters by aggregate or event type), so the
// test knows exactly which appends were acknowledged and when.
type probeEvent struct {
	N int `json:"n"`
}

func (probeEvent) EventType() string { return "probe.appended" }

type probeAck struct {
	id      string
	seq     uint64
	tried   time.Time // first attempt
	acked   time.Time
	retries int
}

// probe appends one event every 100 ms through the event store, retrying
// each one with the same id until it is acknowledged (as services do).
type probe struct {
	mu   sync.Mutex
	acks []probeAck
	errs int
	stop func()
	done chan struct{}
}

func (s *stack) startProbe(name string) *probe {
	s.t.Helper()
	reg := events.NewRegistry()
	reg.Register(probeEvent{})
	var store *events.JetStreamStore
	s.retry("open the event store", 30*time.Second, func() error {
		var err error
		store, err = events.NewJetStreamStore(s.ctx, s.js, reg, events.StreamOptions{Replicas: 3})
		return err
	})
	ctx, cancel := context.WithCancel(s.ctx)
	p := &probe{stop: cancel, done: make(chan struct{})}
	ref := events.AggregateRef{Org: org, Type: "probe", ID: name}
	go func() {
		defer close(p.done)
		for n := 1; ctx.Err() == nil; n++ {
			d := events.Draft{ID: uuid.Must(uuid.NewV7()).String(), Payload: probeEvent{N: n}}
			a := probeAck{id: d.ID, tried: time.Now()}
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				envs, err := store.Append(actx, ref, events.Any, d)
				acancel()
				if err == nil {
					a.seq, a.acked = envs[0].Sequence, time.Now()
					p.mu.Lock()
					p.acks = append(p.acks, a)
					p.mu.Unlock()
					break
				}
				a.retries++
				p.mu.Lock()
				p.errs++
				p.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	s.t.Cleanup(p.halt)
	return p
}

func (p *probe) halt() {
	p.stop()
	<-p.done
}

func (p *probe) snapshot() ([]probeAck, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeAck(nil), p.acks...), p.errs
}

// firstAckAfter is the first acknowledged append whose first attempt began
// at or after t.
func (p *probe) firstAckAfter(t time.Time) (probeAck, bool) {
	acks, _ := p.snapshot()
	for _, a := range acks {
		if !a.tried.Before(t) {
			return a, true
		}
	}
	return probeAck{}, false
}

// storedMsg is one message of the stream.
type storedMsg struct {
	seq     uint64
	subject string
	msgID   string // Nats-Msg-Id
	envID   string // the envelope's id
	typ     string
	at      time.Time // when the server stored it
	data    []byte
}

// readStream reads the whole EVENTS stream in order through an ordered
// consumer.
func (s *stack) readStream() ([]storedMsg, error) {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	st, err := s.js.Stream(ctx, events.StreamName)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []storedMsg
	for len(out) == 0 || out[len(out)-1].seq < last {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			sm := storedMsg{seq: meta.Sequence.Stream, subject: m.Subject(), msgID: m.Headers().Get(jetstream.MsgIDHeader),
				typ: m.Headers().Get(events.HeaderEventType), at: meta.Timestamp, data: m.Data()}
			// The envelope travels in headers (binary content mode), its
			// id being the Nats-Msg-Id; a message that does not decode
			// is reported by checkLog.
			if env, err := events.DecodeMsg(m.Subject(), m.Headers(), m.Data(), sm.seq); err == nil {
				sm.envID, sm.typ = env.ID, env.Type
			}
			out = append(out, sm)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// checkLog reads the whole stream and checks it: sequences without a gap,
// every message a well-formed envelope (whose id is its Nats-Msg-Id), no id
// twice, and every id of want present. It returns the
// messages.
func (s *stack) checkLog(what string, want map[string]bool) []storedMsg {
	s.t.Helper()
	var msgs []storedMsg
	s.retry("read the whole stream", time.Minute, func() error {
		var err error
		msgs, err = s.readStream()
		return err
	})
	envIDs := map[string]uint64{}
	var problems []string
	for i, m := range msgs {
		if i > 0 && m.seq != msgs[i-1].seq+1 {
			problems = append(problems, fmt.Sprintf("gap: %d after %d", m.seq, msgs[i-1].seq))
		}
		if m.envID == "" {
			problems = append(problems, fmt.Sprintf("seq %d (%s): not a well-formed event", m.seq, m.subject))
			continue
		}
		if prev, dup := envIDs[m.envID]; dup {
			problems = append(problems, fmt.Sprintf("event id (Nats-Msg-Id) %s twice: seq %d and %d", m.envID, prev, m.seq))
		}
		envIDs[m.envID] = m.seq
	}
	missing := 0
	for id := range want {
		if _, ok := envIDs[id]; !ok {
			missing++
			if missing <= 5 {
				problems = append(problems, "acknowledged event "+id+" is missing")
			}
		}
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("… %d more", len(problems)-20))
		}
		s.t.Errorf("%s: the log is not intact (%d missing of %d acknowledged):\n%s", what, missing, len(want), strings.Join(problems, "\n"))
	} else {
		s.t.Logf("%s: %d events, sequences 1…%d without a gap, no id twice, all %d acknowledged ids present",
			what, len(msgs), msgs[len(msgs)-1].seq, len(want))
	}
	return msgs
}

// ids is the set of envelope ids of msgs, plus the probe's acknowledged
// ones: everything a writer was told is stored.
func ids(msgs []storedMsg, acks []probeAck) map[string]bool {
	out := map[string]bool{}
	for _, m := range msgs {
		if m.envID != "" {
			out[m.envID] = true
		}
	}
	for _, a := range acks {
		out[a.id] = true
	}
	return out
}

// streamLeader is the EVENTS stream's leader and whether every replica is
// current.
func (s *stack) streamLeader() (leader string, current bool, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, events.StreamName)
	if err != nil {
		return "", false, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", false, err
	}
	if info.Cluster == nil {
		return "", false, errors.New("no cluster information")
	}
	current = len(info.Cluster.Replicas) == natsNodes-1
	for _, r := range info.Cluster.Replicas {
		current = current && r.Current && !r.Offline
	}
	return info.Cluster.Leader, current, nil
}

// makeLeader moves the stream's leadership to node (a step-down with that
// node preferred) and waits until it leads with every replica current.
func (s *stack) makeLeader(node string) {
	s.t.Helper()
	s.eventually("stream leader is "+node, time.Minute, func() (bool, string) {
		leader, current, err := s.streamLeader()
		if err != nil {
			return false, err.Error()
		}
		if leader == node && current {
			return true, ""
		}
		if leader != node && current {
			body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": node}})
			resp, err := s.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+events.StreamName, body, 3*time.Second)
			if err != nil {
				return false, "step-down: " + err.Error()
			}
			time.Sleep(500 * time.Millisecond)
			return false, "asked for a step-down: " + string(resp.Data)
		}
		return false, fmt.Sprintf("leader %s, replicas current %v", leader, current)
	})
}

// nodeHash reads every message of the stream from the stream leader's own
// store (the message-get API is answered by the leader) and hashes
// sequence, subject, Nats-Msg-Id and body.
func (s *stack) nodeHash(last uint64) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	st, err := s.js.Stream(ctx, events.StreamName)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var b [8]byte
	for seq := uint64(1); seq <= last; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return "", fmt.Errorf("seq %d: %w", seq, err)
		}
		binary.BigEndian.PutUint64(b[:], m.Sequence)
		h.Write(b[:])
		h.Write([]byte(m.Subject + "\x00" + m.Header.Get(jetstream.MsgIDHeader) + "\x00"))
		h.Write(m.Data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// replicaHashes makes each node the stream leader in turn and hashes the
// stream as that node stores it, up to last.
func (s *stack) replicaHashes(last uint64) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for i := 1; i <= natsNodes; i++ {
		node := fmt.Sprintf("nats-%d", i)
		s.makeLeader(node)
		s.retry("hash the stream on "+node, time.Minute, func() error {
			h, err := s.nodeHash(last)
			out[node] = h
			return err
		})
	}
	return out
}

// jsz is the part of a node's /jsz?streams=true answer the test reads: the
// node's own replica of each stream.
type jsz struct {
	AccountDetails []struct {
		StreamDetail []struct {
			Name  string `json:"name"`
			State struct {
				Msgs     uint64 `json:"messages"`
				Bytes    uint64 `json:"bytes"`
				FirstSeq uint64 `json:"first_seq"`
				LastSeq  uint64 `json:"last_seq"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// replicaStates is each node's own count, bytes and last sequence of
// EVENTS, from its monitoring endpoint.
func (s *stack) replicaStates() (map[string]string, error) {
	out := map[string]string{}
	for _, n := range s.c.nodes {
		var z jsz
		if err := s.c.monitor(n, "/jsz?accounts=true&streams=true", &z); err != nil {
			return nil, err
		}
		for _, a := range z.AccountDetails {
			for _, sd := range a.StreamDetail {
				if sd.Name == events.StreamName {
					out[n.name] = fmt.Sprintf("%d msgs, %d bytes, %d…%d", sd.State.Msgs, sd.State.Bytes, sd.State.FirstSeq, sd.State.LastSeq)
				}
			}
		}
	}
	return out, nil
}

func allEqual(m map[string]string) bool {
	var first *string
	for _, v := range m {
		if first == nil {
			first = &v
		} else if v != *first {
			return false
		}
	}
	return len(m) > 0
}

// clientNames lists, per node, the names of the client connections it
// holds (the services name theirs anvil-<service>).
func (s *stack) clientNames() map[string][]string {
	out := map[string][]string{}
	for _, n := range s.c.nodes {
		var z struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		if err := s.c.monitor(n, "/connz?limit=1024", &z); err != nil {
			out[n.name] = []string{"(" + err.Error() + ")"}
			continue
		}
		for _, c := range z.Conns {
			if strings.HasPrefix(c.Name, "anvil-") && c.Name != "anvil-faults-test" {
				out[n.name] = append(out[n.name], strings.TrimPrefix(c.Name, "anvil-"))
			}
		}
		sort.Strings(out[n.name])
	}
	return out
}

// viewsHash reads the projections through the services' APIs (every
// rollout with its machines and log from the rollout service, every machine
// from the registry) and hashes them, with the stream's head before and
// after; the hash describes the log up to that head only when the two are
// equal. Last-seen times (from heartbeats) and last iPXE boots (from the
// boot service's reports) do not come from the log, and are left out.
func (s *stack) viewsHash() (hash string, head uint64, err error) {
	hash, _, head, err = s.views()
	return hash, head, err
}

// views is viewsHash with the JSON that was hashed, for a diff when two
// hashes differ.
func (s *stack) views() (hash string, doc []byte, head uint64, err error) {
	h0, err := s.head()
	if err != nil {
		return "", nil, 0, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	list, err := s.ro.List(ctx, api.ListRequest{Org: org, Limit: 500})
	if err != nil {
		return "", nil, 0, err
	}
	type rolloutView struct {
		Rollout api.Rollout
		Log     []string
	}
	var views []rolloutView
	for _, item := range list.Items {
		r, err := s.ro.Get(ctx, api.GetRequest{Org: org, ID: item.ID})
		if err != nil {
			return "", nil, 0, err
		}
		lines, err := s.rolloutLog(item.ID)
		if err != nil {
			return "", nil, 0, err
		}
		views = append(views, rolloutView{r, lines})
	}
	page, err := s.reg.ListMachines(ctx, regapi.MachineList{Org: org, Limit: 500})
	if err != nil {
		return "", nil, 0, err
	}
	ms := page.Items
	for i := range ms {
		// Not from the log: the last heartbeat, and the last iPXE boot
		// (kept in a KV bucket; the log holds one at most every
		// --ipxe-record-interval), which the boot service reports up to
		// its --ipxe-report-interval after the boot, so a later read may
		// show a newer one at the same head.
		ms[i].LastSeen, ms[i].LastIPXEBootAt, ms[i].IPXERetryBy = time.Time{}, time.Time{}, time.Time{}
	}
	b, err := json.Marshal(struct {
		Rollouts []rolloutView
		Machines []regapi.Machine
	}{views, ms})
	if err != nil {
		return "", nil, 0, err
	}
	h1, err := s.head()
	if err != nil {
		return "", nil, 0, err
	}
	if h0 != h1 {
		return "", nil, 0, fmt.Errorf("the log moved from %d to %d while reading", h0, h1)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], b, h1, nil
}

func (s *stack) head() (uint64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// readStreamRetry is readStream, retried while the cluster settles (a
// node just back may answer before its JetStream is up).
func (s *stack) readStreamRetry() []storedMsg {
	s.t.Helper()
	var msgs []storedMsg
	s.retry("read the whole stream", time.Minute, func() error {
		var err error
		msgs, err = s.readStream()
		return err
	})
	return msgs
}

// viewsDiff names where two documents of views differ (a path and both
// values, at most limit of them), so that a failed comparison says what
// diverged instead of two hashes.
func viewsDiff(a, b []byte, limit int) string {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		return "the first document does not decode: " + err.Error()
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		return "the second document does not decode: " + err.Error()
	}
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		if len(out) >= limit {
			return
		}
		switch xv := x.(type) {
		case map[string]any:
			if yv, ok := y.(map[string]any); ok {
				keys := map[string]bool{}
				for k := range xv {
					keys[k] = true
				}
				for k := range yv {
					keys[k] = true
				}
				sorted := make([]string, 0, len(keys))
				for k := range keys {
					sorted = append(sorted, k)
				}
				sort.Strings(sorted)
				for _, k := range sorted {
					walk(path+"."+k, xv[k], yv[k])
				}
				return
			}
		case []any:
			if yv, ok := y.([]any); ok && len(xv) == len(yv) {
				for i := range xv {
					walk(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i])
				}
				return
			}
		}
		xj, _ := json.Marshal(x)
		yj, _ := json.Marshal(y)
		if string(xj) != string(yj) {
			out = append(out, fmt.Sprintf("%s: %s, then %s", path, clipJSON(xj), clipJSON(yj)))
		}
	}
	walk("", va, vb)
	if len(out) == 0 {
		return "no difference"
	}
	return strings.Join(out, "\n")
}

func clipJSON(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
