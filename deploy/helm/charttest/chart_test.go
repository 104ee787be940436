package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

func TestChartVersionIsTheRepositoryVersion(t *testing.T) {
	ch := loadChart(t)
	if v := readVersion(t); ch.Metadata.AppVersion != v {
		t.Errorf("Chart.yaml appVersion is %q, VERSION is %q: they must agree (the images are tagged with VERSION)", ch.Metadata.AppVersion, v)
	}
	if ch.Metadata.Version == "" {
		t.Error("the chart has no version")
	}
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = "anvil"
			l.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
			res := l.Run([]string{chartDir}, vs.parse(t))
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts", res.TotalChartsLinted)
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}

// TestSchemaRefusesBadValues checks that values.schema.json catches typical mistakes.
func TestSchemaRefusesBadValues(t *testing.T) {
	ch := loadChart(t)
	for name, values := range map[string]string{
		"unknown top-level key":  "registy: {replicas: 2}",
		"replicas as a string":   "gateway: {replicas: two}",
		"bad external auth":      "nats: {external: {auth: token}}",
		"bad log level":          "logLevel: verbose",
		"negative replicas":      "boot: {replicas: -1}",
		"unknown service field":  "rollout: {leaseTtl: 10s}",
		"stream replicas zero":   "nats: {streamReplicas: 0}",
		"bad anti-affinity mode": "nats: {bundled: {podAntiAffinity: always}}",
		"agent URL without hash": "revisions: {agentURL: 'https://a.example/agent'}",
		"agent hash without URL": "revisions: {agentHash: sha512-" + strings.Repeat("0", 128) + "}",
		"short agent hash":       "revisions: {agentURL: 'https://a.example/agent', agentHash: sha512-00}",
		"removed sysextURL":      "revisions: {sysextURL: 'https://old.example/sysext'}",
		"mirror without arch":    "boot: {sysextMirror: 'https://m.example/kubernetes-v{version}.raw'}",
		"relative assets dir":    "boot: {assetsDir: srv/anvil}",
		"error ratio above 1":    "metrics: {prometheusRule: {httpErrorRatio: 5}}",
		"bad scrape interval":    "metrics: {serviceMonitor: {interval: often}}",
		"unknown metrics field":  "metrics: {grafana: {enabled: true}}",
	} {
		t.Run(name, func(t *testing.T) {
			// With the Secret, so that a refusal is for the mistake, not for missing credentials.
			vals, err := chartutil.ReadValues([]byte("existingSecret: anvil-secrets\n" + values))
			if err != nil {
				t.Fatal(err)
			}
			inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
			inst.DryRun, inst.ClientOnly, inst.ReleaseName, inst.Namespace = true, true, "anvil", "anvil"
			inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
			if _, err := inst.Run(ch, vals.AsMap()); err == nil {
				t.Errorf("values %q were accepted", values)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestSysextMirror: with boot.sysextMirror, the boot service gets the
// template, a writable emptyDir where it keeps what it fetches (the root
// file system is read-only), and a NetworkPolicy egress rule to the mirror.
func TestSysextMirror(t *testing.T) {
	ch := loadChart(t)
	const mirror = "https://mirror.example.net/sysext/kubernetes-v{version}-{arch}.raw"
	vals, err := chartutil.ReadValues([]byte("existingSecret: anvil-secrets\nboot: {sysextMirror: '" + mirror + "', sysextCacheSize: 5Gi}\nnetworkPolicy: {sysextMirrorTo: [{ipBlock: {cidr: 10.9.0.0/16}}]}"))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, ch, "fleet", "anvil-system", vals.AsMap())
	name := fullname("fleet") + "-boot"
	d := r.get(t, "Deployment", name).(*appsv1.Deployment)
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["ANVIL_BOOT_SYSEXT_MIRROR"] != mirror || env["ANVIL_BOOT_ASSETS_DIR"] != "/srv/anvil" {
		t.Errorf("env: %v", env)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "sysext" && m.MountPath == "/srv/anvil/sysext" && !m.ReadOnly {
			mounted = true
		}
	}
	sized := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "sysext" && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.String() == "5Gi" {
			sized = true
		}
	}
	if !mounted || !sized {
		t.Errorf("no writable 5Gi emptyDir at /srv/anvil/sysext: %+v %+v", c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}
	np := r.get(t, "NetworkPolicy", name).(*networkingv1.NetworkPolicy)
	found := false
	for _, e := range np.Spec.Egress {
		if len(e.To) == 1 && e.To[0].IPBlock != nil && e.To[0].IPBlock.CIDR == "10.9.0.0/16" && len(e.Ports) == 2 && e.Ports[1].Port.IntValue() == 443 {
			found = true
		}
	}
	if !found {
		t.Errorf("no egress to the mirror: %+v", np.Spec.Egress)
	}
	// Without a mirror: no volume, no rule.
	r = render(t, ch, "fleet", "anvil-system", map[string]any{"existingSecret": "anvil-secrets"})
	for _, v := range r.get(t, "Deployment", name).(*appsv1.Deployment).Spec.Template.Spec.Volumes {
		if v.Name == "sysext" {
			t.Error("a sysext volume without a mirror")
		}
	}
}

// existingSecrets lists the Secrets a value set names (every existingSecret and the TLS one):
// the release does not create them, the operator does.
func existingSecrets(t testing.TB, vals map[string]any) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "existingSecret" || k == "secretName") && s != "" {
					out[s] = true
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(vals)
	return out
}

func TestTemplate(t *testing.T) {
	ch := loadChart(t)
	version := readVersion(t)
	known := map[string]map[string]bool{}
	for _, svc := range services {
		known[svc] = knownEnv(t, svc)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals := vs.parse(t)
			merged, err := chartutil.CoalesceValues(ch, vals)
			if err != nil {
				t.Fatal(err)
			}
			r := render(t, ch, "fleet", "anvil-system", vals)
			full := fullname("fleet")
			existing := existingSecrets(t, vals)
			bundled := lookup(merged, "nats.bundled.enabled").(bool)
			netpol := lookup(merged, "networkPolicy.enabled").(bool)

			for _, svc := range services {
				name := full + "-" + svc
				d := r.get(t, "Deployment", name).(*appsv1.Deployment)
				want := int32(lookupInt(merged, svc+".replicas"))
				if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
					t.Errorf("%s: replicas %v, want %d", name, d.Spec.Replicas, want)
				}
				checkRestricted(t, name, d.Spec.Template.Spec)
				if d.Spec.Template.Spec.AutomountServiceAccountToken == nil || *d.Spec.Template.Spec.AutomountServiceAccountToken {
					t.Errorf("%s mounts a service account token; no service needs one", name)
				}
				c := d.Spec.Template.Spec.Containers[0]
				if vs.name == "minimal" {
					if img := "anvil/anvil-" + svc + ":" + version; c.Image != img {
						t.Errorf("%s: image %s, want %s", name, c.Image, img)
					}
				}
				checkProbes(t, name, c)
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: no CPU request or memory limit", name)
				}
				env := map[string]corev1.EnvVar{}
				for _, e := range c.Env {
					if _, dup := env[e.Name]; dup {
						t.Errorf("%s: %s is set twice", name, e.Name)
					}
					env[e.Name] = e
					if !known[svc][e.Name] {
						t.Errorf("%s sets %s, which the %s service does not read", name, e.Name, svc)
					}
					if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
						s := ref.SecretKeyRef.Name
						if _, ok := r.byKey["Secret/"+s]; !ok && !existing[s] {
							t.Errorf("%s: %s comes from Secret %s, which is neither rendered nor named in the values", name, e.Name, s)
						}
						if sec, ok := r.byKey["Secret/"+s].(*corev1.Secret); ok {
							if _, ok := sec.Data[ref.SecretKeyRef.Key]; !ok {
								t.Errorf("%s: %s comes from key %s of Secret %s, which it does not have", name, e.Name, ref.SecretKeyRef.Key, s)
							}
						}
					}
				}
				if _, ok := env["ANVIL_NATS_URL"]; !ok {
					t.Errorf("%s: no ANVIL_NATS_URL", name)
				}
				if got, want := env["ANVIL_STREAM_REPLICAS"].Value, toString(lookup(merged, "nats.streamReplicas")); got != want {
					t.Errorf("%s: ANVIL_STREAM_REPLICAS=%q, want %q", name, got, want)
				}
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Secret != nil {
						if _, ok := r.byKey["Secret/"+v.Secret.SecretName]; !ok && !existing[v.Secret.SecretName] {
							t.Errorf("%s mounts Secret %s, which is neither rendered nor named in the values", name, v.Secret.SecretName)
						}
					}
				}

				// The Service, PodDisruptionBudget and ServiceAccount.
				podLabels := labels.Set(d.Spec.Template.Labels)
				s := r.get(t, "Service", name).(*corev1.Service)
				if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
					t.Errorf("Service %s does not select its pods", name)
				}
				for _, p := range s.Spec.Ports {
					if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal }) {
						t.Errorf("Service %s targets port %s, which the container does not have", name, p.TargetPort.String())
					}
				}
				pdb := r.get(t, "PodDisruptionBudget", name).(*policyv1.PodDisruptionBudget)
				if sel := pdb.Spec.Selector.MatchLabels; !labels.SelectorFromSet(sel).Matches(podLabels) {
					t.Errorf("PodDisruptionBudget %s does not select its pods", name)
				}
				sa := r.get(t, "ServiceAccount", d.Spec.Template.Spec.ServiceAccountName).(*corev1.ServiceAccount)
				if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					t.Errorf("ServiceAccount %s mounts its token", sa.Name)
				}
				_, hasNP := r.byKey["NetworkPolicy/"+name]
				if hasNP != netpol {
					t.Errorf("NetworkPolicy %s rendered: %v, want %v", name, hasNP, netpol)
				}
				if hasNP {
					np := r.byKey["NetworkPolicy/"+name].(*networkingv1.NetworkPolicy)
					if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(podLabels) {
						t.Errorf("NetworkPolicy %s does not select its pods", name)
					}
					if len(np.Spec.PolicyTypes) != 2 {
						t.Errorf("NetworkPolicy %s does not restrict both directions", name)
					}
				}
			}
			for _, svc := range []string{"gateway", "boot"} {
				_, has := r.byKey["Ingress/"+full+"-"+svc]
				if want := lookup(merged, svc+".ingress.enabled").(bool); has != want {
					t.Errorf("Ingress %s-%s rendered: %v, want %v", full, svc, has, want)
				}
			}
			// No RBAC at all: nothing in the release calls this cluster's API.
			for _, k := range r.keys() {
				if strings.HasPrefix(k, "Role/") || strings.HasPrefix(k, "ClusterRole") || strings.HasPrefix(k, "RoleBinding/") {
					t.Errorf("%s is rendered; no anvil service needs RBAC", k)
				}
			}

			nats := full + "-nats"
			if !bundled {
				if _, ok := r.byKey["StatefulSet/"+nats]; ok {
					t.Errorf("StatefulSet %s rendered with an external NATS", nats)
				}
				return
			}
			sts := r.get(t, "StatefulSet", nats).(*appsv1.StatefulSet)
			if got, want := *sts.Spec.Replicas, int32(lookupInt(merged, "nats.bundled.replicas")); got != want {
				t.Errorf("NATS replicas %d, want %d", got, want)
			}
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Error("NATS servers do not start in parallel")
			}
			if len(sts.Spec.VolumeClaimTemplates) != 1 {
				t.Error("NATS servers have no persistent volume")
			}
			checkRestricted(t, nats, sts.Spec.Template.Spec)
			r.get(t, "ConfigMap", nats+"-config")
			r.get(t, "PodDisruptionBudget", nats)
			r.get(t, "Service", nats)
			r.get(t, "Service", nats+"-headless")
			if _, ok := r.byKey["NetworkPolicy/"+nats]; ok != netpol {
				t.Errorf("NetworkPolicy %s rendered: %v, want %v", nats, ok, netpol)
			}
		})
	}
}

