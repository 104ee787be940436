package service_test

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/ignition/v2/config/v3_4"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

// fileHash is Ignition's verification hash of a file of the assets
// directory, computed here from the bytes.
func (h *harness) fileHash(name string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.assets, name))
	if err != nil {
		h.t.Fatal(err)
	}
	sum := sha512.Sum512(b)
	return "sha512-" + hex.EncodeToString(sum[:])
}

// moveAway renames an asset aside and returns a function that puts it back.
func (h *harness) moveAway(name string) func() {
	h.t.Helper()
	p := filepath.Join(h.assets, name)
	if err := os.Rename(p, p+".away"); err != nil {
		h.t.Fatal(err)
	}
	return func() {
		if err := os.Rename(p+".away", p); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestRenderedFilesAreVerified: the config the boot service gets for a
// machine fetches the agent and the sysext from the boot service's public
// URL, each with the sha512 of the very file the boot service serves (as
// Ignition's own parser reads it), and so does the preview.
func TestRenderedFilesAreVerified(t *testing.T) {
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)
	out, err := api.RenderMachine(h.ctx, h.nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := api.PreviewIgnition(h.ctx, h.nc, api.RevisionIgnitionRequest{Org: "acme", Pool: "workers", Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		render.AgentBinaryPath: {"https://boot.anvil.example:8443/assets/anvil-agent-linux-amd64", h.fileHash("assets/anvil-agent-linux-amd64")},
		"/opt/extensions/kubernetes/kubernetes-v1.33.4-x86-64.raw": {"https://boot.anvil.example:8443/sysext/kubernetes-v1.33.4-x86-64.raw",
			h.fileHash("sysext/kubernetes-v1.33.4-x86-64.raw")},
	}
	for what, ign := range map[string][]byte{"render": out.Ignition, "preview": pv.Ignition} {
		cfg, report, err := v3_4.Parse(ign)
		if err != nil || len(report.Entries) > 0 {
			t.Fatalf("%s: not valid Ignition 3.4: %v %s", what, err, report)
		}
		remote := 0
		for _, f := range cfg.Storage.Files {
			if f.Contents.Source == nil || strings.HasPrefix(*f.Contents.Source, "data:") {
				continue
			}
			remote++
			w, ok := want[f.Path]
			if !ok {
				t.Errorf("%s: unexpected remote file %s", what, f.Path)
				continue
			}
			if *f.Contents.Source != w[0] || f.Contents.Verification.Hash == nil || *f.Contents.Verification.Hash != w[1] {
				t.Errorf("%s: %s from %s verified by %v, want %s verified by %s", what, f.Path, *f.Contents.Source, f.Contents.Verification.Hash, w[0], w[1])
			}
		}
		if remote != len(want) {
			t.Errorf("%s: %d remote files, want %d", what, remote, len(want))
		}
	}

	// A file replaced on the boot service: the next render carries the
	// new hash (the render cache keys on it).
	p := filepath.Join(h.assets, "sysext/kubernetes-v1.33.4-x86-64.raw")
	if err := os.WriteFile(p, []byte("a rebuilt sysext (simulator)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	again, err := api.RenderMachine(h.ctx, h.nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(again.Ignition), h.fileHash("sysext/kubernetes-v1.33.4-x86-64.raw")) {
		t.Error("the render does not carry the replaced file's hash")
	}
}

// TestSaveRefusedWithoutAssets: a revision whose files the boot service
// does not have is refused when it is saved (create, update) or applied,
// naming the field and what to do; nothing is appended. Once the file is
// there, the same save goes through.
func TestSaveRefusedWithoutAssets(t *testing.T) {
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	sysext := "sysext/kubernetes-v1.33.4-x86-64.raw"

	back := h.moveAway(sysext)
	req := api.NewCreatePoolRequest("acme", "workers", "prod", testSpec())
	_, err := api.CreatePool(h.ctx, h.nc, req)
	wantErr(t, "create without the sysext", err, errs.KindValidation, "kubernetes.version")
	t.Logf("refused: %v", err)
	for _, s := range []string{"kubernetes-v1.33.4-x86-64.raw", "make sysext KUBERNETES_VERSION=1.33.4", "ANVIL_BOOT_SYSEXT_MIRROR"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal does not say %q: %v", s, err)
		}
	}
	if evs := h.logEvents(events.Filter{Org: "acme", AggregateType: "pool"}); len(evs) != 0 {
		t.Fatalf("a refused save appended %d events", len(evs))
	}
	back()
	h.createPool("acme", "workers", "prod", testSpec(), false)

	// An update to a version whose sysext is missing makes no revision.
	spec := testSpec()
	spec.Kubernetes.Minor = "1.34"
	back = h.moveAway("sysext/kubernetes-v1.34.1-x86-64.raw")
	_, err = api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "workers", spec))
	wantErr(t, "update without the sysext", err, errs.KindValidation, "kubernetes.version")
	if p := h.getPool("acme", "workers", 0); p.LatestRevision != 1 {
		t.Fatalf("a refused update made revision %d", p.LatestRevision)
	}
	back()
	upd := api.NewUpdatePoolRequest("acme", "workers", spec)
	if c, err := api.UpdatePool(h.ctx, h.nc, upd); err != nil || c.RevisionCreated != 2 {
		t.Fatalf("update with the sysext: %+v %v", c, err)
	}

	// Applying a revision whose sysext went away since it was saved.
	back = h.moveAway(sysext)
	_, err = api.ApplyRevision(h.ctx, h.nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1})
	wantErr(t, "apply without the sysext", err, errs.KindValidation, "kubernetes.version")
	back()
	if _, err := api.ApplyRevision(h.ctx, h.nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1}); err != nil {
		t.Fatalf("apply with the sysext: %v", err)
	}

	// The agent binary missing: a conflict that names the setting and the
	// make target; a render (a machine booting) is refused the same way.
	back = h.moveAway("assets/anvil-agent-linux-amd64")
	_, err = api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "workers", testSpec()))
	if !errs.Is(err, errs.KindConflict) || !strings.Contains(err.Error(), "make assets") || !strings.Contains(err.Error(), "ANVIL_BOOT_ASSETS_DIR") {
		t.Errorf("update without the agent: %v", err)
	}
	t.Logf("refused: %v", err)
	_, err = api.RenderMachine(h.ctx, h.nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if !errs.Is(err, errs.KindConflict) || !strings.Contains(err.Error(), "anvil-agent-linux-amd64") {
		t.Errorf("render without the agent: %v", err)
	}
	back()
}

