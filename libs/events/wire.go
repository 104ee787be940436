package events

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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

// headerBuilder fills a nats.Header whose values share one backing array,
// one allocation for all of them rather than one per header: a message is
// built on every append. Keys go in as given, so they must be in the
// canonical form nats.Header.Set would give them (TestHeaderKeysCanonical),
// except the trace context's, which stay lowercase.
type headerBuilder struct {
	header nats.Header
	values []string
}

func newHeaderBuilder(n int) headerBuilder {
	return headerBuilder{header: make(nats.Header, n), values: make([]string, 0, n)}
}

func (b *headerBuilder) set(k, v string) {
	b.values = append(b.values, v)
	n := len(b.values)
	b.header[k] = b.values[n-1 : n : n]
}

func (b *headerBuilder) setIf(k, v string) {
	if v != "" {
		b.set(k, v)
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
	b.set(HeaderEventID, env.ID)
	b.set(HeaderEventType, env.Type)
	b.set(HeaderSchemaVersion, strconv.Itoa(env.SchemaVersion))
	b.set(HeaderTime, timeText)
	b.setIf(HeaderActor, escapeHeader(env.Actor))
	b.setIf(HeaderCorrelation, escapeHeader(env.CorrelationID))
	b.setIf(HeaderCausation, escapeHeader(env.CausationID))
	// Lowercase keys, as the W3C propagator reads them (nats.Header.Set
	// would canonicalise them).
	b.setIf(headerTraceparent, env.Trace[headerTraceparent])
	b.setIf(headerTracestate, env.Trace[headerTracestate])
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
