package adapters

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Versions reads an aggregate's version (the stream sequence of its last
// event) with one direct read of the stream, without a consumer: what a
// command needs to trust a decision made on the read model's copy.
type Versions struct {
	stream jetstream.Stream
}

// NewVersions looks up the EVENTS stream.
func NewVersions(ctx context.Context, js jetstream.JetStream) (*Versions, error) {
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return nil, err
	}
	return &Versions{stream: s}, nil
}

// Version is the sequence of ref's last event, 0 when it has none.
func (v *Versions) Version(ctx context.Context, ref events.AggregateRef) (uint64, error) {
	m, err := v.stream.GetLastMsgForSubject(ctx, ref.Subject())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, errs.Unavailable("reading the version of %s: %v", ref, err)
	}
	return m.Sequence, nil
}
