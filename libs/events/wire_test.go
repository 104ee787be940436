package events_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
)

func TestWireRoundTrip(t *testing.T) {
	env := events.Envelope{
		ID: "0190a4a0-0000-7000-8000-000000000001", Type: "machine.registered", SchemaVersion: 2,
		Org: "acme", AggregateType: "machine", AggregateID: "4c4c4544-0035-4b10-8056-b7c04f4e3532",
		Time:  time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.UTC),
		Actor: "token:t1 (bob's\r\nInjected: yes 100% ünïcode)", CorrelationID: "c-1", CausationID: "e-0",
		Trace:   map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Payload: []byte(`{"mac":"aa:bb"}`), Sequence: 42,
	}
	msg := events.EncodeMsg(&env)
	for k, vs := range msg.Header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				t.Fatalf("header %s carries a line break: %q", k, v)
			}
		}
	}
	if msg.Header["traceparent"] == nil {
		t.Fatal("traceparent header is not lowercase")
	}
	got, err := events.DecodeMsg(msg.Subject, msg.Header, msg.Data, 42)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, env) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, env)
	}
}

func FuzzDecodeMsg(f *testing.F) {
	f.Add("events.acme.machine.m1", "Nats-Msg-Id:x\nAnvil-Event-Type:t\nAnvil-Schema-Version:1\nAnvil-Time:2026-11-21T12:00:00Z\nAnvil-Actor:a%0Ab", []byte(`{}`))
	f.Add("events.acme", "", []byte(`x`))
	f.Add("events.a.b.c", "Anvil-Schema-Version:x", []byte(nil))
	f.Fuzz(func(t *testing.T, subject, headers string, data []byte) {
		h := nats.Header{}
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h[k] = append(h[k], v)
			}
		}
		env, err := events.DecodeMsg(subject, h, data, 1)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip.
		back, err := events.DecodeMsg(subject, events.EncodeMsg(env).Header, data, 1)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if back.ID != env.ID || back.Type != env.Type || back.Actor != env.Actor || !back.Time.Equal(env.Time) {
			t.Fatalf("round trip changed the envelope: %+v vs %+v", back, env)
		}
	})
}
