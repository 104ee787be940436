package charttest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// The Prometheus Operator's kinds, as far as the chart uses them (monitoring.coreos.com/v1).
// decodeMonitoring decodes into these strictly, so a misspelt field fails the tests as it would
// fail the operator's CRD validation.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		JobLabel string `json:"jobLabel,omitempty"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			HonorLabels   bool   `json:"honorLabels"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			Relabelings   []struct {
				Action       string   `json:"action"`
				SourceLabels []string `json:"sourceLabels,omitempty"`
				TargetLabel  string   `json:"targetLabel"`
				Replacement  string   `json:"replacement"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// decodeMonitoring decodes a ServiceMonitor or PrometheusRule strictly and returns it as an
// unstructured object (client-go's scheme does not know these kinds).
func decodeMonitoring(doc string) (runtime.Object, *schema.GroupVersionKind, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		return nil, nil, err
	}
	var typed any
	switch {
	case head.APIVersion == "monitoring.coreos.com/v1" && head.Kind == "ServiceMonitor":
		typed = &serviceMonitor{}
	case head.APIVersion == "monitoring.coreos.com/v1" && head.Kind == "PrometheusRule":
		typed = &prometheusRule{}
	default:
		return nil, nil, fmt.Errorf("unknown kind %s %s", head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), typed); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", head.Kind, err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return nil, nil, err
	}
	gvk := u.GroupVersionKind()
	return u, &gvk, nil
}

// as converts an unstructured object into one of the types above.
func as[T any](t *testing.T, o runtime.Object) T {
	t.Helper()
	var v T
	b, err := json.Marshal(o.(*unstructured.Unstructured).Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

const monitoringValues = `
existingSecret: s
metrics:
  serviceMonitor: {enabled: true, interval: 20s, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}, machineOfflineMinutes: 45, projectionLagEvents: 500, projectionLagSeconds: 12.5, httpErrorRatio: 0.1}
  dashboard: {enabled: true, labels: {team: platform}, annotations: {grafana_folder: anvil}}
