// Package poison is where events that cannot be handled go: a POISON stream
// that keeps each bad message with the reason, so that one bad event never
// stops a projection or a handler, and none is silently dropped.
package poison

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const (
	StreamName    = "POISON"
	SubjectPrefix = "poison"

	HeaderReason   = "Anvil-Poison-Reason"
	HeaderSequence = "Anvil-Poison-Sequence" // stream sequence in EVENTS
	HeaderSubject  = "Anvil-Poison-Subject"  // original subject
	HeaderConsumer = "Anvil-Poison-Consumer" // projection or handler that gave up
)

var poisoned = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_events_poisoned_total",
	Help: "Events sent to the poison queue, by consumer (projection or handler).",
}, []string{"consumer"})

// EnsureStream creates the POISON stream if it is missing.
func EnsureStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas == 0 {
		replicas = 1
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "anvil events that a projection or handler could not process, with the reason",
		Subjects:    []string{SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Discard:     jetstream.DiscardOld,
		MaxMsgs:     1_000_000,
	})
	if err != nil {
		return fmt.Errorf("poison: ensuring stream: %w", err)
	}
	return nil
}

// Queue publishes poisoned messages with an acknowledged publish, so a
// poisoned event is either stored or its consumer sees the error.
type Queue struct {
	js jetstream.JetStream
}

// New returns a queue on js; EnsureStream must have run.
func New(js jetstream.JetStream) *Queue { return &Queue{js: js} }

// Put stores data under poison.<consumer> with the reason and origin.
func (q *Queue) Put(ctx context.Context, consumer string, seq uint64, subject string, data []byte, reason string) error {
	msg := &nats.Msg{Subject: SubjectPrefix + "." + consumer, Data: data, Header: nats.Header{}}
	msg.Header.Set(HeaderReason, reason)
	msg.Header.Set(HeaderSequence, strconv.FormatUint(seq, 10))
	msg.Header.Set(HeaderSubject, subject)
	msg.Header.Set(HeaderConsumer, consumer)
	if _, err := q.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("poison: storing event %d from %s: %w", seq, consumer, err)
	}
	poisoned.WithLabelValues(consumer).Inc()
	return nil
}

// Publisher adapts the queue to watermill, for its PoisonQueue middleware.
func (q *Queue) Publisher() message.Publisher { return publisher{q} }

type publisher struct{ q *Queue }

func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		seq, _ := strconv.ParseUint(m.Metadata.Get("anvil_sequence"), 10, 64)
		consumer := m.Metadata.Get("handler_poisoned")
		if consumer == "" {
			consumer = topic
		}
		if err := p.q.Put(m.Context(), consumer, seq, m.Metadata.Get("anvil_subject"), m.Payload, m.Metadata.Get("reason_poisoned")); err != nil {
			return err
		}
	}
	return nil
}

func (publisher) Close() error { return nil }

// Entry is one poisoned message read back.
type Entry struct {
	Consumer string
	Sequence uint64
	Subject  string
	Reason   string
	Data     []byte
}

// List returns up to max poisoned messages, oldest first (for tests and
// operators).
func List(ctx context.Context, js jetstream.JetStream, max int) ([]Entry, error) {
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for seq := uint64(1); len(out) < max; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, err
		}
		n, _ := strconv.ParseUint(m.Header.Get(HeaderSequence), 10, 64)
		out = append(out, Entry{Consumer: m.Header.Get(HeaderConsumer), Sequence: n,
			Subject: m.Header.Get(HeaderSubject), Reason: m.Header.Get(HeaderReason), Data: m.Data})
	}
	return out, nil
}
