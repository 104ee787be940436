package charttest

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// renderText renders like render but returns the manifest and notes as text, or Helm's error.
func renderText(ch *chart.Chart, release, namespace string, vals map[string]any) (string, error) {
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest + "\n---\n# NOTES\n" + rel.Info.Notes, nil
}

func parseValues(t testing.TB, y string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return vals.AsMap()
}

// TestRendersAreIdentical is what a GitOps tool needs: the same values render the same bytes,
// every time (Argo CD renders with `helm template` and applies any difference, so a random value
// would rotate a credential on every sync). Hence no Secret is rendered either.
func TestRendersAreIdentical(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			// A fresh load each time, as a new `helm template` process would.
			first, err := renderText(loadChart(t), "anvil", "anvil", vs.parse(t))
			if err != nil {
				t.Fatal(err)
			}
			second, err := renderText(loadChart(t), "anvil", "anvil", vs.parse(t))
			if err != nil {
				t.Fatal(err)
			}
			if first != second {
				a, b := strings.Split(first, "\n"), strings.Split(second, "\n")
				for i := range min(len(a), len(b)) {
					if a[i] != b[i] {
						t.Fatalf("two renders differ first at line %d:\n%s\n%s", i+1, a[i], b[i])
					}
				}
				t.Fatalf("two renders differ in length: %d and %d lines", len(a), len(b))
			}
			if regexp.MustCompile(`(?m)^kind: Secret$`).MatchString(first) {
				t.Error("a Secret is rendered: the chart must take every credential from the operator's Secrets")
			}
		})
	}
}

// TestRefusesMissingSecrets: without a Secret for a credential the chart fails, naming each
// missing credential, the values that would name it, and the command that makes the shared Secret.
func TestRefusesMissingSecrets(t *testing.T) {
	ch := loadChart(t)
	tests := []struct {
		name    string
		values  string
		missing []string // shared keys the message must ask for
		absent  []string // shared keys it must not
	}{
		{"defaults", ``,
			[]string{"admin-token", "encryption-keys", "nats-registry-password", "nats-revisions-password", "nats-rollout-password",
				"nats-boot-password", "nats-gateway-password", "nats-routes-password"}, nil},
		{"admin hash and own NATS secrets", `
adminToken: {hash: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824}
nats:
  users:
    registry: {existingSecret: a}
    revisions: {existingSecret: b}
    rollout: {existingSecret: c}
    boot: {existingSecret: d}
    gateway: {existingSecret: e}`,
			[]string{"encryption-keys", "nats-routes-password"}, []string{"admin-token", "nats-registry-password", "nats-gateway-password"}},
		{"one NATS server has no routes", `
nats: {streamReplicas: 1, bundled: {replicas: 1}}
revisions: {encryptionKeys: {existingSecret: k}}`,
			[]string{"admin-token", "nats-boot-password"}, []string{"nats-routes-password", "encryption-keys"}},
		{"external creds", `
nats: {bundled: {enabled: false}, external: {url: "nats://n:4222", auth: creds}}`,
			[]string{"admin-token", "encryption-keys", "nats-registry-creds", "nats-gateway-creds"}, []string{"nats-registry-password", "nats-routes-password"}},
		{"external without auth", `
nats: {bundled: {enabled: false}, external: {url: "nats://n:4222", auth: none}}`,
			[]string{"admin-token", "encryption-keys"}, []string{"nats-registry", "nats-routes-password"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renderText(ch, "anvil", "anvil-system", parseValues(t, tt.values))
			if err == nil {
				t.Fatal("rendered without the Secrets")
			}
			msg := err.Error()
			t.Logf("refused: %s", msg)
			for _, want := range []string{"makes no Secret", "kubectl -n anvil-system create secret generic anvil-secrets", "--set existingSecret=anvil-secrets."} {
				if !strings.Contains(msg, want) {
					t.Errorf("the message does not say %q", want)
				}
			}
			for _, k := range tt.missing {
				asked := strings.Contains(msg, `key "`+k+`" of the Secret named by existingSecret`)
				made := strings.Contains(msg, "--from-literal="+k+"=") || strings.Contains(msg, "--from-file="+k+"=")
				if !asked || !made {
					t.Errorf("the message does not ask for %s", k)
				}
			}
			for _, k := range tt.absent {
				if strings.Contains(msg, `"`+k) || strings.Contains(msg, "="+k+"=") {
					t.Errorf("the message asks for %s, which is provided or not needed", k)
				}
			}
		})
	}
	// Each credential's own value is named too.
	_, err := renderText(ch, "anvil", "anvil", nil)
	for _, v := range []string{"adminToken.existingSecret", "adminToken.hash", "revisions.encryptionKeys.existingSecret",
		"nats.users.registry.existingSecret", "nats.bundled.routes.existingSecret"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("the message does not name %s", v)
		}
	}
}

