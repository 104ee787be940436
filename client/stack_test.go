package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
)

const adminToken = "anvil_admin_client_test_0123456789"

// gateway is the in-process stack's gateway URL, which TestMain starts
// once for every test of the package: an embedded JetStream and the five
// services, as `make run` runs them (devstack).
var gateway string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "anvil-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	assets, err := simassets.Dir(dir, kubernetesVersion)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gw, boot := freeAddr(), freeAddr()
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: dir, GatewayAddr: gw, BootAddr: boot, AdminToken: adminToken,
		AssetsDir: assets, KubernetesVersions: kubernetesVersion,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	}
	defer func() {
		if err := st.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "devstack stop:", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.Ready(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	}
	gateway = "http://" + gw
	c, _ := client.New(client.Options{BaseURL: gateway})
	for c.Readyz(ctx) != nil { // the gateway listens a moment after the others are ready
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "the gateway never became ready")
			return 1
		case <-time.After(20 * time.Millisecond):
		}
	}
	return m.Run()
}

const kubernetesVersion = "1.33.4"

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newClient(t testing.TB, token, org string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{BaseURL: gateway, Token: token, Org: org, UserAgent: "anvil-client-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.c1.example:6443'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: c\n  context: {cluster: c, user: drain}\ncurrent-context: c\n"

// newOrg creates an organization and an admin token for it, through the
// client, and returns a client with that token.
func newOrg(t *testing.T, id string) *client.Client {
	t.Helper()
	ctx := context.Background()
	admin := newClient(t, adminToken, id)
	if _, err := admin.CreateOrg(ctx, client.OrgCreate{ID: id, DisplayName: strings.ToUpper(id)}); err != nil {
		t.Fatal(err)
	}
	var issued *client.TokenIssued
	eventstest.Eventually(t, "the organization takes tokens", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		var err error
		issued, err = admin.CreateToken(ctx, client.TokenCreate{Name: "admin-bot", Role: client.RoleAdmin})
		return err == nil, fmt.Sprint(err)
	})
	c := newClient(t, issued.Token, id)
	eventstest.Eventually(t, "the new token works", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, err := c.GetOrg(ctx)
		return err == nil, fmt.Sprint(err)
	})
	return c
}

