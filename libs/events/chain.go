package events

import (
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// chainer is the store's publisher of chained appends, made on the first
// append of several events: a JetStream handle of its own on the store's
// connection, whose futures answer each publish (AppendMany's publisher
// hands its answers to handlers instead).
type chainer struct {
	once sync.Once
	js   jetstream.JetStream
	err  error
}

func (s *JetStreamStore) chainPublisher() (jetstream.JetStream, error) {
	c := &s.chain
	c.once.Do(func() {
		c.js, c.err = jetstream.New(s.js.Conn(),
			jetstream.WithPublishAsyncMaxPending(pipelineInFlight),
			jetstream.WithPublishAsyncTimeout(s.js.Options().DefaultTimeout))
	})
	return c.js, c.err
}

// appendChained publishes the events of op left to store in bursts, each
// sent whole before its answers are awaited, so that an append of n events
// costs about one round trip instead of n. A burst's first event expects
// the aggregate's version, as a single publish does; each later one
// expects the stream's last message to be the event before it
// (Nats-Expected-Last-Msg-Id), so that nothing, from any writer, lands
// between the events of one append, and none lands if its predecessor did
// not. A burst ends at its first event not stored: that event opens the
// next burst, with the version the events stored so far leave. An event
// that fails as a burst's first is settled as a single publish would (a
// version mismatch may be an earlier attempt that landed), so every burst
// stores an event or ends the append. The last event left, and what is
// left when a burst cannot be sent at all, go out as single publishes.
//
// Only on a stream of one replica: a clustered stream checks
// Nats-Expected-Last-Msg-Id when it applies a message, after it has taken
// the message's id for deduplication, so that an event whose chain broke
// could not be published again until the duplicate window had passed.
func (s *JetStreamStore) appendChained(op *appendOp) {
	js, err := s.chainPublisher()
	if err != nil {
		return // the single publishes store them
	}
	futures := make([]jetstream.PubAckFuture, 0, len(op.envs))
	for op.pending() && len(op.envs)-op.stored > 1 {
		first := op.stored
		futures = futures[:0]
		for i := first; i < len(op.envs); i++ {
			// Never pooled: nats.go keeps an asynchronous message until its
			// answer comes, to send it again if no server answered.
			out := newOutgoing()
			op.fillAt(i, i > first, &out.msg, &out.h)
			f, err := js.PublishMsgAsync(&out.msg)
			if err != nil {
				if i == first {
					// Nothing of this burst was sent (too many publishes
					// pending in the process, say): the single publishes
					// go on from here.
					return
				}
				break
			}
			futures = append(futures, f)
		}
		for k, f := range futures {
			var ack *jetstream.PubAck
			var err error
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			case <-op.ctx.Done():
				// As a synchronous append given up on: an error, not a
				// conflict; the events may still land, and a retry of them
				// is deduplicated.
				err = op.ctx.Err()
			}
			if err != nil && k > 0 && op.ctx.Err() == nil {
				if chainBroken(err) {
					appendChainBreaks.Inc()
				}
				break // the rest expected this one: the next burst starts here
			}
			stored := op.stored
			if op.settle(ack, err); op.err != nil || op.stored == stored {
				break // ended, or the event goes again: the next burst starts with it
			}
		}
	}
}

// jsErrCodeWrongLastMsgID is the server's answer to a publish whose
// Nats-Expected-Last-Msg-Id is not the stream's last message (nats.go
// names no constant for it).
const jsErrCodeWrongLastMsgID jetstream.ErrorCode = 10070

func chainBroken(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeWrongLastMsgID
}
