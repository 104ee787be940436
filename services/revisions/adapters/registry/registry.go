// Package registry asks the registry service, over NATS, how many machines
// belong to a pool (cmd.registry.machine.list): the production
// implementation of app.PoolMachines.
package registry

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Timeout bounds the whole count (every page).
const Timeout = 10 * time.Second

// pageSize is the registry's page bound for one list call.
const pageSize = 500

// Machines counts a pool's machines through the registry.
type Machines struct{ NC *nats.Conn }

// CountMachines implements app.PoolMachines. The registry not answering is
// errs.KindUnavailable; any other failure to count is internal. Either
// way the caller deletes nothing: a pool is never deleted on a guess.
func (m Machines) CountMachines(ctx context.Context, org, pool string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	c := regapi.Client{NC: m.NC}
	req := regapi.MachineList{Org: org, Pool: pool, Limit: pageSize}
	n := 0
	for {
		page, err := c.ListMachines(ctx, req)
		if err != nil {
			return 0, translate(pool, err)
		}
		n += len(page.Items)
		if page.Next == "" {
			return n, nil
		}
		req.Cursor = page.Next
	}
}

// translate turns the registry's error into the revisions service's: the
// caller asked to delete a pool, not to list machines, so the message says
// what could not be checked and that nothing was deleted.
func translate(pool string, err error) error {
	e := errs.As(err)
	if e.Kind == errs.KindUnavailable {
		return errs.Unavailable("cannot check whether machines still belong to pool %q, so it was not deleted: %s; try again", pool, e.Message)
	}
	// Anything else (the registry refusing a request this service
	// validated) is a bug on one side, not the caller's input.
	return errs.Internal("cannot check whether machines still belong to pool %q, so it was not deleted: the registry answered %s: %s", pool, e.Kind, e.Message)
}
