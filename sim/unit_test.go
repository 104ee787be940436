package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

func TestPathsMatchTheRenderer(t *testing.T) {
	for _, c := range [][2]string{
		{RevisionPath, render.RevisionPath}, {AgentEnvPath, render.AgentEnvPath}, {JoinConfigPath, render.JoinConfigPath},
	} {
		if c[0] != c[1] {
			t.Errorf("sim reads %s, the renderer writes %s", c[0], c[1])
		}
	}
}

func dataURL(s string) string { return "data:," + url.PathEscape(s) }

func ignitionJSON(t *testing.T, files map[string]string) []byte {
	t.Helper()
	type file struct {
		Path     string `json:"path"`
		Contents struct {
			Source string `json:"source"`
		} `json:"contents"`
	}
	var cfg struct {
		Ignition struct {
			Version string `json:"version"`
		} `json:"ignition"`
		Storage struct {
			Files []file `json:"files"`
		} `json:"storage"`
	}
	cfg.Ignition.Version = "3.4.0"
	for p, c := range files {
		f := file{Path: p}
		f.Contents.Source = c
		cfg.Storage.Files = append(cfg.Storage.Files, f)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseIgnition(t *testing.T) {
	env := "ANVIL_URL=http://boot.test:8081\nANVIL_MACHINE_REVISION=mr-env\nANVIL_AGENT_CREDENTIAL=ac1_acme_mr-1_abcdefabcdefabcdef\n"
	v1beta4 := `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
nodeRegistration:
  name: worker-1
  kubeletExtraArgs:
    - name: node-labels
      value: anvil.dev/pool=workers,rack=r12
    - name: volume-plugin-dir
      value: /opt/x
  taints:
    - key: dedicated
      value: gpu
      effect: NoSchedule
`
	v1beta3 := `apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
nodeRegistration:
  name: worker-1
  kubeletExtraArgs:
    node-labels: rack=r12
  taints: []
`
	for name, tc := range map[string]struct {
		files     map[string]string
		wantRev   string
		wantLabel map[string]string
		taints    int
	}{
		"v1beta4": {map[string]string{
			"/etc/hostname": dataURL("worker-1\n"), "/etc/anvil/revision": dataURL("mr-1\n"),
			"/etc/anvil/agent.env": dataURL(env), "/etc/kubeadm/join.yaml": dataURL(v1beta4),
			"/opt/anvil/bin/anvil-agent": "http://boot.test:8081/assets/anvil-agent-linux-amd64",
		}, "mr-1", map[string]string{"anvil.dev/pool": "workers", "rack": "r12"}, 1},
		"v1beta3, revision from the env file, base64": {map[string]string{
			"/etc/hostname":        "data:;base64,d29ya2VyLTEK",
			"/etc/anvil/agent.env": dataURL(env), "/etc/kubeadm/join.yaml": dataURL(v1beta3),
		}, "mr-env", map[string]string{"rack": "r12"}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			bc, err := ParseIgnition(ignitionJSON(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if bc.Hostname != "worker-1" || bc.NodeName != "worker-1" || bc.Revision != tc.wantRev ||
				bc.Env["ANVIL_AGENT_CREDENTIAL"] != "ac1_acme_mr-1_abcdefabcdefabcdef" || len(bc.Taints) != tc.taints {
				t.Errorf("%+v", bc)
			}
			if fmt.Sprint(bc.NodeLabels) != fmt.Sprint(tc.wantLabel) {
				t.Errorf("labels %v, want %v", bc.NodeLabels, tc.wantLabel)
			}
		})
	}
	if _, err := ParseIgnition([]byte(`{"ignition":{"version":"3.4.0"}}`)); err == nil {
		t.Error("a config without the agent's env file was accepted")
	}
	if _, err := ParseIgnition([]byte(`not json`)); err == nil {
		t.Error("garbage was accepted")
	}
}

// fakeBoot answers /boot.ipxe and /ipxe like the boot service: a wait
// script for the first `waits` requests to /ipxe, then a boot script.
type fakeBoot struct {
	srv   *httptest.Server
	ipxe  atomic.Int32
	waits int32
}

func newFakeBoot(t *testing.T, waits int32) *fakeBoot {
	fb := &fakeBoot{waits: waits}
	mux := http.NewServeMux()
	mux.HandleFunc("/boot.ipxe", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "enroll-1" {
			http.Error(w, "bad token", 400)
			return
		}
		fmt.Fprintf(w, "#!ipxe\necho chaining\n:retry\nchain --replace --autofree %s/ipxe?uuid=${uuid}&mac=${net0/mac:hexhyp}&token=enroll-1 || goto unreachable\n:unreachable\nsleep 30\ngoto retry\n", fb.srv.URL)
	})
	mux.HandleFunc("/ipxe", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("uuid") != "5a5a0000-0000-0000-0000-000000000001" || q.Get("mac") != "02-aa-00-00-00-01" {
			fmt.Fprint(w, "#!ipxe\necho anvil: cannot boot: uuid_invalid\nexit\n")
			return
		}
		n := fb.ipxe.Add(1)
		if n <= fb.waits {
			fmt.Fprintf(w, "#!ipxe\necho anvil: waiting\nsleep 10\n:retry\nchain --replace --autofree %s/ipxe?uuid=${uuid}&mac=${net0/mac:hexhyp}&token=enroll-1&attempt=%d || goto unreachable\n:unreachable\nsleep 30\ngoto retry\n", fb.srv.URL, n)
			return
		}
		fmt.Fprintf(w, "#!ipxe\necho anvil: boots\nkernel http://flatcar.test/vmlinuz initrd=x flatcar.first_boot=1 ignition.config.url=%s/ignition?uuid=%s&token=pb1.x console=tty0 || goto failed\ninitrd http://flatcar.test/initrd || goto failed\nboot || goto failed\n:failed\nsleep 5\n", fb.srv.URL, q.Get("uuid"))
	})
	fb.srv = httptest.NewServer(mux)
	t.Cleanup(fb.srv.Close)
	return fb
}

func testFleet(t *testing.T, bootURL string) *Fleet {
	t.Helper()
	f, err := New(Config{BootURL: bootURL, EnrollmentToken: "enroll-1", MaxWait: 10 * time.Millisecond, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFirmwareWaitsThenBoots(t *testing.T) {
	fb := newFakeBoot(t, 3)
	f := testFleet(t, fb.srv.URL)
	m := f.Add("5A5A0000-0000-0000-0000-000000000001", "02-AA-00-00-00-01")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kb, err := m.firmware(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fb.ipxe.Load(); got != 4 {
		t.Errorf("%d requests to /ipxe, want 3 waits and the boot", got)
	}
	if kb.Kernel != "http://flatcar.test/vmlinuz" || kb.IgnitionURL != fb.srv.URL+"/ignition?uuid="+m.UUID()+"&token=pb1.x" {
		t.Errorf("%+v", kb)
	}
	if m.Phase() != PhaseWaiting {
		t.Errorf("phase %s", m.Phase())
	}
	if !strings.Contains(strings.Join(m.Status().Console, "\n"), "anvil: waiting") {
		t.Errorf("console %v", m.Status().Console)
	}
}

func TestFirmwareRetriesAnUnreachableBootService(t *testing.T) {
	fb := newFakeBoot(t, 0)
	url := fb.srv.URL
	fb.srv.Close() // nothing listens
	f := testFleet(t, url)
	m := f.Add("5a5a0000-0000-0000-0000-000000000001", "02:aa:00:00:00:01")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := m.firmware(ctx); err == nil {
		t.Fatal("booted without a boot service")
	}
	if !strings.Contains(strings.Join(m.Status().Console, "\n"), "power-cycling") {
		t.Errorf("console %v", m.Status().Console)
	}
}

func TestInterpretLoopsAreBounded(t *testing.T) {
	f := testFleet(t, "http://127.0.0.1:1")
	m := f.Add("5a5a0000-0000-0000-0000-000000000001", "02:aa:00:00:00:01")
	kb, err := m.interpret(t.Context(), "#!ipxe\n:a\ngoto a\n")
	if kb != nil || err == nil || !strings.Contains(err.Error(), "loops") {
		t.Fatalf("%v %v", kb, err)
	}
	kb, err = m.interpret(t.Context(), "#!ipxe\nboot || goto nope\n")
	if kb != nil || err == nil {
		t.Fatalf("%v %v", kb, err)
	}
}

func TestAddN(t *testing.T) {
	f := testFleet(t, "http://127.0.0.1:1")
	a := f.AddN(3, "rack-7")
	b := f.AddN(4, "rack-7")
	if len(f.Machines()) != 4 || a[2] != b[2] {
		t.Fatalf("AddN is not deterministic: %d machines", len(f.Machines()))
	}
	for _, m := range b {
		if !canonicalUUID.MatchString(m.UUID()) {
			t.Errorf("uuid %s", m.UUID())
		}
	}
	if h := f.AddN(1, "4c4c4544-0035-4b10-8056")[0]; h.UUID() != "4c4c4544-0035-4b10-8056-000000000001" ||
		!strings.HasPrefix(h.MAC(), "02:") || !strings.HasSuffix(h.MAC(), ":00:00:00:01") {
		t.Errorf("hex prefix: %s %s", h.UUID(), h.MAC())
	}
}

func TestRebootDurationStaysInRange(t *testing.T) {
	f, err := New(Config{BootURL: "http://x", EnrollmentToken: "t", RebootTime: time.Second, RebootJitter: 200 * time.Millisecond, StateDir: t.TempDir(), Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	m := f.AddN(1, "aa")[0]
	for range 1000 {
		if d := m.rebootDuration(); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("reboot duration %s", d)
		}
	}
}
