package ports

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"

	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// Every DELETE answers 200 with the resource as the deletion left it: a
// machine being drained in status deleting, a removed machine, pool or
// cluster as it last was with "deleted": true, a revoked token with status
// revoked. The version (and ETag) is the deletion's.
//
// The revisions service answers a delete with the final version only; the
// pool or cluster as it was is that version read back from its events (as
// GET ?at= does). Should that read fail, the deletion has happened all the
// same, and the answer holds what is known.

func deleteCluster(ctx context.Context, nc *nats.Conn, req rev.DeleteClusterRequest) (rev.Cluster, error) {
	d, err := rev.DeleteCluster(ctx, nc, req)
	if err != nil {
		return rev.Cluster{}, err
	}
	c, err := rev.GetCluster(ctx, nc, rev.GetClusterRequest{Org: req.Org, Name: req.Name, At: strconv.FormatUint(d.Version, 10)})
	if err != nil {
		c = rev.Cluster{Org: req.Org, Name: req.Name}
	}
	c.Deleted, c.Version = true, d.Version
	return c, nil
}

func deletePool(ctx context.Context, nc *nats.Conn, req rev.DeletePoolRequest) (rev.Pool, error) {
	d, err := rev.DeletePool(ctx, nc, req)
	if err != nil {
		return rev.Pool{}, err
	}
	p, err := rev.GetPool(ctx, nc, rev.GetPoolRequest{Org: req.Org, Name: req.Name, At: strconv.FormatUint(d.Version, 10)})
	if err != nil {
		p = rev.Pool{Org: req.Org, Name: req.Name, Revisions: []rev.RevisionSummary{}}
	}
	p.Deleted, p.Version = true, d.Version
	return p, nil
}
