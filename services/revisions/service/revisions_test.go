package service_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_4"
	"github.com/vincent-petithory/dataurl"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

func TestRevisionQueries(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), true)
	spec := testSpec()
	spec.NodeLabels = map[string]string{"anvil.dev/rack": "r13"}
	spec.Network.VLANs = append(spec.Network.VLANs, api.VLAN{ID: 200, Parent: "bond0"})
	spec.Network.Interfaces = append(spec.Network.Interfaces, api.Interface{Name: "bond0.200", DHCP: "ipv6"})
	up, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", spec, func(r *api.UpdatePoolRequest) { r.Message = "rack 13" }))
	if err != nil || up.RevisionCreated != 2 {
		t.Fatal(err)
	}

	// list, get
	list, err := api.ListRevisions(ctx, nc, api.ListRevisionsRequest{Org: "acme", Pool: "workers", MinVersion: up.Pool.Version})
	if err != nil || len(list.Revisions) != 2 || list.AppliedRevision != 1 || !list.Revisions[0].Applied || list.Revisions[1].Applied ||
		list.Revisions[1].Author != testActor || list.Revisions[1].Message != "rack 13" || list.Revisions[1].PlatformMade || list.Revisions[1].CreatedAt.IsZero() {
		t.Fatalf("list: %s %v", mustJSON(t, list), err)
	}
	_, err = api.ListRevisions(ctx, nc, api.ListRevisionsRequest{Org: "acme", Pool: "nope"})
	wantErr(t, "list missing", err, errs.KindNotFound)
	_, err = api.ListRevisions(ctx, nc, api.ListRevisionsRequest{Org: "acme"})
	wantErr(t, "list invalid", err, errs.KindValidation, "pool")
	rev, err := api.GetRevision(ctx, nc, api.GetRevisionRequest{Org: "acme", Pool: "workers", Revision: 2})
	if err != nil || rev.Number != 2 || rev.KubernetesVersion != "1.33.4" || rev.Config.NodeLabels["anvil.dev/rack"] != "r13" || rev.Hash != list.Revisions[1].Hash {
		t.Fatalf("get: %s %v", mustJSON(t, rev), err)
	}
	_, err = api.GetRevision(ctx, nc, api.GetRevisionRequest{Org: "acme", Pool: "workers", Revision: 3})
	wantErr(t, "get missing revision", err, errs.KindNotFound)
	_, err = api.GetRevision(ctx, nc, api.GetRevisionRequest{Org: "acme", Pool: "workers"})
	wantErr(t, "get invalid", err, errs.KindValidation, "revision")

	// diff: structured and unified
	d, err := api.DiffRevisions(ctx, nc, api.DiffRevisionsRequest{Org: "acme", Pool: "workers", From: 1, To: 2})
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, c := range d.Changes {
		paths[c.Path] = true
	}
	if !paths[`node_labels["anvil.dev/rack"]`] || d.From != 1 || d.To != 2 || d.FromHash == d.ToHash {
		t.Fatalf("diff changes: %s", mustJSON(t, d.Changes))
	}
	if !strings.HasPrefix(d.Ignition, "--- revision-1.ign.json\n+++ revision-2.ign.json\n") || !strings.Contains(d.Ignition, "\n+") {
		t.Fatalf("unified diff:\n%s", d.Ignition)
	}
	var netFile bool
	for _, f := range d.Files {
		if strings.Contains(f.Path, "bond0.200") {
			netFile = true
		}
	}
	if !netFile {
		t.Fatalf("file diffs do not show the new VLAN: %s", mustJSON(t, d.Files))
	}
	if strings.Contains(mustJSON(t, d), "s3cr3tt0k3nv4lu3") {
		t.Fatal("the diff shows the bootstrap token")
	}
	_, err = api.DiffRevisions(ctx, nc, api.DiffRevisionsRequest{Org: "acme", Pool: "workers", From: 1, To: 7})
	wantErr(t, "diff missing revision", err, errs.KindNotFound)
	_, err = api.DiffRevisions(ctx, nc, api.DiffRevisionsRequest{Org: "acme", Pool: "workers"})
	wantErr(t, "diff invalid", err, errs.KindValidation, "from", "to")
	_, err = api.DiffRevisions(ctx, nc, api.DiffRevisionsRequest{Org: "acme", Pool: "nope", From: 1, To: 2})
	wantErr(t, "diff missing pool", err, errs.KindNotFound)

	// ignition preview: valid, with the placeholder, without the token
	pv, err := api.PreviewIgnition(ctx, nc, api.RevisionIgnitionRequest{Org: "acme", Pool: "workers", Revision: 2})
	if err != nil || pv.Revision != 2 || pv.Hash != rev.Hash || !strings.HasPrefix(pv.MachineRevisionID, "mr-") {
		t.Fatalf("preview: %v", err)
	}
	parseIgnition(t, pv.Ignition)
	if bytes.Count(pv.Ignition, []byte(api.AgentCredentialPlaceholder)) != 1 {
		t.Fatal("the preview does not hold the placeholder exactly once")
	}
	if join := fileContents(t, pv.Ignition, render.JoinConfigPath); strings.Contains(join, "s3cr3tt0k3nv4lu3") || !strings.Contains(join, "k8sabc.redactedredacted") {
		t.Fatal("the preview does not redact the bootstrap token")
	}
	_, err = api.PreviewIgnition(ctx, nc, api.RevisionIgnitionRequest{Org: "acme", Pool: "workers", Revision: 5})
	wantErr(t, "preview missing revision", err, errs.KindNotFound)
	_, err = api.PreviewIgnition(ctx, nc, api.RevisionIgnitionRequest{Org: "acme", Pool: "Workers", Revision: 0})
	wantErr(t, "preview invalid", err, errs.KindValidation, "pool", "revision")
}

