package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// PreviewIgnition renders a pool revision as a stand-in machine.
type PreviewIgnition struct {
	Org, Pool string
	Revision  int
}

// Preview is a rendered preview.
type Preview struct {
	Revision pool.Revision
	Machine  pool.MachineRevision
	Ignition []byte
}

// RedactedTokenSecret stands in for the secret half of the bootstrap token
// in previews and diffs (it has the token's syntax, [a-z0-9]{16}).
const RedactedTokenSecret = "redactedredacted"

// PreviewIgnition renders render.Preview: a machine named "preview"
// without labels of its own. Previews are for people, so the bootstrap
// token's secret half is replaced by RedactedTokenSecret; nothing needs to
// be decrypted, and a preview or a diff never shows a credential.
func (a *App) PreviewIgnition(ctx context.Context, q PreviewIgnition) (Preview, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	checkName(&f, "pool", q.Pool)
	if q.Revision < 1 {
		f.Add("revision", "must be a revision number (1 or more)")
	}
	if err := f.Err(); err != nil {
		return Preview{}, err
	}
	rec, rev, err := a.poolRevision(ctx, q.Org, q.Pool, q.Revision)
	if err != nil {
		return Preview{}, err
	}
	return a.preview(ctx, q.Org, &rec, rev)
}

func (a *App) preview(ctx context.Context, org string, rec *PoolRecord, rev pool.Revision) (Preview, error) {
	cl, ok := a.Model.Cluster(org, rec.State.Cluster)
	if !ok || !cl.State.Exists() {
		return Preview{}, errs.NotFound("cluster %q of pool %q not found", rec.State.Cluster, rec.State.Name)
	}
	join := cluster.Join{
		APIEndpoint:    cl.State.APIEndpoint,
		BootstrapToken: secret.Secret(cl.State.BootstrapTokenID + "." + RedactedTokenSecret),
		CACertHash:     cl.State.CACertHash,
	}
	opts, err := a.renderOptions(ctx, rev)
	if err != nil {
		return Preview{}, err
	}
	in, err := render.Preview(rec.State.Name, rev, join, opts)
	if err != nil {
		return Preview{}, err
	}
	out, err := a.Renderer.Render(in)
	if err != nil {
		return Preview{}, err
	}
	return Preview{Revision: rev, Machine: in.Machine, Ignition: out}, nil
}
