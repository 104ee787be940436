package events

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AppendRequest is one append of a batch: the arguments of an Append.
type AppendRequest struct {
	Ref      AggregateRef
	Expected uint64
	Drafts   []Draft
}

// AppendResult is what Append would have returned for one AppendRequest:
// the stored envelopes, and on failure the error (a *ConflictError for a
// lost race, as from Append).
type AppendResult struct {
	Events []Envelope
	Err    error
}

const (
	// pipelineWriters bounds the aggregates one AppendMany appends to at
	// the same time, each with one publish in flight: enough to keep a
	// server busy, few enough that the acknowledgements of one batch come
	// back long before a publish would time out.
	pipelineWriters = 256
	// pipelineInFlight bounds the publishes in flight of all the
	// AppendMany calls on one store together. It is also the maximum
	// pending of the store's asynchronous publisher, so that a publish
	// never stalls in the client (which would fail it after 200 ms).
	pipelineInFlight = 1024
)

// pipeline is the store's asynchronous publisher, made on the first
// AppendMany. It is a JetStream handle of its own on the store's
// connection, so that its acknowledgement timeout (an unanswered publish
// is an error, not a future that never resolves), its bound on pending
// publishes and its answer handlers apply to AppendMany alone.
type pipeline struct {
	once    sync.Once
	js      jetstream.JetStream
	err     error
	slots   chan struct{} // one per publish nats.go holds
	mu      sync.Mutex
	waiting map[*nats.Msg]*aggregateWriter // the publishes nats.go holds, by message; nil once given up on
}

// AppendMany appends a batch of appends to many aggregates at once: the
// result of batch[i] is results[i], and is what Append(ctx, batch[i].Ref,
// batch[i].Expected, batch[i].Drafts...) would have returned, with the same
// checks, deduplication, retry lookup, span and metrics. The appends to one
// aggregate run in batch order, one publish in flight at a time, each
// event expecting the previous one's sequence; appends to different
// aggregates run concurrently, their events published asynchronously. The
// requests of one aggregate are independent appends: a later one is tried
// even if an earlier one failed, with its own expected version.
func (s *JetStreamStore) AppendMany(ctx context.Context, batch []AppendRequest) []AppendResult {
	results := make([]AppendResult, len(batch))
	p, err := s.asyncPublisher()
	if err != nil {
		for i := range results {
			results[i].Err = err
		}
		return results
	}
	firsts, nexts := chainByAggregate(batch)
	d := &batchDriver{s: s, p: p, ctx: ctx, batch: batch, results: results, firsts: firsts, nexts: nexts,
		answers: make(chan *aggregateWriter, min(len(firsts), pipelineWriters))}
	d.run()
	return results
}

// chainByAggregate links the requests of each aggregate in batch order:
// firsts holds each aggregate's first request, in the order aggregates
// first appear, and nexts[i] the aggregate's request after i (-1 after
// its last).
func chainByAggregate(batch []AppendRequest) (firsts, nexts []int) {
	nexts = make([]int, len(batch))
	last := make(map[AggregateRef]int, len(batch))
	for i := range batch {
		nexts[i] = -1
		if prev, ok := last[batch[i].Ref]; ok {
			nexts[prev] = i
		} else {
			firsts = append(firsts, i)
		}
		last[batch[i].Ref] = i
	}
	return firsts, nexts
}

// batchDriver runs one AppendMany on the calling goroutine: it keeps up to
// pipelineWriters aggregates with a publish in flight, and takes their
// answers as they come (the publisher's handlers queue them), so that a
// burst of answers is handled without a goroutine switch for each.
type batchDriver struct {
	s       *JetStreamStore
	p       *pipeline
	ctx     context.Context
	batch   []AppendRequest
	results []AppendResult
	firsts  []int
	nexts   []int
	claimed int                   // firsts[:claimed] have a writer
	writers []*aggregateWriter    // all of them, to give up on at the end of ctx
	answers chan *aggregateWriter // room for every writer: a handler never blocks
}

// aggregateWriter appends the requests of one aggregate after the other,
// then those of the next aggregate nobody writes yet.
type aggregateWriter struct {
	answers  chan *aggregateWriter
	req      int // the request under way, or -1
	open     bool
	op       appendOp
	inFlight *outgoing // the publish awaiting its answer
	ack      *jetstream.PubAck
	err      error
	settled  bool // the answer has been taken into op already
}

