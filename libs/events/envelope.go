// Package events is anvil's event log: the envelope every event travels in,
// the registry of typed payloads, and the Store that appends to and replays
// from one JetStream stream. Subpackages hold the projection runner, the
// watermill handler wiring, the command bus, tracing and the embedded server.
package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// StreamName is the one stream that holds every event of every organization.
const StreamName = "EVENTS"

// SubjectPrefix starts every event subject: events.<org>.<aggregate>.<id>.
const SubjectPrefix = "events"

// Envelope is one stored event. Everything needed to understand the event
// later (for audit or replay) is in it; NATS headers only duplicate the few
// fields that brokers and tracers look at.
type Envelope struct {
	ID            string            `json:"id"` // UUIDv7, also the Nats-Msg-Id
	Type          string            `json:"type"`
	SchemaVersion int               `json:"v"`
	Org           string            `json:"org"`
	AggregateType string            `json:"agg_type"`
	AggregateID   string            `json:"agg_id"`
	Time          time.Time         `json:"time"`
	Actor         string            `json:"actor,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	CausationID   string            `json:"causation_id,omitempty"`
	Trace         map[string]string `json:"trace,omitempty"` // W3C trace context
	Payload       json.RawMessage   `json:"payload"`

	// Sequence is the event's stream sequence, set when it is read back. It
	// is the aggregate's version once this event has been applied.
	Sequence uint64 `json:"-"`
}

// Ref returns the aggregate the event belongs to.
func (e *Envelope) Ref() AggregateRef {
	return AggregateRef{Org: e.Org, Type: e.AggregateType, ID: e.AggregateID}
}

// AggregateRef addresses one aggregate instance within an organization.
type AggregateRef struct {
	Org  string
	Type string
	ID   string
}

func (r AggregateRef) String() string { return r.Org + "/" + r.Type + "/" + r.ID }

// Subject is the NATS subject the aggregate's events are stored under.
func (r AggregateRef) Subject() string {
	return SubjectPrefix + "." + r.Org + "." + r.Type + "." + r.ID
}

// Validate refuses refs whose parts would not be single subject tokens, since
// a '.' or a wildcard in an ID would silently address other aggregates.
func (r AggregateRef) Validate() error {
	var f errs.Fields
	checkToken(&f, "org", r.Org)
	checkToken(&f, "aggregate_type", r.Type)
	checkToken(&f, "aggregate_id", r.ID)
	return f.Err()
}

// ParseSubject splits events.<org>.<aggregate>.<id> into its ref.
func ParseSubject(subject string) (AggregateRef, error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != SubjectPrefix {
		return AggregateRef{}, fmt.Errorf("subject %q is not events.<org>.<aggregate>.<id>", subject)
	}
	return AggregateRef{Org: parts[1], Type: parts[2], ID: parts[3]}, nil
}

const maxTokenLen = 128

func checkToken(f *errs.Fields, field, v string) {
	if v == "" {
		f.Add(field, "must not be empty")
		return
	}
	if len(v) > maxTokenLen {
		f.Add(field, "must be at most %d characters", maxTokenLen)
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			f.Add(field, "character %q at %d is not allowed (letters, digits, '-' and '_' only)", c, i)
			return
		}
	}
}

// FilterSubject is the subject filter for a set of aggregates; empty parts
// match anything.
func FilterSubject(org, aggregateType, id string) string {
	star := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	return SubjectPrefix + "." + star(org) + "." + star(aggregateType) + "." + star(id)
}