// fileContents returns the decoded contents of a file in an Ignition config.
func fileContents(t testing.TB, ign []byte, path string) string {
	t.Helper()
	cfg, _, err := v3_4.Parse(ign)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cfg.Storage.Files {
		if f.Path == path && f.Contents.Source != nil {
			u, err := dataurl.DecodeString(*f.Contents.Source)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return string(u.Data)
		}
	}
	t.Fatalf("no file %s in the config", path)
	return ""
}

// parseIgnition parses with Ignition's own v3_4 package and fails on any
// report entry.
func parseIgnition(t testing.TB, b []byte) {
	t.Helper()
	_, report, err := v3_4.Parse(b)
	if err != nil {
		t.Fatalf("v3_4.Parse: %v\n%s", err, report)
	}
	if len(report.Entries) > 0 {
		t.Fatalf("v3_4.Parse report is not empty:\n%s", report)
	}
}

func TestRenderMachine(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	if api.AgentCredentialPlaceholder != render.AgentCredentialPlaceholder {
		t.Fatal("api.AgentCredentialPlaceholder differs from the renderer's")
	}
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)

	req := api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "node-1.rack12", Labels: map[string]string{"anvil.dev/slot": "7"}}
	out, err := api.RenderMachine(ctx, nc, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.PoolRevision != 1 || !strings.HasPrefix(out.MachineRevisionID, "mr-") || !strings.HasPrefix(out.Hash, "sha256:") {
		t.Fatalf("rendered: %+v", out)
	}
	parseIgnition(t, out.Ignition)
	if bytes.Count(out.Ignition, []byte(api.AgentCredentialPlaceholder)) != 1 {
		t.Fatal("the placeholder does not occur exactly once")
	}
	withCred, err := api.InjectCredential(out.Ignition, "cred_0123456789-abcdefghijKLMNOP")
	if err != nil {
		t.Fatal(err)
	}
	parseIgnition(t, withCred)
	// The agent talks to the configured boot URL.
	if env := fileContents(t, out.Ignition, render.AgentEnvPath); !strings.Contains(env, "ANVIL_BOOT_URL=https://boot.anvil.example:8443\n") {
		t.Fatalf("agent.env = %q", env)
	}
	// The machine joins with the real token (it is opened with the keys).
	if !strings.Contains(fileContents(t, out.Ignition, render.JoinConfigPath), testToken) {
		t.Fatal("the rendered config does not carry the cluster's bootstrap token")
	}

	// The same machine revision renders the same bytes (from the cache);
	// a label change is another machine revision.
	again, err := api.RenderMachine(ctx, nc, req)
	if err != nil || !bytes.Equal(again.Ignition, out.Ignition) || again.MachineRevisionID != out.MachineRevisionID {
		t.Fatalf("second render differs: %v", err)
	}
	req2 := req
	req2.Labels = map[string]string{"anvil.dev/slot": "8"}
	other, err := api.RenderMachine(ctx, nc, req2)
	if err != nil || other.MachineRevisionID == out.MachineRevisionID {
		t.Fatalf("a label change must make another machine revision: %v", err)
	}

	// A rotated token reaches the next render (the cache key covers it).
	if _, err := api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: api.Secret(testToken2)}); err != nil {
		t.Fatal(err)
	}
	deadline := 100
	for ; deadline > 0; deadline-- {
		r, err := api.RenderMachine(ctx, nc, req)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(fileContents(t, r.Ignition, render.JoinConfigPath), testToken2) {
			break
		}
	}
	if deadline == 0 {
		t.Fatal("the render never picked up the rotated token")
	}

	_, err = api.RenderMachine(ctx, nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 0, Hostname: "Node_1", Labels: map[string]string{"kubernetes.io/role": "x"}})
	wantErr(t, "render invalid", err, errs.KindValidation, "revision", "hostname")
	_, err = api.RenderMachine(ctx, nc, api.RenderMachineRequest{Org: "acme", Pool: "nope", Revision: 1, Hostname: "node-1"})
	wantErr(t, "render missing pool", err, errs.KindNotFound)
	_, err = api.RenderMachine(ctx, nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 2, Hostname: "node-1"})
	wantErr(t, "render missing revision", err, errs.KindNotFound)
}