func (d *batchDriver) run() {
	active := 0
	for range cap(d.answers) {
		w := &aggregateWriter{answers: d.answers, req: -1}
		d.writers = append(d.writers, w)
		if d.step(w) {
			active++
		}
	}
	done := d.ctx.Done()
	for active > 0 {
		select {
		case w := <-d.answers:
			// Not back to the pool: nats.go may still read an
			// asynchronous message (a retry after no responders) after
			// its answer or error was delivered.
			w.inFlight = nil
			if !w.settled && wrongLastSequence(w.err) {
				// Settling a version mismatch looks the event up in the
				// log, which takes a round trip or more: off the driver,
				// so that the other aggregates' answers are not held up.
				go func() {
					w.op.settle(nil, w.err)
					w.settled = true
					d.answers <- w
				}()
				continue
			}
			if !w.settled {
				w.op.settle(w.ack, w.err)
			}
			w.settled = false
			if !d.step(w) {
				active--
			}
		case <-done:
			// As a synchronous append given up on, the publishes in flight
			// are errors, not conflicts; the events may still land, and a
			// retry of them is deduplicated.
			done = nil
			for _, w := range d.writers {
				if w.inFlight == nil || !d.p.withdraw(&w.inFlight.msg) {
					continue // its answer is queued, or it is not publishing
				}
				w.inFlight = nil // nats.go keeps it until its answer times out
				w.op.settle(nil, d.ctx.Err())
				if !d.step(w) {
					active--
				}
			}
		}
	}
}

// step moves w on until it has a publish in flight (true) or nothing is
// left to append (false): it ends the append whose events are all
// settled, begins the aggregate's next one, or takes on the next
// aggregate.
func (d *batchDriver) step(w *aggregateWriter) bool {
	for {
		switch {
		case w.open && w.op.pending():
			if d.publish(w) {
				return true
			}
		case w.open:
			d.results[w.req].Events, d.results[w.req].Err = w.op.end()
			w.open, w.req = false, d.nexts[w.req]
		case w.req >= 0:
			r := &d.batch[w.req]
			w.op, w.open = d.s.beginAppend(d.ctx, r.Ref, r.Expected, r.Drafts), true
		case d.claimed < len(d.firsts):
			w.req = d.firsts[d.claimed]
			d.claimed++
		default:
			return false
		}
	}
}

// publish sends w's next event, or settles it with the reason it could not.
func (d *batchDriver) publish(w *aggregateWriter) bool {
	ctx := w.op.ctx
	if err := ctx.Err(); err != nil {
		w.op.settle(nil, err) // as a synchronous publish, send nothing
		return false
	}
	select {
	case d.p.slots <- struct{}{}:
	case <-ctx.Done():
		w.op.settle(nil, ctx.Err())
		return false
	}
	out := newOutgoing() // never pooled: see run
	w.op.fill(&out.msg, &out.h)
	w.inFlight, w.ack, w.err = out, nil, nil
	d.p.mu.Lock()
	d.p.waiting[&out.msg] = w
	d.p.mu.Unlock()
	if _, err := d.p.js.PublishMsgAsync(&out.msg); err != nil {
		d.p.unsent(&out.msg)
		w.inFlight = nil
		w.op.settle(nil, err)
		return false
	}
	return true
}

// answer hands the answer to msg to the writer that sent it, unless it
// gave up on it. nats.go is done with msg then, and frees its slot.
func (p *pipeline) answer(msg *nats.Msg, ack *jetstream.PubAck, err error) {
	p.mu.Lock()
	w, ok := p.waiting[msg]
	delete(p.waiting, msg)
	p.mu.Unlock()
	if !ok {
		return
	}
	<-p.slots
	if w != nil {
		w.ack, w.err = ack, err
		w.answers <- w
	}
}

// withdraw gives up waiting for the answer to msg, and reports whether it
// had not come yet. The publish keeps its slot until nats.go is done with
// it (its answer comes or times out), as it counts against the
// publisher's maximum pending until then.
func (p *pipeline) withdraw(msg *nats.Msg) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.waiting[msg]; ok && w != nil {
		p.waiting[msg] = nil
		return true
	}
	return false
}

// unsent forgets msg, which nats.go did not take.
func (p *pipeline) unsent(msg *nats.Msg) {
	p.mu.Lock()
	delete(p.waiting, msg)
	p.mu.Unlock()
	<-p.slots
}

// asyncPublisher returns the store's asynchronous publisher, making it on
// first use. A publish not acknowledged within the store's JetStream
// default timeout (what a synchronous publish without a deadline waits)
// fails.
func (s *JetStreamStore) asyncPublisher() (*pipeline, error) {
	p := &s.pipe
	p.once.Do(func() {
		p.slots = make(chan struct{}, pipelineInFlight)
		p.waiting = make(map[*nats.Msg]*aggregateWriter, pipelineInFlight)
		p.js, p.err = jetstream.New(s.js.Conn(),
			jetstream.WithPublishAsyncMaxPending(pipelineInFlight),
			jetstream.WithPublishAsyncTimeout(s.js.Options().DefaultTimeout),
			jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
				p.answer(m, ack, nil)
			}),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
				p.answer(m, nil, err)
			}))
	})
	return p, p.err
}
