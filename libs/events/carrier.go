package events

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier. It keeps
// keys lowercase ("traceparent"), unlike propagation.HeaderCarrier, which
// canonicalises them to "Traceparent" as net/http does.
type HeaderCarrier nats.Header

func (c HeaderCarrier) Get(key string) string {
	if v := nats.Header(c)[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	// Tolerate producers that canonicalised the key.
	for k, v := range c {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (c HeaderCarrier) Set(key, value string) { nats.Header(c)[strings.ToLower(key)] = []string{value} }

func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// MapCarrier is the carrier over an envelope's Trace map.
type MapCarrier map[string]string

func (c MapCarrier) Get(key string) string { return c[strings.ToLower(key)] }
func (c MapCarrier) Set(key, value string) { c[strings.ToLower(key)] = value }
func (c MapCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
