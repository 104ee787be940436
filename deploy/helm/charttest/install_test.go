package charttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// warnings collects what the API server warns about (a Pod Security violation of a pod
// template is a warning on the Deployment, not a refusal).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// TestInstallAndUpgrade installs the chart into a real kube-apiserver (libs/kubeharness) in a
// namespace that enforces the restricted Pod Security profile, then upgrades it. Every object
// must be accepted, no Pod Security warning may come back, the controllers must be able to
// create every pod (no kubelet runs them), and the release must neither make nor change a
// Secret: the operator's Secret is the only one.
func TestInstallAndUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the install into a real API server")
	}
	cp := kubeharness.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	const ns = "anvil-system"
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns,
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/warn":    "restricted",
			"pod-security.kubernetes.io/audit":   "restricted",
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Secrets an operator creates: the credentials (README.md's command, with fixed values)
	// and, for the upgrade's value set, boot's certificate and signing key.
	shared := map[string][]byte{}
	for k, v := range natsSecrets["anvil-secrets"] {
		shared[k] = []byte(v)
	}
	shared["admin-token"] = []byte("anvil_admin_0123456789abcdef0123456789abcdef0123456789")
	shared["encryption-keys"] = []byte("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	for _, s := range []struct {
		name string
		data map[string][]byte
	}{
		{"anvil-secrets", shared},
		{"boot-tls", map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("x")}},
		{"boot-signing", map[string][]byte{"keys": []byte("x")}},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns}, Data: s.data}
		if _, err := cp.Client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := secretData(ctx, t, cp.Client, ns, "anvil-secrets")

	warn := &warnings{}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, cp.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	namespace := ns
	flags.Namespace = &namespace
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.WarningHandler = warn
		c.QPS, c.Burst = 100, 200
		return c
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)
	client := cp.Client

	// Install with the default values and the one Secret they need.
	inst := action.NewInstall(cfg)
	inst.ReleaseName = "anvil"
	inst.Namespace = ns
	inst.Timeout = 2 * time.Minute
	rel, err := inst.RunWithContext(ctx, ch, map[string]any{"existingSecret": "anvil-secrets"})
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s", rel.Info.Status)
	}
	checkNoWarnings(t, "install", warn)
	checkObjects(ctx, t, client, ns, rel.Manifest)
	waitPods(ctx, t, client, ns, map[string]int{
		"registry": 2, "revisions": 2, "rollout": 2, "boot": 2, "gateway": 2, "nats": 3,
	})
	stsBefore, err := client.AppsV1().StatefulSets(ns).Get(ctx, "anvil-nats", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Upgrade: more replicas, ingresses, TLS on boot, an existing signing key, no NetworkPolicies.
	up := action.NewUpgrade(cfg)
	up.Namespace = ns
	up.Timeout = 2 * time.Minute
	vals, err := chartutil.ReadValues([]byte(`
existingSecret: anvil-secrets
networkPolicy: {enabled: false}
registry: {replicas: 3}
gateway:
  replicas: 3
  ingress: {enabled: true, className: nginx, hosts: [{host: anvil.example.net, paths: [{path: /, pathType: Prefix}]}]}
boot:
  replicas: 3
  publicURL: http://boot.example.net
  signingKeys: {existingSecret: boot-signing}
  tls: {enabled: true, secretName: boot-tls, publicURL: https://boot.example.net}
  service: {type: NodePort}
  ingress: {enabled: true, hosts: [{host: boot.example.net, paths: [{path: /, pathType: Prefix}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	rel, err = up.RunWithContext(ctx, "anvil", ch, vals.AsMap())
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if rel.Version != 2 || rel.Info.Status != release.StatusDeployed {
		t.Fatalf("after the upgrade: revision %d, status %s", rel.Version, rel.Info.Status)
	}
	checkNoWarnings(t, "upgrade", warn)
	checkObjects(ctx, t, client, ns, rel.Manifest)
	for _, name := range []string{"anvil-gateway", "anvil-boot"} {
		if _, err := client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Ingress %s: %v", name, err)
		}
	}
	if nps, err := client.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{}); err != nil || len(nps.Items) != 0 {
		t.Errorf("NetworkPolicies left after disabling them: %d (%v)", len(nps.Items), err)
	}
	waitPods(ctx, t, client, ns, map[string]int{"registry": 3, "gateway": 3, "boot": 3})
	// The upgrade changed nothing of NATS: its servers must not restart.
	if sts, err := client.AppsV1().StatefulSets(ns).Get(ctx, "anvil-nats", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if sts.Generation != stsBefore.Generation {
		t.Errorf("the upgrade changed the NATS StatefulSet's spec (generation %d to %d): its servers would restart", stsBefore.Generation, sts.Generation)
	}
	// No Secret but the operator's three, and theirs untouched.
	secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Type == "helm.sh/release.v1" {
			continue // Helm's own record of the release
		}
		if !slices.Contains([]string{"anvil-secrets", "boot-tls", "boot-signing"}, s.Name) {
			t.Errorf("Secret %s was made by the release", s.Name)
		}
	}
	after := secretData(ctx, t, client, ns, "anvil-secrets")
	for k, v := range before["anvil-secrets"] {
		if string(after["anvil-secrets"][k]) != string(v) {
			t.Errorf("key %s of the operator's Secret changed", k)
		}
	}
}

func checkNoWarnings(t *testing.T, step string, w *warnings) {
	t.Helper()
	for _, m := range w.take() {
		t.Errorf("%s: the API server warned: %s", step, m)
	}
}

// checkObjects reads back every object of the manifest from the API server.
func checkObjects(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, manifest string) {
	t.Helper()
	n := 0
	for _, doc := range strings.Split(manifest, "\n---") {
		kind, name := field(doc, "kind: "), metaName(doc)
		if kind == "" {
			continue
		}
		n++
		var err error
		switch kind {
		case "Deployment":
			_, err = client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		case "StatefulSet":
			_, err = client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		case "Service":
			_, err = client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		case "Secret":
			_, err = client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		case "ConfigMap":
			_, err = client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		case "ServiceAccount":
			_, err = client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		case "PodDisruptionBudget":
			_, err = client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		case "NetworkPolicy":
			_, err = client.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
		case "Ingress":
			_, err = client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		default:
			t.Errorf("the chart renders a %s, which this test does not read back", kind)
			continue
		}
		if err != nil {
			t.Errorf("%s %s is not on the API server: %v", kind, name, err)
		}
	}
	t.Logf("%d objects accepted by the API server", n)
}

func field(doc, prefix string) string {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix))
		}
	}
	return ""
}

// metaName is the object's metadata.name (the first "  name:" under "metadata:").
func metaName(doc string) string {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if l == "metadata:" {
			for _, m := range lines[i+1:] {
				if strings.HasPrefix(m, "  name: ") {
					return strings.Trim(strings.TrimPrefix(m, "  name: "), `"`)
				}
				if !strings.HasPrefix(m, " ") {
					break
				}
			}
		}
	}
	return ""
}

// waitPods waits until the controllers have created the pods of each component (they stay
// Pending: no kubelet runs them). A pod that Pod Security refuses never appears; its
// ReplicaSet's or StatefulSet's failure is reported.
func waitPods(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=anvil"})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]int{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				have[p.Labels["app.kubernetes.io/component"]]++
			}
		}
		var missing []string
		for c, n := range want {
			if have[c] < n {
				missing = append(missing, fmt.Sprintf("%s %d/%d", c, have[c], n))
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Errorf("pods not created: %s", strings.Join(missing, ", "))
			reportFailures(ctx, t, client, ns)
			return
		}
		time.Sleep(time.Second)
	}
}

func reportFailures(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			t.Logf("event %s/%s: %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

func secretData(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, names ...string) map[string]map[string][]byte {
	t.Helper()
	out := map[string]map[string][]byte{}
	for _, n := range names {
		s, err := client.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Errorf("Secret %s was not created", n)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[n] = s.Data
	}
	return out
}