// TestValuesDocumented checks that README.md documents every value of values.yaml.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !freeForm[p] {
				walk(p+".", sub)
				continue
			}
			paths = append(paths, p)
		}
	}
	walk("", vals)
	for _, p := range paths {
		if !strings.Contains(string(readme), "`"+p+"`") {
			t.Errorf("README.md does not document `%s`", p)
		}
	}
	t.Logf("%d values documented", len(paths))
}

// freeForm values are maps passed through as they are (documented as a whole).
var freeForm = map[string]bool{
	"nats.bundled.resources": true, "registry.resources": true, "revisions.resources": true,
	"rollout.resources": true, "boot.resources": true, "gateway.resources": true,
}

func checkRestricted(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the pod is not runAsNonRoot with seccomp RuntimeDefault", name)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s shares a host namespace", name)
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s/%s: no securityContext", name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s/%s: allowPrivilegeEscalation is not false", name, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s/%s: the root filesystem is writable", name, c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s/%s: capabilities are not drop ALL", name, c.Name)
		case sc.RunAsUser == nil || *sc.RunAsUser == 0:
			t.Errorf("%s/%s: runs as root", name, c.Name)
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s", name, v.Name)
		}
	}
}

func checkProbes(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s: missing %s probe", name, want)
			continue
		}
		if probe.HTTPGet.Path != want {
			t.Errorf("%s: probe path %s, want %s", name, probe.HTTPGet.Path, want)
		}
		port := probe.HTTPGet.Port.StrVal
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port }) {
			t.Errorf("%s: %s probe on port %q, which the container does not have", name, want, port)
		}
	}
}

func lookup(vals map[string]any, path string) any {
	var cur any = vals
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func lookupInt(vals map[string]any, path string) int {
	switch v := lookup(vals, path).(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	}
	return -1
}

func toString(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return fmt.Sprint(v)
}