// TestBootServiceDown: with the boot service gone, a save or a render is
// refused as unavailable (retryable) and appends nothing: it is never let
// through unchecked.
func TestBootServiceDown(t *testing.T) {
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)
	h.stopBoot()
	before := len(h.logEvents(events.Filter{Org: "acme"}))
	spec := testSpec()
	spec.NodeLabels = map[string]string{"anvil.dev/rack": "r99"}
	_, err := api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "workers", spec))
	if !errs.Is(err, errs.KindUnavailable) || !strings.Contains(err.Error(), "boot service") {
		t.Errorf("update with the boot service down: %v", err)
	}
	t.Logf("refused: %v", err)
	_, err = api.CreatePool(h.ctx, h.nc, api.NewCreatePoolRequest("acme", "more", "prod", testSpec()))
	if !errs.Is(err, errs.KindUnavailable) {
		t.Errorf("create with the boot service down: %v", err)
	}
	_, err = api.RenderMachine(h.ctx, h.nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if !errs.Is(err, errs.KindUnavailable) {
		t.Errorf("render with the boot service down: %v", err)
	}
	if after := len(h.logEvents(events.Filter{Org: "acme"})); after != before {
		t.Errorf("%d events appended while the boot service was down", after-before)
	}
}

// TestAgentElsewhere: with --agent-url the agent comes from there with
// --agent-hash (required), and only the sysext is asked of the boot
// service; the old --sysext-url setting and a hash without a URL are
// refused at start, naming the setting.
func TestAgentElsewhere(t *testing.T) {
	const agentURL = "https://artifacts.example/anvil-agent-v1"
	agentHash := "sha512-" + strings.Repeat("ab", 64)
	h := newHarness(t, func(c *service.Config) { c.AgentURL, c.AgentHash = agentURL, agentHash })
	h.createCluster("acme", "prod", "1.34.1")
	back := h.moveAway("assets/anvil-agent-linux-amd64") // not needed
	defer back()
	h.createPool("acme", "workers", "prod", testSpec(), false)
	out, err := api.RenderMachine(h.ctx, h.nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := v3_4.Parse(out.Ignition)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cfg.Storage.Files {
		if f.Path == render.AgentBinaryPath && (*f.Contents.Source != agentURL || *f.Contents.Verification.Hash != agentHash) {
			t.Errorf("agent from %s verified by %v", *f.Contents.Source, f.Contents.Verification.Hash)
		}
	}

	env := eventstest.Start(t, service.NewRegistry())
	run := func(cfg service.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg.Config.Service, cfg.EncryptionKeys = service.Name, testKey
		return service.Run(ctx, cfg, svc.Options{Conn: env.Conn})
	}
	for name, c := range map[string]struct {
		cfg  service.Config
		want string
	}{
		"url without hash": {service.Config{AgentURL: agentURL}, "--agent-hash / ANVIL_AGENT_HASH: is required with --agent-url"},
		"bad hash":         {service.Config{AgentURL: agentURL, AgentHash: "md5-1"}, "--agent-hash / ANVIL_AGENT_HASH"},
		"hash without url": {service.Config{AgentHash: agentHash}, "only goes with --agent-url"},
	} {
		if err := run(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
		}
	}
}
