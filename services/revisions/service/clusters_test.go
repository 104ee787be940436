package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
)

func TestClusterCommands(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc

	// create
	c := h.createCluster("acme", "prod", "1.34.1")
	if c.Org != "acme" || c.Name != "prod" || c.KubernetesVersion != "1.34.1" || c.BootstrapTokenID != "k8sabc" || c.Version == 0 || c.CreatedAt.IsZero() {
		t.Fatalf("created: %+v", c)
	}
	_, err := api.CreateCluster(ctx, nc, clusterReq("acme", "prod", "1.34.1"))
	wantErr(t, "create twice", err, errs.KindConflict)
	_, err = api.CreateCluster(ctx, nc, api.CreateClusterRequest{Org: "Acme!", Name: "Prod", APIEndpoint: "http://x", KubernetesVersion: "1.34",
		Kubeconfig: "", BootstrapToken: "nope", CACertHash: "md5:1"})
	wantErr(t, "create invalid", err, errs.KindValidation, "org", "name", "api_endpoint", "kubernetes_version", "kubeconfig", "bootstrap_token", "ca_cert_hash")
	_, err = api.CreateCluster(ctx, nc, api.CreateClusterRequest{Org: "acme", Name: "x", APIEndpoint: "http://x"})
	wantErr(t, "create invalid (valid ids)", err, errs.KindValidation, "api_endpoint", "kubernetes_version", "kubeconfig", "bootstrap_token", "ca_cert_hash")
	_, err = api.CreateCluster(context.Background(), nc, clusterReq("acme", "other", "1.34.1"))
	wantErr(t, "create without actor", err, errs.KindUnauthorized)
	// A kubeconfig the rollout service could not use is refused now, not at the first drain.
	noContext := api.Secret(strings.TrimSuffix(testKubeconfig, testContext))
	bad := clusterReq("acme", "other", "1.34.1")
	bad.Kubeconfig = noContext
	_, err = api.CreateCluster(ctx, nc, bad)
	wantErr(t, "create with a kubeconfig without contexts", err, errs.KindValidation, "kubeconfig")
	if err == nil || !strings.Contains(err.Error(), "kubeconfig: has no current-context") || strings.Contains(err.Error(), "plaintext") {
		t.Errorf("create with a kubeconfig without contexts: %v", err)
	}
	bad.Kubeconfig = api.Secret(strings.Replace(string(testKubeconfig), "{token: kubeconfig-plaintext-7c1e5d}",
		"{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}", 1))
	_, err = api.CreateCluster(ctx, nc, bad)
	wantErr(t, "create with an exec plugin", err, errs.KindValidation, "kubeconfig")
	if _, err := api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "other"}); !errs.Is(err, errs.KindNotFound) {
		t.Errorf("a refused cluster exists: %v", err)
	}

	// get, list
	got, err := api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", MinVersion: c.Version})
	if err != nil || got.Version != c.Version || got.APIEndpoint != c.APIEndpoint {
		t.Fatalf("get: %+v %v", got, err)
	}
	_, err = api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "nope"})
	wantErr(t, "get missing", err, errs.KindNotFound)
	_, err = api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "No_Such"})
	wantErr(t, "get invalid", err, errs.KindValidation, "name")
	_, err = api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", At: "yesterday"})
	wantErr(t, "get at invalid", err, errs.KindValidation, "at")
	h.createCluster("acme", "edge", "1.33.4")
	list, err := api.ListClusters(ctx, nc, api.ListClustersRequest{Org: "acme", MinVersion: c.Version + 1})
	if err != nil || len(list.Clusters) != 2 || list.Clusters[0].Name != "edge" || list.Clusters[1].Name != "prod" {
		t.Fatalf("list: %+v %v", list, err)
	}
	_, err = api.ListClusters(ctx, nc, api.ListClustersRequest{Org: ""})
	wantErr(t, "list invalid", err, errs.KindValidation, "org")

	// update
	up, err := api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", APIEndpoint: ptr("https://api2.prod.example"), ExpectedVersion: c.Version})
	if err != nil || !up.Changed || up.Cluster.APIEndpoint != "https://api2.prod.example" || up.Cluster.Version <= c.Version {
		t.Fatalf("update: %+v %v", up, err)
	}
	same, err := api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", APIEndpoint: ptr("https://api2.prod.example")})
	if err != nil || same.Changed || same.Cluster.Version != up.Cluster.Version {
		t.Fatalf("no-op update: %+v %v", same, err)
	}
	_, err = api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", APIEndpoint: ptr("ftp://x"), CACertHash: ptr("x"), KubernetesVersion: ptr("1")})
	wantErr(t, "update invalid", err, errs.KindValidation, "api_endpoint", "ca_cert_hash", "kubernetes_version")
	_, err = api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "nope", APIEndpoint: ptr("https://x.example")})
	wantErr(t, "update missing", err, errs.KindNotFound)
	_, err = api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", APIEndpoint: ptr("https://api3.prod.example"), ExpectedVersion: c.Version})
	wantErr(t, "update stale", err, errs.KindPrecondition)

	// The skew policy against the cluster's pools.
	pc := h.createPool("acme", "workers", "prod", testSpec(), false) // kubelet 1.33.4
	_, err = api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", KubernetesVersion: ptr("1.33.1")})
	wantErr(t, "update below a pool's kubelet", err, errs.KindValidation, "kubernetes_version")
	if err != nil && !strings.Contains(err.Error(), `pool "workers"`) {
		t.Errorf("skew error does not name the pool: %v", err)
	}

	// rotate kubeconfig
	cur, _ := api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", MinVersion: pc.Pool.Version})
	rk, err := api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig2), ExpectedVersion: cur.Version})
	if err != nil || rk.Version <= cur.Version {
		t.Fatalf("rotate kubeconfig: %+v %v", rk, err)
	}
	_, err = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: "not: [yaml"})
	wantErr(t, "rotate kubeconfig invalid", err, errs.KindValidation, "kubeconfig")
	_, err = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: noContext})
	wantErr(t, "rotate to a kubeconfig without contexts", err, errs.KindValidation, "kubeconfig")
	_, err = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "nope", Kubeconfig: api.Secret(testKubeconfig2)})
	wantErr(t, "rotate kubeconfig missing", err, errs.KindNotFound)
	_, err = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig2), ExpectedVersion: cur.Version})
	wantErr(t, "rotate kubeconfig stale", err, errs.KindPrecondition)

	// credentials: the rotated kubeconfig, at once
	cred, err := api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "acme", Cluster: "prod"})
	if err != nil || cred.Kubeconfig.Reveal() != testKubeconfig2 || cred.Version != rk.Version {
		t.Fatalf("credentials: %v %v", cred.Version, err)
	}
	_, err = api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "acme", Cluster: "nope"})
	wantErr(t, "credentials missing", err, errs.KindNotFound)
	_, err = api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "acme"})
	wantErr(t, "credentials invalid", err, errs.KindValidation, "cluster")

	// rotate bootstrap token
	rt, err := api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: api.Secret(testToken2), ExpectedVersion: rk.Version})
	if err != nil || rt.BootstrapTokenID != "k8sdef" || rt.Version <= rk.Version {
		t.Fatalf("rotate token: %+v %v", rt, err)
	}
	_, err = api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: "short"})
	wantErr(t, "rotate token invalid", err, errs.KindValidation, "bootstrap_token")
	if err != nil && strings.Contains(err.Error(), "short") {
		t.Errorf("the error echoes the token: %v", err)
	}
	_, err = api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "nope", BootstrapToken: api.Secret(testToken2)})
	wantErr(t, "rotate token missing", err, errs.KindNotFound)
	_, err = api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: api.Secret(testToken2), ExpectedVersion: rk.Version})
	wantErr(t, "rotate token stale", err, errs.KindPrecondition)

	// delete: refused while a pool remains, then allowed
	_, err = api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "prod"})
	wantErr(t, "delete with pools", err, errs.KindConflict)
	_, err = api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "prod", ExpectedVersion: rk.Version})
	wantErr(t, "delete stale", err, errs.KindPrecondition)
	_, err = api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "nope"})
	wantErr(t, "delete missing", err, errs.KindNotFound)
	_, err = api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "-bad"})
	wantErr(t, "delete invalid", err, errs.KindValidation, "name")
	if _, err := api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"}); err != nil {
		t.Fatal(err)
	}
	del, err := api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "prod", ExpectedVersion: rt.Version})
	if err != nil || del.Version <= rt.Version {
		t.Fatalf("delete: %+v %v", del, err)
	}
	_, err = api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", MinVersion: del.Version})
	wantErr(t, "get deleted", err, errs.KindNotFound)
	_, err = api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "prod", APIEndpoint: ptr("https://x.example")})
	wantErr(t, "update deleted", err, errs.KindConflict)
	_, err = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig)})
	wantErr(t, "rotate kubeconfig of a deleted cluster", err, errs.KindConflict)
	_, err = api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: api.Secret(testToken)})
	wantErr(t, "rotate token of a deleted cluster", err, errs.KindConflict)
	_, err = api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "acme", Name: "prod"})
	wantErr(t, "delete twice", err, errs.KindConflict)
	_, err = api.CreateCluster(ctx, nc, clusterReq("acme", "prod", "1.34.1"))
	wantErr(t, "reuse a deleted name", err, errs.KindConflict)
	_, err = api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "acme", Cluster: "prod"})
	wantErr(t, "credentials of a deleted cluster", err, errs.KindNotFound)
	list, _ = api.ListClusters(ctx, nc, api.ListClustersRequest{Org: "acme", MinVersion: del.Version})
	if len(list.Clusters) != 1 || list.Clusters[0].Name != "edge" {
		t.Fatalf("list after delete: %+v", list)
	}
}
