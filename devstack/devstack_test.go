package devstack

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
)

func TestPublicURLWarning(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "machines cannot reach 127.0.0.1; set ANVIL_BOOT_PUBLIC_URL=http://<this host's address>:8081"},
		{Config{BootAddr: "127.0.0.1:9000"}, "machines cannot reach 127.0.0.1; set ANVIL_BOOT_PUBLIC_URL=http://<this host's address>:9000"},
		{Config{BootAddr: "0.0.0.0:8081"}, "machines cannot reach 0.0.0.0"},
		{Config{PublicURL: "http://localhost:8081"}, "machines cannot reach localhost"},
		{Config{PublicURL: "http://[::1]:8081"}, "machines cannot reach ::1"},
		{Config{PublicURL: "http://10.0.0.5:8081"}, ""},
		{Config{PublicURL: "http://boot.example.net", BootAddr: "127.0.0.1:8081"}, ""},
	} {
		got := c.cfg.PublicURLWarning()
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}

// TestStartRefusesBadSettings: a public URL that is not an absolute
// http(s) URL or an assets directory that does not exist stops the stack
// before anything starts, naming the setting.
func TestStartRefusesBadSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{PublicURL: "boot.example:8081"}, "ANVIL_BOOT_PUBLIC_URL"},
		{Config{PublicURL: "ftp://boot.example"}, "ANVIL_BOOT_PUBLIC_URL"},
		{Config{AssetsDir: filepath.Join(t.TempDir(), "missing")}, "ANVIL_BOOT_ASSETS_DIR"},
		{Config{AssetsDir: file}, "ANVIL_BOOT_ASSETS_DIR: " + file + " is not a directory"},
		{Config{SysextMirror: "https://m.example/{version}.raw", AssetsDir: t.TempDir()}, "ANVIL_BOOT_SYSEXT_MIRROR"},
	} {
		c.cfg.DataDir = t.TempDir()
		st, err := Start(context.Background(), c.cfg)
		if err == nil {
			_ = st.Stop()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to name %s", c.cfg, err, c.want)
		}
	}
}

// TestSettingsReachBothServices: the public URL and the assets directory
// given to the stack reach the boot service (it resolves its files under
// that URL) and the revisions service (the rendered config points the agent
// and Ignition at it).
func TestSettingsReachBothServices(t *testing.T) {
	const public = "http://10.11.12.13:8081"
	assets, err := simassets.Dir(t.TempDir(), "1.33.4")
	if err != nil {
		t.Fatal(err)
	}
	logs := &eventstest.SyncBuffer{}
	st, err := Start(context.Background(), Config{DataDir: t.TempDir(), GatewayAddr: freeAddr(t), BootAddr: freeAddr(t),
		AdminToken: "anvil_admin_devstack_test", PublicURL: public, AssetsDir: assets, KubernetesVersions: "1.33.4",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(events.WithActor(context.Background(), "token:t (devstack test)"), 2*time.Minute)
	defer cancel()
	if err := st.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	nc, err := st.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	r, err := bootapi.ResolveAssets(ctx, nc, bootapi.ResolveAssetsRequest{Names: []string{"assets/anvil-agent-linux-amd64"}})
	if err != nil || r.Assets[0].URL != public+"/assets/anvil-agent-linux-amd64" || r.Assets[0].Status != bootapi.AssetReady {
		t.Fatalf("resolve: %+v %v", r, err)
	}
	eventstest.Eventually(t, "the revisions service answers", time.Minute, 50*time.Millisecond, func() (bool, string) {
		_, err := revapi.ListCatalog(ctx, nc, revapi.ListCatalogRequest{Org: "acme"})
		return err == nil, errString(err)
	})
	if _, err := revapi.CreateCluster(ctx, nc, revapi.CreateClusterRequest{Org: "acme", Name: "c1", APIEndpoint: "https://api.c1.example:6443",
		KubernetesVersion: "1.33.4", Kubeconfig: revapi.Secret(kubeconfig), BootstrapToken: revapi.Secret("abcdef.0123456789abcdef"),
		CACertHash: "sha256:" + strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	spec := revapi.PoolSpec{DisplayName: "Workers", Kubernetes: revapi.Kubernetes{Minor: "1.33"}, Flatcar: revapi.Flatcar{Channel: "stable", Version: "4230.2.3"}}
	if _, err := revapi.CreatePool(ctx, nc, revapi.NewCreatePoolRequest("acme", "workers", "c1", spec)); err != nil {
		t.Fatal(err)
	}
	out, err := revapi.RenderMachine(ctx, nc, revapi.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	ign, err := url.PathUnescape(string(out.Ignition)) // the agent's env file is a percent-escaped data URL
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{public + "/assets/anvil-agent-linux-amd64", public + "/sysext/kubernetes-v1.33.4-x86-64.raw",
		"ANVIL_BOOT_URL=" + public + "\n"} {
		if !strings.Contains(ign, want) {
			t.Errorf("the rendered config lacks %s:\n%s", want, ign)
		}
	}
	if strings.Contains(string(out.Ignition), "127.0.0.1") {
		t.Error("the rendered config hands machines a loopback URL")
	}
}

const kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.c1.example:6443'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: c\n  context: {cluster: c, user: drain}\ncurrent-context: c\n"

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