// secretRefs returns the Secret and key each environment variable of a container comes from.
func secretRefs(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

// TestSecretSources: a credential's own existingSecret wins over the shared one, whose keys are
// fixed; the NATS servers and the services read each password from the same place.
func TestSecretSources(t *testing.T) {
	ch := loadChart(t)
	r := render(t, ch, "anvil", "anvil", parseValues(t, `
existingSecret: shared
adminToken: {existingSecret: admin, existingSecretKey: tok}
nats:
  users:
    rollout: {existingSecret: rollout-nats, passwordKey: pw}
  bundled:
    routes: {existingSecret: routes, passwordKey: rp}
`))
	want := map[string]map[string]string{
		"registry":  {"ANVIL_NATS_PASSWORD": "shared/nats-registry-password"},
		"revisions": {"ANVIL_NATS_PASSWORD": "shared/nats-revisions-password", "ANVIL_REVISIONS_ENCRYPTION_KEYS": "shared/encryption-keys"},
		"rollout":   {"ANVIL_NATS_PASSWORD": "rollout-nats/pw"},
		"boot":      {"ANVIL_NATS_PASSWORD": "shared/nats-boot-password"},
		"gateway":   {"ANVIL_NATS_PASSWORD": "shared/nats-gateway-password", "ANVIL_ADMIN_TOKEN": "admin/tok"},
	}
	for svc, w := range want {
		got := secretRefs(r.get(t, "Deployment", "anvil-"+svc).(*appsv1.Deployment).Spec.Template.Spec.Containers[0])
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s takes %v, want %v", svc, got, w)
		}
	}
	sts := r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet)
	got := secretRefs(sts.Spec.Template.Spec.Containers[0])
	wantNATS := map[string]string{
		"NATS_SECRET_REGISTRY": "shared/nats-registry-password", "NATS_SECRET_REVISIONS": "shared/nats-revisions-password",
		"NATS_SECRET_ROLLOUT": "rollout-nats/pw", "NATS_SECRET_BOOT": "shared/nats-boot-password",
		"NATS_SECRET_GATEWAY": "shared/nats-gateway-password", "NATS_SECRET_ROUTES": "routes/rp",
	}
	if fmt.Sprint(got) != fmt.Sprint(wantNATS) {
		t.Errorf("NATS takes %v, want %v", got, wantNATS)
	}

	// External NATS with .creds from the shared Secret, and the admin token only as a hash.
	r = render(t, ch, "anvil", "anvil", parseValues(t, `
existingSecret: shared
adminToken: {hash: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824}
nats: {streamReplicas: 1, bundled: {enabled: false}, external: {url: "nats://n:4222", auth: creds}}
`))
	for _, svc := range services {
		d := r.get(t, "Deployment", "anvil-"+svc).(*appsv1.Deployment)
		var vol *corev1.SecretVolumeSource
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "nats-creds" {
				vol = v.Secret
			}
		}
		if vol == nil || vol.SecretName != "shared" || len(vol.Items) != 1 || vol.Items[0].Key != "nats-"+svc+"-creds" {
			t.Errorf("%s mounts its .creds from %+v, want key nats-%s-creds of shared", svc, vol, svc)
		}
		refs := secretRefs(d.Spec.Template.Spec.Containers[0])
		if svc == "gateway" && refs["ANVIL_ADMIN_TOKEN"] != "" {
			t.Error("the gateway reads an admin token from a Secret although adminToken.hash is set")
		}
	}
}

// TestImageDigests: a digest pins each image; the tag stays for the reader.
func TestImageDigests(t *testing.T) {
	ch := loadChart(t)
	digest := func(n int) string { return "sha256:" + strings.Repeat(fmt.Sprint(n), 64) }
	r := render(t, ch, "anvil", "anvil", parseValues(t, `
existingSecret: s
image: {registry: registry.example.com/, tag: "9.9.9"}
registry: {image: {digest: "`+digest(1)+`"}}
gateway: {image: {digest: "`+digest(5)+`"}}
nats: {bundled: {image: {digest: "`+digest(6)+`", tag: "2.15.2"}}}
`))
	for svc, want := range map[string]string{
		"registry":  "registry.example.com/anvil/anvil-registry:9.9.9@" + digest(1),
		"gateway":   "registry.example.com/anvil/anvil-gateway:9.9.9@" + digest(5),
		"revisions": "registry.example.com/anvil/anvil-revisions:9.9.9",
	} {
		if got := r.get(t, "Deployment", "anvil-"+svc).(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s image %s, want %s", svc, got, want)
		}
	}
	if got, want := r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0].Image,
		"registry.example.com/anvil/nats-server:2.15.2@"+digest(6); got != want {
		t.Errorf("NATS image %s, want %s", got, want)
	}
	// The schema refuses what is not a sha256 digest.
	for _, bad := range []string{"latest", "sha256:abc", "sha512:" + strings.Repeat("0", 128), "@sha256:" + strings.Repeat("0", 64)} {
		if _, err := renderText(ch, "anvil", "anvil", parseValues(t, "existingSecret: s\nboot: {image: {digest: '"+bad+"'}}")); err == nil {
			t.Errorf("digest %q accepted", bad)
		}
	}
}

