package charttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/devstack"
)

// TestAlertsAndDashboardUseRealMetrics starts the five services in this process on an embedded
// nats-server (the dev stack, each service with its own admin listener), uses them a little (an
// organization created through the gateway, an iPXE request to the boot service), scrapes
// every admin /metrics and checks that every metric the PrometheusRule's expressions and the
// dashboard's queries name exists: a renamed metric fails here rather than silently leaving
// an alert that never fires. It also checks that the public listeners serve no /metrics.
//
// The services share this process's metrics registry, so each admin listener shows every
// service's series; what is checked per listener is that it answers with its own build info.
func TestAlertsAndDashboardUseRealMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole control plane")
	}
	used := usedMetrics(monitoringQueries(t))
	if len(used) < 15 {
		t.Fatalf("only %d metrics found in the rules and the dashboard: %v", len(used), used)
	}

	const adminToken = "anvil_admin_charttest_metrics"
	admin := map[string]string{}
	for _, svc := range services {
		admin[svc] = freeAddr(t)
	}
	gatewayAddr, bootAddr := freeAddr(t), freeAddr(t)
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: t.TempDir(), GatewayAddr: gatewayAddr, BootAddr: bootAddr,
		AdminAddrs: admin, AdminToken: adminToken, KubernetesVersions: "1.33.4",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := st.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	for _, svc := range services {
		eventually(t, ctx, svc+" is ready on its admin listener", func() (bool, string) {
			code, body := get(ctx, "http://"+admin[svc]+"/readyz", "")
			return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
		})
	}

	// Use the services a little: an HTTP request to each public listener, a command and its
	// events (the organization), so that the series of labelled metrics exist.
	eventually(t, ctx, "the gateway creates an organization", func() (bool, string) {
		code, body := do(ctx, http.MethodPost, "http://"+gatewayAddr+"/api/v1/orgs", adminToken, `{"id":"acme","display_name":"Acme"}`)
		return code == http.StatusCreated || code == http.StatusOK || code == http.StatusConflict, fmt.Sprintf("%d %s", code, body)
	})
	if code, _ := get(ctx, "http://"+bootAddr+"/boot.ipxe", ""); code != http.StatusOK {
		t.Errorf("boot /boot.ipxe: %d", code)
	}
	for name, addr := range map[string]string{"gateway": gatewayAddr, "boot": bootAddr} {
		if code, _ := get(ctx, "http://"+addr+"/metrics", ""); code != http.StatusNotFound {
			t.Errorf("the %s service's public listener answers /metrics with %d, want 404", name, code)
		}
		if code, _ := get(ctx, "http://"+addr+"/healthz", ""); code != http.StatusOK {
			t.Errorf("the %s service's public listener answers /healthz with %d", name, code)
		}
	}

	var missing []string
	eventually(t, ctx, "every metric of the rules and the dashboard is exposed", func() (bool, string) {
		have := map[string]bool{}
		for _, svc := range services {
			code, body := get(ctx, "http://"+admin[svc]+"/metrics", "")
			if code != http.StatusOK {
				return false, fmt.Sprintf("%s /metrics: %d", svc, code)
			}
			if !strings.Contains(body, `anvil_build_info{`) || !strings.Contains(body, `service="`+svc+`"`) {
				return false, svc + "'s /metrics has no anvil_build_info for it"
			}
			for n := range exposedNames(body) {
				have[n] = true
			}
		}
		missing = missing[:0]
		for n, where := range used {
			if !have[n] {
				missing = append(missing, n+" (used by "+strings.Join(where, ", ")+")")
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, "missing: " + strings.Join(missing, "; ")
	})
	t.Logf("%d metrics used by the rules and the dashboard, all exposed", len(used))
}

// exposedNames returns the sample names of a Prometheus text exposition: each family's name
// and, for histograms and summaries, the names of their series (_bucket, _sum, _count).
func exposedNames(body string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				continue
			}
			names[f[0]] = true
			switch f[1] {
			case "histogram":
				names[f[0]+"_bucket"], names[f[0]+"_sum"], names[f[0]+"_count"] = true, true, true
			case "summary":
				names[f[0]+"_sum"], names[f[0]+"_count"] = true, true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// A sample: its name is what precedes the labels or the value.
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func get(ctx context.Context, url, token string) (int, string) {
	return do(ctx, http.MethodGet, url, token, "")
}

func do(ctx context.Context, method, url, token, body string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond until it holds, failing the test with cond's last word when ctx ends.
func eventually(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s", what, why)
		case <-tick.C:
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
