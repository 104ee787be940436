package events

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSettleInFlightRefusal gives an append the answer a clustered stream
// gives while another message to the aggregate is in flight (a wrong last
// sequence that names none): the event is neither stored nor refused, but
// sent again, up to maxInFlightRefusals times; an answer that stores it
// ends the retries and the next event starts from none; an append whose
// context ends while it waits fails with the context's error.
// (TestClusterAppendsOneAfterTheOther meets the answer from real servers
// when the machine is loaded.)
func TestSettleInFlightRefusal(t *testing.T) {
	refusal := &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Code: 400,
		Description: "wrong last sequence"}
	ref := AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	newOp := func(ctx context.Context, n int) *appendOp {
		return &appendOp{ctx: ctx, ref: ref, subject: ref.Subject(), expected: 7, bound: bindingFor(ref),
			envs: make([]Envelope, n), drafts: n}
	}

	op := newOp(context.Background(), 2)
	for i := range maxInFlightRefusals {
		op.settle(nil, refusal)
		if op.err != nil || op.stored != 0 || !op.pending() || op.inFlight != i+1 {
			t.Fatalf("after refusal %d: err %v, stored %d, pending %v, in flight %d; want the event sent again",
				i+1, op.err, op.stored, op.pending(), op.inFlight)
		}
	}
	op.settle(&jetstream.PubAck{Sequence: 9}, nil)
	if op.err != nil || op.stored != 1 || op.envs[0].Sequence != 9 || op.expected != 9 || op.inFlight != 0 {
		t.Fatalf("after the answer that stored it: err %v, stored %d at %d, expected %d, in flight %d",
			op.err, op.stored, op.envs[0].Sequence, op.expected, op.inFlight)
	}
	op.settle(nil, refusal)
	if op.err != nil || op.stored != 1 || op.inFlight != 1 {
		t.Fatalf("the next event's first refusal: err %v, stored %d, in flight %d", op.err, op.stored, op.inFlight)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	op = newOp(ctx, 1)
	op.settle(nil, refusal)
	if !errors.Is(op.err, context.Canceled) || op.stored != 0 {
		t.Fatalf("refused with its context ended: err %v, stored %d; want the context's error", op.err, op.stored)
	}
}