// TestNATSScheduling: by default the servers are on different nodes (required) and spread
// over zones where there are any (best effort); each can be turned down or replaced.
func TestNATSScheduling(t *testing.T) {
	ch := loadChart(t)
	sts := func(values string) corev1.PodSpec {
		t.Helper()
		r := render(t, ch, "anvil", "anvil", parseValues(t, "existingSecret: s\n"+values))
		return r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet).Spec.Template.Spec
	}
	natsPods := map[string]string{"app.kubernetes.io/name": "anvil", "app.kubernetes.io/instance": "anvil", "app.kubernetes.io/component": "nats"}

	spec := sts("")
	aa := spec.Affinity.PodAntiAffinity
	if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("default anti-affinity is not one required term: %+v", aa)
	}
	term := aa.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || fmt.Sprint(term.LabelSelector.MatchLabels) != fmt.Sprint(natsPods) {
		t.Errorf("required anti-affinity term %+v", term)
	}
	if len(spec.TopologySpreadConstraints) != 1 {
		t.Fatalf("topology spread %+v", spec.TopologySpreadConstraints)
	}
	tsc := spec.TopologySpreadConstraints[0]
	if tsc.TopologyKey != "topology.kubernetes.io/zone" || tsc.MaxSkew != 1 || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway ||
		fmt.Sprint(tsc.LabelSelector.MatchLabels) != fmt.Sprint(natsPods) {
		t.Errorf("zone spread %+v", tsc)
	}

	spec = sts("nats: {bundled: {podAntiAffinity: soft, zoneSpread: DoNotSchedule}}")
	if aa := spec.Affinity.PodAntiAffinity; len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("soft anti-affinity %+v", aa)
	}
	if spec.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.DoNotSchedule {
		t.Errorf("zoneSpread DoNotSchedule gave %+v", spec.TopologySpreadConstraints)
	}

	spec = sts("nats: {bundled: {podAntiAffinity: none, zoneSpread: none}}")
	if spec.Affinity != nil || spec.TopologySpreadConstraints != nil {
		t.Errorf("none and none still constrain: %+v %+v", spec.Affinity, spec.TopologySpreadConstraints)
	}

	spec = sts(`nats: {bundled: {topologySpreadConstraints: [{maxSkew: 2, topologyKey: rack, whenUnsatisfiable: DoNotSchedule,
  labelSelector: {matchLabels: {app.kubernetes.io/component: nats}}}]}}`)
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "rack" {
		t.Errorf("topologySpreadConstraints do not replace the zone spread: %+v", spec.TopologySpreadConstraints)
	}
	if spec.Affinity.PodAntiAffinity == nil || len(spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Error("topologySpreadConstraints dropped the anti-affinity")
	}
	if _, err := renderText(ch, "anvil", "anvil", parseValues(t, "existingSecret: s\nnats: {bundled: {zoneSpread: sometimes}}")); err == nil {
		t.Error("zoneSpread sometimes accepted")
	}
}