// TestClientAgainstStack drives the API through the client: an
// organization and its tokens, a cluster and a pool with revisions,
// machines and their pages, the audit log, and the errors as *Problem.
func TestClientAgainstStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newOrg(t, "acme")

	v, err := c.Version(ctx)
	if err != nil || v.Version == "" || v.GitCommit == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("version: %+v %v", v, err)
	}
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}

	// tokens
	viewerTok, err := c.CreateToken(ctx, client.TokenCreate{Name: "viewer-bot", Role: client.RoleViewer})
	if err != nil || viewerTok.Token == "" || viewerTok.Info.Role != client.RoleViewer {
		t.Fatalf("create token: %+v %v", viewerTok, err)
	}
	enroll, err := c.CreateEnrollmentToken(ctx, client.EnrollmentTokenCreate{Name: "rack", MaxMachines: 5})
	if err != nil || enroll.Info.MaxMachines != 5 {
		t.Fatalf("enrollment token: %+v %v", enroll, err)
	}
	var names []string
	for tok, err := range c.AllTokens(ctx, client.ListOptions{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.Name)
	}
	if strings.Join(names, ",") != "admin-bot,viewer-bot" {
		t.Fatalf("tokens, one per page: %v", names)
	}
	if r, err := c.RevokeEnrollmentToken(ctx, enroll.Info.ID); err != nil || r.Status != "revoked" {
		t.Fatalf("revoke: %+v %v", r, err)
	}

	// a cluster and a pool
	cl, err := c.CreateCluster(ctx, client.ClusterCreate{Name: "prod", APIEndpoint: "https://api.prod.example:6443", KubernetesVersion: kubernetesVersion,
		Kubeconfig: kubeconfig, BootstrapToken: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("ab", 32)})
	if err != nil || cl.Name != "prod" || cl.Version == 0 {
		t.Fatalf("create cluster: %+v %v", cl, err)
	}
	// A kubeconfig without contexts was once taken (201) and failed only at
	// the first drain: the API refuses it when it is written.
	noContexts := kubeconfig[:strings.Index(kubeconfig, "contexts:")]
	_, err = c.CreateCluster(ctx, client.ClusterCreate{Name: "nocontext", APIEndpoint: "https://api.c2.example:6443", KubernetesVersion: kubernetesVersion,
		Kubeconfig: noContexts, BootstrapToken: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("ab", 32)})
	if p, ok := client.AsProblem(err); !ok || !client.IsValidation(err) {
		t.Fatalf("a kubeconfig without contexts: %v", err)
	} else if reason, named := p.Field("kubeconfig"); !named || !strings.Contains(reason, "current-context") || len(p.Errors) != 1 {
		t.Fatalf("the problem does not name the kubeconfig's missing context: %+v", p.Errors)
	}
	if _, err := c.GetCluster(ctx, "nocontext"); !client.IsNotFound(err) {
		t.Fatalf("the refused cluster exists: %v", err)
	}
	if _, err := c.RotateClusterKubeconfig(ctx, "prod", noContexts); !client.IsValidation(err) {
		t.Fatalf("rotating to a kubeconfig without contexts: %v", err)
	}
	spec := client.PoolSpec{DisplayName: "Workers", PoolConfig: client.PoolConfig{
		Kubernetes: client.Kubernetes{Minor: "1.33"}, Flatcar: client.Flatcar{Channel: "stable", Version: "4230.2.3"}},
		Rollout: client.PoolRollout{MaxUnavailable: "25%"}}
	ch, err := c.CreatePool(ctx, client.PoolCreate{Name: "workers", Cluster: "prod", PoolSpec: spec})
	if err != nil || ch.RevisionCreated != 1 || ch.Pool.Spec.Rollout.MaxUnavailable != "25%" {
		t.Fatalf("create pool: %+v %v", ch, err)
	}
	spec.NodeLabels = map[string]string{"tier": "web"}
	spec.Rollout.MaxUnavailable = "2"
	ch, err = c.UpdatePool(ctx, "workers", client.PoolUpdate{PoolSpec: spec, Message: "label the nodes"}, client.IfMatch(ch.Pool.Version))
	if err != nil || ch.RevisionCreated != 2 || ch.Pool.Spec.Rollout.MaxUnavailable != "2" {
		t.Fatalf("update pool: %+v %v", ch, err)
	}
	_, err = c.UpdatePool(ctx, "workers", client.PoolUpdate{PoolSpec: spec}, client.IfMatch(1))
	if !client.IsPreconditionFailed(err) {
		t.Fatalf("a stale If-Match: %v", err)
	}
	revs, err := c.ListPoolRevisions(ctx, "workers", client.ListOptions{})
	if err != nil || len(revs.Items) != 2 || revs.Pool != "workers" || revs.Next != "" {
		t.Fatalf("revisions: %+v %v", revs, err)
	}
	n := 0
	for r, err := range c.AllPoolRevisions(ctx, "workers", client.ListOptions{Limit: 1}) {
		if err != nil || r.Number != n+1 {
			t.Fatalf("revision %d: %+v %v", n+1, r, err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d revisions, one per page", n)
	}
	diff, err := c.DiffPoolRevisions(ctx, "workers", 2, 1)
	if err != nil || len(diff.Changes) == 0 {
		t.Fatalf("diff: %+v %v", diff, err)
	}
	if rev, err := c.GetPoolRevision(ctx, "workers", 2); err != nil || rev.Config.NodeLabels["tier"] != "web" || rev.Message != "label the nodes" {
		t.Fatalf("revision 2: %+v %v", rev, err)
	}
	if ign, err := c.GetPoolRevisionIgnition(ctx, "workers", 2); err != nil || len(ign.Ignition) == 0 {
		t.Fatalf("ignition: %v", err)
	}
	pools, err := c.ListPools(ctx, client.PoolFilter{Cluster: "prod"})
	if err != nil || len(pools.Items) != 1 || pools.Items[0].LatestRevision != 2 {
		t.Fatalf("pools: %+v %v", pools, err)
	}

	// machines: pre-registered, read back page by page, changed, assigned
	for i := range 5 {
		_, err := c.PreregisterMachine(ctx, client.MachinePreregister{UUID: uuidN(i), Hostname: fmt.Sprintf("w%d", i),
			Labels: map[string]string{"rack": []string{"r1", "r2"}[i%2]}}, client.IdempotencyKey(fmt.Sprint("pre-", i)))
		if err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	for m, err := range c.AllMachines(ctx, client.MachineFilter{Selector: "rack=r1", ListOptions: client.ListOptions{Limit: 2}}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, m.Hostname)
	}
	if strings.Join(seen, ",") != "w0,w2,w4" {
		t.Fatalf("machines in rack r1: %v", seen)
	}
	host := "web-1"
	m, err := c.UpdateMachine(ctx, uuidN(1), client.MachinePatch{Hostname: &host})
	if err != nil || m.Hostname != "web-1" || m.Version == 0 {
		t.Fatalf("update machine: %+v %v", m, err)
	}
	if m, err = c.AssignMachine(ctx, uuidN(1), "workers", client.IfMatch(m.Version)); err != nil || m.Pool != "workers" {
		t.Fatalf("assign: %+v %v", m, err)
	}
	if got, err := c.GetMachine(ctx, uuidN(1)); err != nil || got.Pool != "workers" || got.Status != client.StatusPreregistered {
		t.Fatalf("get machine: %+v %v", got, err)
	}
	if mr, err := c.GetMachineRevisions(ctx, uuidN(1)); err != nil || mr.Pool != "workers" || len(mr.Revisions) != 2 {
		t.Fatalf("machine revisions: %+v %v", mr, err)
	}
	if m, err := c.DeleteMachine(ctx, uuidN(4), client.DeleteForced); err != nil || !m.Deleted {
		t.Fatalf("delete: %+v %v", m, err)
	}

	// the audit log, page by page
	types := map[string]int{}
	for e, err := range c.AllEvents(ctx, client.EventFilter{Aggregate: "machine", ListOptions: client.ListOptions{Limit: 3}}) {
		if err != nil {
			t.Fatal(err)
		}
		types[e.Type]++
	}
	if types["machine.preregistered"] != 5 || types["machine.deleted"] != 1 {
		t.Fatalf("machine events: %v", types)
	}

	// errors are problems
	_, err = c.GetMachine(ctx, uuidN(99))
	if p, ok := client.AsProblem(err); !ok || !client.IsNotFound(err) || p.Status != 404 || p.Type == "" {
		t.Fatalf("a missing machine: %#v", err)
	}
	_, err = c.PreregisterMachine(ctx, client.MachinePreregister{UUID: "not-a-uuid", Hostname: "Bad Host!"})
	if p, ok := client.AsProblem(err); !ok || !client.IsValidation(err) || len(p.Errors) < 2 {
		t.Fatalf("a bad machine: %#v", err)
	} else if _, named := p.Field("uuid"); !named {
		t.Fatalf("the problem does not name uuid: %v", p)
	}
	if _, err := newClient(t, adminToken, "acme").CreateOrg(ctx, client.OrgCreate{ID: "acme", DisplayName: "Acme again"}); !client.IsConflict(err) {
		t.Fatalf("an organization twice: %v", err)
	}
	viewer := newClient(t, viewerTok.Token, "acme")
	if _, err := viewer.CreatePool(ctx, client.PoolCreate{Name: "x", Cluster: "prod", PoolSpec: spec}); !client.IsForbidden(err) {
		t.Fatalf("a viewer creating a pool: %v", err)
	}
	if _, err := newClient(t, "nope", "acme").GetOrg(ctx); !client.IsUnauthorized(err) {
		t.Fatalf("an unknown token: %v", err)
	}
	if _, err := c.InOrg("globex").GetOrg(ctx); !client.IsNotFound(err) {
		t.Fatalf("another organization: %v", err)
	}
	if _, err := newClient(t, adminToken, "").GetOrg(ctx); err == nil || !strings.Contains(err.Error(), "no organization") {
		t.Fatalf("no organization: %v", err)
	}
	cat, err := c.GetCatalog(ctx)
	if err != nil || len(cat.Versions) == 0 {
		t.Fatalf("catalog: %+v %v", cat, err)
	}
	var orgs []string
	for o, err := range newClient(t, adminToken, "").AllOrgs(ctx, client.ListOptions{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		orgs = append(orgs, o.ID)
	}
	if !slices.Contains(orgs, "acme") || !slices.IsSorted(orgs) {
		t.Fatalf("organizations: %v", orgs)
	}
}

func uuidN(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i) }
