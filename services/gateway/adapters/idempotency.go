// Package adapters connects the gateway to JetStream beyond the services'
// own clients.
package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IdempotencyBucket keeps the answers to POSTs that carried an
// Idempotency-Key, so a retried request gets the first answer.
const IdempotencyBucket = "anvil_idempotency"

// Stored is a remembered answer; Pending marks a request still running.
type Stored struct {
	Pending     bool              `json:"pending,omitempty"`
	RequestHash string            `json:"request_hash"`
	Status      int               `json:"status,omitempty"`
	Header      map[string]string `json:"header,omitempty"`
	Body        []byte            `json:"body,omitempty"`
}

// Idempotency stores answers in a KV bucket for TTL.
type Idempotency struct{ kv jetstream.KeyValue }

// NewIdempotency ensures the bucket.
func NewIdempotency(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*Idempotency, error) {
	if replicas == 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: IdempotencyBucket, Description: "answers to POSTs with an Idempotency-Key",
		TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("idempotency bucket: %w", err)
	}
	return &Idempotency{kv: kv}, nil
}

// ErrExists means the key is already claimed; the stored entry is returned.
var ErrExists = errors.New("idempotency key already used")

// Claim marks key as pending for a request; if it is taken, it returns the
// stored entry and ErrExists.
func (i *Idempotency) Claim(ctx context.Context, key, requestHash string) (Stored, error) {
	b, _ := json.Marshal(Stored{Pending: true, RequestHash: requestHash})
	if _, err := i.kv.Create(ctx, key, b); err == nil {
		return Stored{}, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return Stored{}, err
	}
	e, err := i.kv.Get(ctx, key)
	if err != nil {
		return Stored{}, err
	}
	var s Stored
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return Stored{}, err
	}
	return s, ErrExists
}

// Complete stores the answer for key.
func (i *Idempotency) Complete(ctx context.Context, key string, s Stored) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = i.kv.Put(ctx, key, b)
	return err
}

// Release forgets a pending key whose request failed before answering.
func (i *Idempotency) Release(ctx context.Context, key string) { _ = i.kv.Delete(ctx, key) }
