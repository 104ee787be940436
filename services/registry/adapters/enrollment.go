package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/enrollment"
)

// EnrollmentBucket holds, per enrollment token, how many machines it
// registered and its rate limiter's bucket (enrollment.Usage), under
// <org>.<token id>. Every replica updates the same value with a
// compare-and-set, so the cap and the rate hold across replicas.
const EnrollmentBucket = "anvil_enrollment"

// Enrollment keeps enrollment.Usage per token in a JetStream KV bucket.
type Enrollment struct {
	kv jetstream.KeyValue
}

// NewEnrollment ensures the bucket.
func NewEnrollment(ctx context.Context, js jetstream.JetStream, replicas int) (*Enrollment, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      EnrollmentBucket,
		Description: "per enrollment token (<org>.<token id>): machines registered, and the registration rate's bucket",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("enrollment bucket: %w", err)
	}
	return &Enrollment{kv: kv}, nil
}

// casAttempts bounds the compare-and-set retries of one update; each is a
// read and a write of one small value, and every retry means another
// registration of the same token went through.
const casAttempts = 200

// update applies fn to the token's usage with a compare-and-set, retrying
// when another registration updated it first. seed gives the usage of a
// token that has none stored yet (its machines, counted from the read
// model, so that a lost bucket does not reset the cap).
func (e *Enrollment) update(ctx context.Context, org, tokenID string, seed func() int,
	fn func(enrollment.Usage) (enrollment.Usage, error)) error {
	k := key(org, tokenID)
	for range casAttempts {
		u, rev, err := e.get(ctx, k, seed)
		if err != nil {
			return err
		}
		next, err := fn(u)
		if err != nil {
			return err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return errs.Internal("encoding enrollment usage: %v", err)
		}
		if rev == 0 {
			_, err = e.kv.Create(ctx, k, b)
		} else {
			_, err = e.kv.Update(ctx, k, b, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return errs.Unavailable("updating enrollment token %s's usage: %v", tokenID, err)
		}
		if ctx.Err() != nil {
			return errs.Unavailable("updating enrollment token %s's usage: %v", tokenID, ctx.Err())
		}
	}
	return errs.Unavailable("enrollment token %s is registering too many machines at once to keep count; retry", tokenID)
}

// isWrongSequence reports a compare-and-set that lost: the value changed
// since it was read.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func (e *Enrollment) get(ctx context.Context, k string, seed func() int) (enrollment.Usage, uint64, error) {
	entry, err := e.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		u := enrollment.Usage{}
		if seed != nil {
			u.Registered = seed()
		}
		return u, 0, nil
	}
	if err != nil {
		return enrollment.Usage{}, 0, errs.Unavailable("reading enrollment usage: %v", err)
	}
	var u enrollment.Usage
	if err := json.Unmarshal(entry.Value(), &u); err != nil {
		return enrollment.Usage{}, 0, errs.Internal("enrollment usage %s does not decode: %v", k, err)
	}
	return u, entry.Revision(), nil
}

// Admit counts one new registration of the token if its limits allow it,
// or returns the refusal (*enrollment.CapReached, *enrollment.RateLimited).
func (e *Enrollment) Admit(ctx context.Context, org, tokenID string, l enrollment.Limits, now time.Time, seed func() int) error {
	return e.update(ctx, org, tokenID, seed, func(u enrollment.Usage) (enrollment.Usage, error) { return u.Admit(l, now) })
}

// Release gives back an admission whose registration did not happen.
func (e *Enrollment) Release(ctx context.Context, org, tokenID string, l enrollment.Limits, now time.Time) error {
	return e.update(ctx, org, tokenID, nil, func(u enrollment.Usage) (enrollment.Usage, error) { return u.Release(l, now), nil })
}

// Count counts a registration that happened without an admission.
func (e *Enrollment) Count(ctx context.Context, org, tokenID string, seed func() int) error {
	return e.update(ctx, org, tokenID, seed, func(u enrollment.Usage) (enrollment.Usage, error) { return u.Count(), nil })
}

// Registered is how many machines the token has registered.
func (e *Enrollment) Registered(ctx context.Context, org, tokenID string, seed func() int) (int, error) {
	u, _, err := e.get(ctx, key(org, tokenID), seed)
	return u.Registered, err
}
