package events

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The wire form is binary content mode, as in CloudEvents' NATS binding: the
// envelope's metadata travels in headers and the body is the payload alone.
// nats.go parses headers of every message anyway, so a reader pays only for
// the payload it decodes, which is what keeps replays near raw read speed.
const (
	HeaderEventID       = "Nats-Msg-Id"
	HeaderSchemaVersion = "Anvil-Schema-Version"
	HeaderTime          = "Anvil-Time"
	HeaderActor         = "Anvil-Actor"
	HeaderCorrelation   = "Anvil-Correlation-Id"
	HeaderCausation     = "Anvil-Causation-Id"
	headerTraceparent   = "traceparent"
	headerTracestate    = "tracestate"
)

// EncodeMsg returns the NATS message that stores env.
func EncodeMsg(env *Envelope) *nats.Msg {
	h := newHeaderBuilder(envelopeHeaders(env))
	h.envelope(env, formatHeaderTime(env.Time))
	return &nats.Msg{Subject: env.Ref().Subject(), Header: h.header, Data: env.Payload}
}

// The headers an event's message may carry, each at its slot of a
// headerBuilder.
const (
	slotID = iota
	slotType
	slotSchemaVersion
	slotTime
	slotActor
	slotCorrelation
	slotCausation
	slotTraceparent
	slotTracestate
	slotExpectedStream
	slotExpectedLastMsgID
	slotExpectedLastSeq
	headerSlots
)

// headerKeys are the slots' keys, as they go into a message: in the
// canonical form nats.Header.Set would give them (TestHeaderKeysCanonical),
// except the trace context's, which stay lowercase as the W3C propagator
// reads them.
var headerKeys = [headerSlots]string{HeaderEventID, HeaderEventType, HeaderSchemaVersion, HeaderTime,
	HeaderActor, HeaderCorrelation, HeaderCausation, headerTraceparent, headerTracestate,
	jetstream.ExpectedStreamHeader, jetstream.ExpectedLastMsgIDHeader, jetstream.ExpectedLastSubjSeqHeader}

// headerBuilder fills a nats.Header whose values are slices of its own
// array, each header's at its slot: one allocation for all of them rather
// than one per header, a message being built on every append. A builder
// used again (an append's pooled message) touches its map only where a
// header comes or goes: a value is changed in place.
type headerBuilder struct {
	header nats.Header
	values [headerSlots]string
	has    uint16 // the slots whose header is in header (headerSlots <= 16)
}

func newHeaderBuilder(n int) *headerBuilder { return &headerBuilder{header: make(nats.Header, n)} }

// set puts v at slot; an empty v removes the slot's header.
func (b *headerBuilder) set(slot int, v string) {
	b.values[slot] = v
	bit := uint16(1) << slot
	switch {
	case v != "" && b.has&bit == 0:
		b.header[headerKeys[slot]] = b.values[slot : slot+1 : slot+1]
		b.has |= bit
	case v == "" && b.has&bit != 0:
		delete(b.header, headerKeys[slot])
		b.has &^= bit
	}
}

// envelopeHeaders is the number of headers envelope sets for env.
func envelopeHeaders(env *Envelope) int {
	n := 4 // id, type, schema version, time
	for _, v := range [...]string{env.Actor, env.CorrelationID, env.CausationID, env.Trace[headerTraceparent], env.Trace[headerTracestate]} {
		if v != "" {
			n++
		}
	}
	return n
}

// envelope sets the headers that carry env's metadata; timeText is
// formatHeaderTime(env.Time), which the events of one append share.
func (b *headerBuilder) envelope(env *Envelope, timeText string) {
	b.set(slotID, env.ID)
	b.set(slotType, env.Type)
	b.set(slotSchemaVersion, strconv.Itoa(env.SchemaVersion))
	b.set(slotTime, timeText)
	b.set(slotActor, escapeHeader(env.Actor))
	b.set(slotCorrelation, escapeHeader(env.CorrelationID))
	b.set(slotCausation, escapeHeader(env.CausationID))
	b.set(slotTraceparent, env.Trace[headerTraceparent])
	b.set(slotTracestate, env.Trace[headerTracestate])
}

func formatHeaderTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// DecodeMsg rebuilds the envelope of a stored message.
func DecodeMsg(subject string, h nats.Header, data []byte, seq uint64) (*Envelope, error) {
	ref, err := ParseSubject(subject)
	if err != nil {
		return nil, fmt.Errorf("events: message %d is not an event: %w", seq, err)
	}
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	env := &Envelope{
		ID: get(HeaderEventID), Type: get(HeaderEventType),
		Org: ref.Org, AggregateType: ref.Type, AggregateID: ref.ID,
		Actor: unescapeHeader(get(HeaderActor)), CorrelationID: unescapeHeader(get(HeaderCorrelation)),
		CausationID: unescapeHeader(get(HeaderCausation)),
		Payload:     data, Sequence: seq,
	}
	if env.ID == "" || env.Type == "" {
		return nil, fmt.Errorf("events: message %d is not an event: missing %s or %s header", seq, HeaderEventID, HeaderEventType)
	}
	if env.SchemaVersion, err = strconv.Atoi(get(HeaderSchemaVersion)); err != nil {
		return nil, fmt.Errorf("events: message %d has a bad %s header: %q", seq, HeaderSchemaVersion, get(HeaderSchemaVersion))
	}
	if env.Time, err = time.Parse(time.RFC3339Nano, get(HeaderTime)); err != nil {
		return nil, fmt.Errorf("events: message %d has a bad %s header: %q", seq, HeaderTime, get(HeaderTime))
	}
	if tp := get(headerTraceparent); tp != "" {
		env.Trace = map[string]string{"traceparent": tp}
		if ts := get(headerTracestate); ts != "" {
			env.Trace["tracestate"] = ts
		}
	}
	return env, nil
}

// escapeHeader percent-encodes what a header value cannot hold (control
// characters, non-ASCII) and '%' itself, so that a token name chosen by a
// user can never inject a header line.
func escapeHeader(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescapeHeader(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
