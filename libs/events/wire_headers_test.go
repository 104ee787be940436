package events_test

import (
	"net/textproto"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
)

// TestHeaderKeysCanonical: the store puts header keys into a message as
// they are, without nats.Header.Set's canonicalisation, so each must
// already be in the form Set gives it; otherwise a reader's Get would not
// find it.
func TestHeaderKeysCanonical(t *testing.T) {
	for _, k := range []string{events.HeaderEventID, events.HeaderEventType, events.HeaderSchemaVersion,
		events.HeaderTime, events.HeaderActor, events.HeaderCorrelation, events.HeaderCausation,
		jetstream.ExpectedStreamHeader, jetstream.ExpectedLastSubjSeqHeader} {
		if c := textproto.CanonicalMIMEHeaderKey(k); c != k {
			t.Errorf("header %q is %q in canonical form", k, c)
		}
	}
}