// TestNATSLameDuck: a stopping server enters lame duck mode from a preStop hook (through its
// pid file, on a writable volume) and has the time to finish it before it is killed.
func TestNATSLameDuck(t *testing.T) {
	ch := loadChart(t)
	r := render(t, ch, "anvil", "anvil", parseValues(t, "existingSecret: s\nnats: {bundled: {lameDuck: {durationSeconds: 45, gracePeriodSeconds: 5}, terminationGracePeriodSeconds: 90}}"))
	conf := r.get(t, "ConfigMap", "anvil-nats-config").(*corev1.ConfigMap).Data["nats.conf"]
	for _, want := range []string{`pid_file: "/var/run/nats/nats.pid"`, `lame_duck_duration: "45s"`, `lame_duck_grace_period: "5s"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats.conf lacks %s", want)
		}
	}
	spec := r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet).Spec.Template.Spec
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 90 {
		t.Errorf("terminationGracePeriodSeconds %v", spec.TerminationGracePeriodSeconds)
	}
	c := spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!slices.Equal(c.Lifecycle.PreStop.Exec.Command, []string{"/usr/local/bin/nats-server", "--signal", "ldm=/var/run/nats/nats.pid"}) {
		t.Errorf("preStop %+v", c.Lifecycle)
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.MountPath == "/var/run/nats" && !m.ReadOnly &&
			slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name && v.EmptyDir != nil })
	})
	if !mounted {
		t.Error("/var/run/nats is not a writable emptyDir (the root file system is read-only)")
	}
	// A grace period the lame duck mode would outlast is refused, as is a duration nats-server refuses.
	for _, values := range []string{
		"nats: {bundled: {terminationGracePeriodSeconds: 40}}",
		"nats: {bundled: {lameDuck: {durationSeconds: 20}}}",
	} {
		if _, err := renderText(ch, "anvil", "anvil", parseValues(t, "existingSecret: s\n"+values)); err == nil {
			t.Errorf("%s accepted", values)
		} else {
			t.Logf("refused: %v", err)
		}
	}
}

// TestMetricsOnlyOnAdminPort: every service serves /metrics on its admin port (9090,
// "metrics"), which only ClusterIP Services expose and only networkPolicy.metricsFrom may reach;
// the Services machines and operators reach (boot, gateway, their Ingresses) never carry it.
func TestMetricsOnlyOnAdminPort(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", parseValues(t, `
existingSecret: s
networkPolicy:
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  gatewayFrom: [{ipBlock: {cidr: 10.1.0.0/16}}]
boot: {service: {type: LoadBalancer}, tls: {enabled: true, secretName: tls}, ingress: {enabled: true}}
gateway: {service: {type: NodePort}, ingress: {enabled: true}}
`))
	for _, svc := range services {
		d := r.get(t, "Deployment", "anvil-"+svc).(*appsv1.Deployment)
		c := d.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if got := env["ANVIL_"+strings.ToUpper(svc)+"_ADMIN_ADDR"]; got != ":9090" {
			t.Errorf("%s: admin address %q, want :9090", svc, got)
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9090 }) {
			t.Errorf("%s: no container port metrics 9090", svc)
		}

		metricsSvc := "anvil-" + svc
		if svc == "gateway" || svc == "boot" {
			metricsSvc += "-metrics"
			public := r.get(t, "Service", "anvil-"+svc).(*corev1.Service)
			for _, p := range public.Spec.Ports {
				if p.TargetPort.StrVal == "metrics" || p.Port == 9090 {
					t.Errorf("the %s Service (%s) exposes the admin port", svc, public.Spec.Type)
				}
			}
		}
		s := r.get(t, "Service", metricsSvc).(*corev1.Service)
		if s.Spec.Type != corev1.ServiceTypeClusterIP || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.StrVal != "metrics" {
			t.Errorf("Service %s: %s %+v, want ClusterIP with only the metrics port", metricsSvc, s.Spec.Type, s.Spec.Ports)
		}

		np := r.get(t, "NetworkPolicy", "anvil-"+svc).(*networkingv1.NetworkPolicy)
		for _, rule := range np.Spec.Ingress {
			hasMetrics := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == "metrics" })
			if !hasMetrics {
				continue
			}
			if len(rule.Ports) != 1 || len(rule.From) != 1 || rule.From[0].NamespaceSelector == nil {
				t.Errorf("NetworkPolicy anvil-%s lets %+v reach the admin port with %+v", svc, rule.From, rule.Ports)
			}
		}
	}
	for _, svc := range []string{"gateway", "boot"} {
		ing := r.get(t, "Ingress", "anvil-"+svc).(*networkingv1.Ingress)
		for _, rule := range ing.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				if b := p.Backend.Service; b.Name != "anvil-"+svc || b.Port.Name != "http" {
					t.Errorf("Ingress anvil-%s routes to %s:%s", svc, b.Name, b.Port.Name)
				}
			}
		}
	}
}

// TestUpgradeFromGeneratedSecrets: the commands README.md gives to carry the Secrets of a chart
// that generated them (0.1) into the shared Secret name every key the chart then reads.
func TestUpgradeFromGeneratedSecrets(t *testing.T) {
	readme := readFile(t, chartDir+"/README.md")
	start := strings.Index(readme, "<!-- migrate-begin -->")
	end := strings.Index(readme, "<!-- migrate-end -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no migration commands between <!-- migrate-begin --> and <!-- migrate-end -->")
	}
	cmds := readme[start:end]
	out, err := renderText(loadChart(t), "anvil", "anvil", parseValues(t, "existingSecret: anvil-secrets"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`name: anvil-secrets\n\s+key: (\S+)`).FindAllStringSubmatch(out, -1) {
		if !strings.Contains(cmds, "--from-literal="+m[1]+"=") {
			t.Errorf("the migration commands do not carry key %s over", m[1])
		}
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
