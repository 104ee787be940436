package story

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/client"
)

// The story calls the gateway through the typed client
// (github.com/anvil-fleet/anvil/client). What is left here is how it makes
// its clients, and how it retries a call while the stack catches up.

// Client returns a client of the gateway with token for organization org
// (empty: none; InOrg picks one).
func (e *Env) Client(token, org string) (*client.Client, error) {
	return client.New(client.Options{BaseURL: e.GatewayURL, Token: token, Org: org, UserAgent: "anvil-demo"})
}

// Admin is a client with the bootstrap admin token, for no organization
// (InOrg picks one).
func (e *Env) Admin() (*client.Client, error) { return e.Client(e.AdminToken, "") }

// Retry calls call again every 100 ms while it fails with a *Problem of
// one of the statuses, until ctx ends. Without statuses: 503, a service
// that does not answer yet; the story adds 404 where a projection has not
// caught up with a write, 401 where a new token is not known yet.
func Retry(ctx context.Context, call func() error, statuses ...int) error {
	if len(statuses) == 0 {
		statuses = []int{503}
	}
	for {
		err := call()
		p, ok := client.AsProblem(err)
		if !ok || !slices.Contains(statuses, p.Status) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retryValue is Retry for a call that answers a value.
func retryValue[T any](ctx context.Context, call func() (*T, error), statuses ...int) (T, error) {
	var out *T
	err := Retry(ctx, func() (err error) { out, err = call(); return err }, statuses...)
	if err != nil {
		var zero T
		return zero, err
	}
	return *out, nil
}