`

// TestMonitoringIsOptional: without the metrics values nothing needs the Prometheus Operator's
// CRDs, and no dashboard is rendered.
func TestMonitoringIsOptional(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", parseValues(t, "existingSecret: s"))
	for _, k := range r.keys() {
		if strings.HasPrefix(k, "ServiceMonitor/") || strings.HasPrefix(k, "PrometheusRule/") || k == "ConfigMap/anvil-dashboard" {
			t.Errorf("%s rendered with the default values", k)
		}
	}
}

// TestServiceMonitors: one per service, each selecting exactly the Services of its component
// that carry the admin port, scraping that port with the metrics' own labels kept.
func TestServiceMonitors(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", parseValues(t, monitoringValues))
	var svcs []*corev1.Service
	for _, o := range r.objects {
		if s, ok := o.(*corev1.Service); ok {
			svcs = append(svcs, s)
		}
	}
	for _, svc := range services {
		sm := as[serviceMonitor](t, r.get(t, "ServiceMonitor", "anvil-"+svc))
		if sm.Metadata.Labels["release"] != "kube-prometheus-stack" || sm.Metadata.Labels["app.kubernetes.io/component"] != svc {
			t.Errorf("ServiceMonitor %s labels %v", svc, sm.Metadata.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints", svc, len(sm.Spec.Endpoints))
		}
		ep := sm.Spec.Endpoints[0]
		if ep.Port != "metrics" || ep.Path != "/metrics" || !ep.HonorLabels || ep.Interval != "20s" {
			t.Errorf("ServiceMonitor %s endpoint %+v", svc, ep)
		}
		if len(ep.Relabelings) != 1 || ep.Relabelings[0].TargetLabel != "service" || ep.Relabelings[0].Replacement != svc {
			t.Errorf("ServiceMonitor %s does not set the target's service label to %s: %+v", svc, svc, ep.Relabelings)
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{"anvil"}) {
			t.Errorf("ServiceMonitor %s namespaces %v", svc, sm.Spec.NamespaceSelector.MatchNames)
		}
		// The Services it scrapes: those it selects that have the metrics port.
		var scraped []string
		sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
		for _, s := range svcs {
			if sel.Matches(labels.Set(s.Labels)) && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
				scraped = append(scraped, s.Name)
			}
		}
		want := "anvil-" + svc
		if svc == "gateway" || svc == "boot" {
			want += "-metrics"
		}
		if !slices.Equal(scraped, []string{want}) {
			t.Errorf("ServiceMonitor %s scrapes %v, want [%s]", svc, scraped, want)
		}
	}
}

// TestPrometheusRule: the alerts issue #19 asks for, each with a severity, a summary and the
// configured thresholds, all scoped to the release's namespace.
func TestPrometheusRule(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil-system", parseValues(t, monitoringValues))
	pr := as[prometheusRule](t, r.get(t, "PrometheusRule", "anvil"))
	if pr.Metadata.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("labels %v", pr.Metadata.Labels)
	}
	exprs := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, rule := range g.Rules {
			exprs[rule.Alert] = rule.Expr
			if rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" || rule.For == "" {
				t.Errorf("%s lacks a severity, summary, description or for: %+v", rule.Alert, rule)
			}
			if strings.Count(rule.Expr, "(") != strings.Count(rule.Expr, ")") || strings.Count(rule.Expr, "{") != strings.Count(rule.Expr, "}") {
				t.Errorf("%s: unbalanced expression %s", rule.Alert, rule.Expr)
			}
			for _, sel := range regexp.MustCompile(`\b(anvil_[a-z0-9_]+|up)\{([^}]*)\}`).FindAllStringSubmatch(rule.Expr, -1) {
				if !strings.Contains(sel[2], `namespace="anvil-system"`) {
					t.Errorf("%s: %s is not scoped to the release's namespace", rule.Alert, sel[0])
				}
			}
		}
	}
	for alert, want := range map[string]string{
		"AnvilRolloutFailed":        `anvil_rollouts{namespace="anvil-system", status="failed"}`,
		"AnvilMachineOffline":       `> 2700`,
		"AnvilProjectionLagging":    `> 500`,
		"AnvilNATSDisconnected":     `anvil_nats_connected`,
		"AnvilJetStreamUnavailable": `anvil_jetstream_available`,
		"AnvilHTTPErrors":           `> 0.1`,
		"AnvilServiceDown":          `up{`,
	} {
		if !strings.Contains(exprs[alert], want) {
			t.Errorf("%s: %q does not contain %q", alert, exprs[alert], want)
		}
	}
	if !strings.Contains(exprs["AnvilProjectionLagging"], "> 12.5") {
		t.Errorf("AnvilProjectionLagging ignores projectionLagSeconds: %s", exprs["AnvilProjectionLagging"])
	}
	if len(exprs) != 7 {
		t.Errorf("%d alerts: %v", len(exprs), exprs)
	}
}

// TestDashboard: a ConfigMap for Grafana's sidecar holding a dashboard whose every panel queries
// Prometheus.
func TestDashboard(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", parseValues(t, monitoringValues))
	cm := r.get(t, "ConfigMap", "anvil-dashboard").(*corev1.ConfigMap)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["team"] != "platform" || cm.Annotations["grafana_folder"] != "anvil" {
		t.Errorf("labels %v annotations %v", cm.Labels, cm.Annotations)
	}
	d := parseDashboard(t, cm.Data["anvil.json"])
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard without uid or title: %q %q", d.UID, d.Title)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if !strings.Contains(tg.Expr, `namespace="$namespace"`) {
				t.Errorf("panel %q: %s ignores the namespace variable", p.Title, tg.Expr)
			}
		}
	}
	if queries < 20 {
		t.Errorf("only %d queries", queries)
	}
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func parseDashboard(t *testing.T, s string) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	return d
}

// monitoringQueries renders the chart with the rules and the dashboard and returns every
// PromQL expression in them, by where it is.
func monitoringQueries(t *testing.T) map[string]string {
	t.Helper()
	r := render(t, loadChart(t), "anvil", "anvil", parseValues(t, monitoringValues))
	out := map[string]string{}
	pr := as[prometheusRule](t, r.get(t, "PrometheusRule", "anvil"))
	for _, g := range pr.Spec.Groups {
		for _, rule := range g.Rules {
			out["alert "+rule.Alert] = rule.Expr
		}
	}
	d := parseDashboard(t, r.get(t, "ConfigMap", "anvil-dashboard").(*corev1.ConfigMap).Data["anvil.json"])
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q #%d", p.Title, i+1)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out["variable "+v.Name], _ = q["query"].(string)
		}
	}
	return out
}

var metricName = regexp.MustCompile(`\banvil_[a-z0-9_]+`)

// usedMetrics returns the anvil metric names the queries use, each with where.
func usedMetrics(queries map[string]string) map[string][]string {
	used := map[string][]string{}
	for where, q := range queries {
		for _, n := range metricName.FindAllString(q, -1) {
			used[n] = append(used[n], where)
		}
	}
	for _, w := range used {
		sort.Strings(w)
	}
	return used
}
