package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// CheckSkew asks whether a kubelet may run against a control plane: the
// control plane is ControlPlane, or Cluster's; the kubelet is a minor
// (resolved to its newest patch in the catalog) or a full version.
type CheckSkew struct {
	Org, ControlPlane, Cluster, Kubelet string
}

// SkewResult is the answer.
type SkewResult struct {
	ControlPlane, Kubelet catalog.Version
	InCatalog, Allowed    bool
	Reason                string
}

// CheckSkew applies the catalog's skew policy.
func (a *App) CheckSkew(ctx context.Context, q CheckSkew) (SkewResult, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	var cp catalog.Version
	switch {
	case q.ControlPlane != "" && q.Cluster != "":
		f.Add("cluster", "set either control_plane or cluster, not both")
	case q.ControlPlane != "":
		v, err := catalog.ParseVersion(q.ControlPlane)
		if err != nil {
			f.Add("control_plane", "%v", err)
		}
		cp = v
	case q.Cluster != "":
		checkName(&f, "cluster", q.Cluster)
	default:
		f.Add("control_plane", "set control_plane (x.y.z) or cluster")
	}
	cat := a.Model.Catalog().State.Catalog
	var kubelet catalog.Version
	if v, err := catalog.ParseVersion(q.Kubelet); err == nil {
		kubelet = v
	} else if m, err := catalog.ParseMinor(q.Kubelet); err == nil {
		if kubelet, err = cat.Latest(m); err != nil {
			f.Add("kubelet", "%v", err)
		}
	} else {
		f.Add("kubelet", "must be a Kubernetes version x.y.z or a minor x.y")
	}
	if err := f.Err(); err != nil {
		return SkewResult{}, err
	}
	if q.Cluster != "" {
		cl, err := a.liveCluster(ctx, q.Org, q.Cluster)
		if err != nil {
			return SkewResult{}, err
		}
		cp = cl.State.KubernetesVersion
	}
	res := SkewResult{ControlPlane: cp, Kubelet: kubelet, InCatalog: cat.Has(kubelet)}
	if err := cat.CheckKubelet(cp, kubelet); err != nil {
		res.Reason = err.Error()
	} else {
		res.Allowed = true
	}
	return res, nil
}
