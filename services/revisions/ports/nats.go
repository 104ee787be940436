// Package ports serves the revisions service's NATS subjects: each handler
// decodes an api request (strictly, by the command bus), converts it to an
// app command or query, calls the app and converts the answer back.
package ports

import (
	"context"
	"errors"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// RequestTimeout bounds one request's work (the command bus gives handlers
// no deadline of their own; the caller gives up after its own timeout).
const RequestTimeout = 30 * time.Second

// Register serves every subject of api.Subjects on srv.
func Register(srv *command.Server, a *app.App) error {
	var all []error
	add := func(err error) { all = append(all, err) }

	// ---- clusters ----
	add(handle(srv, api.SubjectClusterCreate, func(ctx context.Context, r api.CreateClusterRequest) (api.Cluster, error) {
		rec, err := a.CreateCluster(ctx, app.CreateCluster{Org: r.Org, Cluster: cluster.Create{
			Name: r.Name, APIEndpoint: r.APIEndpoint, KubernetesVersion: r.KubernetesVersion,
			Kubeconfig: secret.Secret(r.Kubeconfig.Reveal()), BootstrapToken: secret.Secret(r.BootstrapToken.Reveal()),
			CACertHash: r.CACertHash,
		}})
		return fromCluster(app.ClusterView{ClusterRecord: rec}), err
	}))
	add(handle(srv, api.SubjectClusterUpdate, func(ctx context.Context, r api.UpdateClusterRequest) (api.UpdateClusterResponse, error) {
		res, err := a.UpdateCluster(ctx, app.UpdateCluster{
			Org: r.Org, Name: r.Name, ExpectedVersion: r.ExpectedVersion,
			Update: cluster.Update{APIEndpoint: r.APIEndpoint, KubernetesVersion: r.KubernetesVersion, CACertHash: r.CACertHash},
		})
		return api.UpdateClusterResponse{Cluster: fromCluster(app.ClusterView{ClusterRecord: res.Cluster}), Changed: res.Changed}, err
	}))
	add(handle(srv, api.SubjectClusterRotateKubeconfig, func(ctx context.Context, r api.RotateKubeconfigRequest) (api.Cluster, error) {
		rec, err := a.RotateKubeconfig(ctx, app.RotateKubeconfig{
			Org: r.Org, Name: r.Name, Kubeconfig: secret.Secret(r.Kubeconfig.Reveal()), ExpectedVersion: r.ExpectedVersion,
		})
		return fromCluster(app.ClusterView{ClusterRecord: rec}), err
	}))
	add(handle(srv, api.SubjectClusterRotateBootstrapToken, func(ctx context.Context, r api.RotateBootstrapTokenRequest) (api.Cluster, error) {
		rec, err := a.RotateBootstrapToken(ctx, app.RotateBootstrapToken{
			Org: r.Org, Name: r.Name, BootstrapToken: secret.Secret(r.BootstrapToken.Reveal()), ExpectedVersion: r.ExpectedVersion,
		})
		return fromCluster(app.ClusterView{ClusterRecord: rec}), err
	}))
	add(handle(srv, api.SubjectClusterDelete, func(ctx context.Context, r api.DeleteClusterRequest) (api.Deleted, error) {
		v, err := a.DeleteCluster(ctx, app.DeleteCluster{Org: r.Org, Name: r.Name, ExpectedVersion: r.ExpectedVersion})
		return api.Deleted{Version: v}, err
	}))
	add(handle(srv, api.SubjectClusterGet, func(ctx context.Context, r api.GetClusterRequest) (api.Cluster, error) {
		at, err := position(r.At)
		if err != nil {
			return api.Cluster{}, err
		}
		v, err := a.GetCluster(ctx, app.GetCluster{Org: r.Org, Name: r.Name, At: at, MinVersion: r.MinVersion})
		return fromCluster(v), err
	}))
	add(handle(srv, api.SubjectClusterList, func(ctx context.Context, r api.ListClustersRequest) (api.ClusterList, error) {
		vs, err := a.ListClusters(ctx, app.ListClusters{Org: r.Org, MinVersion: r.MinVersion})
		out := api.ClusterList{Clusters: make([]api.Cluster, len(vs))}
		for i, v := range vs {
			out.Clusters[i] = fromCluster(v)
		}
		return out, err
	}))
	add(handle(srv, api.SubjectClusterCredentials, func(ctx context.Context, r api.ClusterCredentialsRequest) (api.ClusterCredentials, error) {
		c, err := a.ClusterCredentials(ctx, app.ClusterCredentials{Org: r.Org, Cluster: r.Cluster})
		if err != nil {
			return api.ClusterCredentials{}, err
		}
		return api.ClusterCredentials{
			Org: c.Org, Cluster: c.Cluster, APIEndpoint: c.APIEndpoint,
			Kubeconfig: api.Secret(c.Kubeconfig.Reveal()), Version: c.Version,
		}, nil
	}))

	// ---- pools ----
	add(handle(srv, api.SubjectPoolCreate, func(ctx context.Context, r api.CreatePoolRequest) (api.PoolChange, error) {
		var f errs.Fields
		spec := toSpec(&f, r.Spec())
		if len(f) > 0 {
			return api.PoolChange{}, allProblems(f, spec, r.Org, "name", r.Name, "cluster", r.Cluster)
		}
		o, err := a.CreatePool(ctx, app.CreatePool{
			Org: r.Org, Name: r.Name, Cluster: r.Cluster, Spec: spec, Message: r.Message, Apply: r.Apply,
		})
		return fromOutcome(o), err
	}))
	add(handle(srv, api.SubjectPoolUpdate, func(ctx context.Context, r api.UpdatePoolRequest) (api.PoolChange, error) {
		var f errs.Fields
		spec := toSpec(&f, r.Spec())
		if len(f) > 0 {
			return api.PoolChange{}, allProblems(f, spec, r.Org, "name", r.Name)
		}
		o, err := a.UpdatePool(ctx, app.UpdatePool{
			Org: r.Org, Name: r.Name, Spec: spec, Message: r.Message, Apply: r.Apply, ExpectedVersion: r.ExpectedVersion,
		})
		return fromOutcome(o), err
	}))
	add(handle(srv, api.SubjectPoolApplyRevision, func(ctx context.Context, r api.ApplyRevisionRequest) (api.PoolChange, error) {
		o, err := a.ApplyRevision(ctx, app.ApplyRevision{
			Org: r.Org, Pool: r.Pool, Revision: r.Revision, ExpectedVersion: r.ExpectedVersion,
		})
		return fromOutcome(o), err
	}))
	add(handle(srv, api.SubjectPoolDelete, func(ctx context.Context, r api.DeletePoolRequest) (api.Deleted, error) {
		v, err := a.DeletePool(ctx, app.DeletePool{Org: r.Org, Name: r.Name, ExpectedVersion: r.ExpectedVersion})
		return api.Deleted{Version: v}, err
	}))
	add(handle(srv, api.SubjectPoolGet, func(ctx context.Context, r api.GetPoolRequest) (api.Pool, error) {
		at, err := position(r.At)
		if err != nil {
			return api.Pool{}, err
		}
		rec, err := a.GetPool(ctx, app.GetPool{Org: r.Org, Name: r.Name, At: at, MinVersion: r.MinVersion})
		return fromPool(rec), err
	}))
	add(handle(srv, api.SubjectPoolList, func(ctx context.Context, r api.ListPoolsRequest) (api.PoolList, error) {
		recs, err := a.ListPools(ctx, app.ListPools{Org: r.Org, Cluster: r.Cluster, MinVersion: r.MinVersion})
		out := api.PoolList{Pools: make([]api.PoolSummary, len(recs))}
		for i, rec := range recs {
			out.Pools[i] = fromPoolSummary(rec)
		}
		return out, err
	}))

	// ---- revisions ----
	add(handle(srv, api.SubjectRevisionList, func(ctx context.Context, r api.ListRevisionsRequest) (api.RevisionList, error) {
		rec, err := a.ListRevisions(ctx, app.ListRevisions{Org: r.Org, Pool: r.Pool, MinVersion: r.MinVersion})
		if err != nil {
			return api.RevisionList{}, err
		}
		return api.RevisionList{Pool: rec.State.Name, AppliedRevision: rec.State.AppliedRevision, Revisions: fromRevisions(&rec.State)}, nil
	}))
	add(handle(srv, api.SubjectRevisionGet, func(ctx context.Context, r api.GetRevisionRequest) (api.Revision, error) {
		v, err := a.GetRevision(ctx, app.GetRevision{Org: r.Org, Pool: r.Pool, Revision: r.Revision, MinVersion: r.MinVersion})
		if err != nil {
			return api.Revision{}, err
		}
		rev := v.Revision
		return api.Revision{
			Org: v.Pool.Org, Pool: v.Pool.State.Name,
			Number: rev.Number, Hash: rev.Hash, Author: rev.Author, Message: rev.Message, CreatedAt: rev.CreatedAt,
			PlatformMade: rev.PlatformMade, Applied: rev.Number == v.Pool.State.AppliedRevision,
			KubernetesVersion: rev.Config.Kubernetes.Version,
			Config:            fromConfig(rev.Config),
		}, nil
	}))
	add(handle(srv, api.SubjectRevisionDiff, func(ctx context.Context, r api.DiffRevisionsRequest) (api.RevisionDiff, error) {
		d, err := a.DiffRevisions(ctx, app.DiffRevisions{Org: r.Org, Pool: r.Pool, From: r.From, To: r.To})
		return fromDiff(d), err
	}))
	add(handle(srv, api.SubjectRevisionIgnition, func(ctx context.Context, r api.RevisionIgnitionRequest) (api.RevisionIgnition, error) {
		p, err := a.PreviewIgnition(ctx, app.PreviewIgnition{Org: r.Org, Pool: r.Pool, Revision: r.Revision})
		if err != nil {
			return api.RevisionIgnition{}, err
		}
		return api.RevisionIgnition{
			Pool: r.Pool, Revision: p.Revision.Number, Hash: p.Revision.Hash,
			MachineRevisionID: p.Machine.ID, Ignition: rawJSON(p.Ignition),
		}, nil
	}))

	// ---- catalog ----
	add(handle(srv, api.SubjectCatalogList, func(ctx context.Context, r api.ListCatalogRequest) (api.Catalog, error) {
		rec, err := a.ListCatalog(ctx, app.ListCatalog{Org: r.Org})
		return fromCatalog(rec), err
	}))
	add(handle(srv, api.SubjectCatalogAddVersion, func(ctx context.Context, r api.AddCatalogVersionRequest) (api.Catalog, error) {
		rec, err := a.AddCatalogVersion(ctx, app.AddCatalogVersion{Version: r.Version})
		return fromCatalog(rec), err
	}))
	add(handle(srv, api.SubjectCatalogCheckSkew, func(ctx context.Context, r api.CheckSkewRequest) (api.SkewCheck, error) {
		res, err := a.CheckSkew(ctx, app.CheckSkew{Org: r.Org, ControlPlane: r.ControlPlane, Cluster: r.Cluster, Kubelet: r.Kubelet})
		if err != nil {
			return api.SkewCheck{}, err
		}
		return api.SkewCheck{
			ControlPlane: versionString(res.ControlPlane), Kubelet: versionString(res.Kubelet),
			InCatalog: res.InCatalog, Allowed: res.Allowed, Reason: res.Reason,
		}, nil
	}))

	// ---- rendering ----
	add(handle(srv, api.SubjectMachineRender, func(ctx context.Context, r api.RenderMachineRequest) (api.RenderedMachine, error) {
		out, err := a.RenderMachine(ctx, app.RenderMachine{
			Org: r.Org, Pool: r.Pool, Revision: r.Revision,
			Settings: pool.MachineSettings{Hostname: r.Hostname, Labels: r.Labels},
		})
		if err != nil {
			return api.RenderedMachine{}, err
		}
		return api.RenderedMachine{
			MachineRevisionID: out.Machine.ID, PoolRevision: out.Machine.PoolRevision,
			Hash: out.Machine.Hash, Ignition: rawJSON(out.Ignition),
		}, nil
	}))
	return errors.Join(all...)
}

// handle serves fn with a deadline of its own.
func handle[Req, Resp any](srv *command.Server, subject string, fn func(context.Context, Req) (Resp, error)) error {
	return command.Handle(srv, subject, func(ctx context.Context, req Req) (Resp, error) {
		ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
		return fn(ctx, req)
	})
}

// position parses a request's At into a log position.
func position(at string) (events.Position, error) {
	if at == "" {
		return events.Position{}, nil
	}
	seq, t, err := api.ParseAt(at)
	if err != nil {
		return events.Position{}, errs.Invalid("at", "%v", err)
	}
	if seq > 0 {
		return events.AtSeq(seq), nil
	}
	return events.AtTime(t), nil
}

// allProblems reports a spec that did not convert together with every
// other problem of the request, so that a caller learns them all at once.
func allProblems(f errs.Fields, spec pool.Spec, org string, named ...string) error {
	if err := fields.OrgID(org); err != nil {
		f.Add("org", "%v", err)
	}
	for i := 0; i+1 < len(named); i += 2 {
		if err := check.DNSLabel(named[i+1]); err != nil {
			f.Add(named[i], "%v", err)
		}
	}
	if err := spec.Validate(); errs.Is(err, errs.KindValidation) {
		f.Merge("", err)
	}
	return f.Err()
}
