package charttest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../anvil"

// repoRoot is the repository's root, for VERSION and the services' sources.
const repoRoot = "../../.."

// services are the five anvil services the chart deploys.
var services = []string{"registry", "revisions", "rollout", "boot", "gateway"}

// valueSet is one configuration the chart is linted, rendered and checked with.
type valueSet struct {
	name   string
	values string // YAML, merged over the chart's values.yaml
}

// valueSets are the default values with the one Secret they need, and other configurations.
var valueSets = []valueSet{
	{name: "minimal", values: `existingSecret: anvil-secrets`},
	{name: "external-nats", values: `
existingSecret: anvil-secrets
nats:
  bundled:
    enabled: false
  external:
    url: nats://nats-a.nats.svc:4222,nats://nats-b.nats.svc:4222
    auth: password
  users:
    registry: {existingSecret: nats-registry}
    revisions: {existingSecret: nats-revisions}
    rollout: {existingSecret: nats-rollout}
    boot: {existingSecret: nats-boot}
    gateway: {existingSecret: nats-gateway, passwordKey: pass}
networkPolicy:
  externalNatsTo:
    - ipBlock: {cidr: 10.20.0.0/16}
`},
	{name: "ingress-no-netpol", values: `
existingSecret: anvil-secrets
networkPolicy:
  enabled: false
gateway:
  ingress:
    enabled: true
    className: nginx
    hosts:
      - host: anvil.example.net
        paths: [{path: /, pathType: Prefix}]
    tls:
      - hosts: [anvil.example.net]
        secretName: anvil-gateway-tls
boot:
  publicURL: http://boot.example.net
  ingress:
    enabled: true
    className: nginx
    hosts:
      - host: boot.example.net
        paths: [{path: /, pathType: Prefix}]
  tls:
    enabled: true
    secretName: boot-tls
    publicURL: https://boot.example.net
  service:
    type: LoadBalancer
    externalTrafficPolicy: Local
`},
	{name: "high-replicas-existing-secrets", values: `
adminToken:
  existingSecret: anvil-admin
  existingSecretKey: admin-token
registry: {replicas: 5, podDisruptionBudget: {minAvailable: 3}, offlineAfter: 2m, offlineSweepInterval: 15s}
revisions:
  replicas: 5
  encryptionKeys: {existingSecret: anvil-keys, existingSecretKey: encryption-keys}
  kubernetesVersions: [1.33.5, 1.34.1]
  renderCacheBytes: 134217728
  agentURL: https://artifacts.example.net/anvil-agent-linux-amd64
  agentHash: sha256-0000000000000000000000000000000000000000000000000000000000000000
rollout: {replicas: 5, leaseTTL: 20s, poll: 3s, replan: 1m}
boot:
  replicas: 5
  sysextMirror: https://mirror.example.net/sysext/kubernetes-v{version}-{arch}.raw
  sysextCacheSize: 5Gi
  signingKeys: {existingSecret: anvil-boot-keys}
  bootTokenTTL: 30m
  ipxeRetryInitial: 2s
  ipxeRetryMax: 2m
  ignitionCacheBytes: 33554432
  ignitionCacheTTL: 5m
  instructionTTL: 30m
  prepareWorkers: 4
gateway: {replicas: 5, bodyLimit: 2097152, idempotencyTTL: 12h}
nats:
  streamReplicas: 3
  bundled:
    replicas: 5
    podAntiAffinity: soft
    zoneSpread: DoNotSchedule
    persistence: {size: 50Gi, storageClassName: fast}
    routes: {existingSecret: nats-routes, passwordKey: route-password}
  users:
    registry: {existingSecret: nats-registry}
    revisions: {existingSecret: nats-revisions}
    rollout: {existingSecret: nats-rollout}
    boot: {existingSecret: nats-boot}
    gateway: {existingSecret: nats-gateway}
logLevel: debug
otlpEndpoint: http://otel-collector.observability:4318
networkPolicy:
  extraEgress:
    - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: observability}}}]
      ports: [{port: 4318, protocol: TCP}]
metrics:
  serviceMonitor: {enabled: true, interval: 15s, scrapeTimeout: 10s, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}, machineOfflineMinutes: 20, httpErrorRatio: 0.02}
  dashboard: {enabled: true, annotations: {grafana_folder: anvil}}
`},
	{name: "external-nats-creds-admin-hash", values: `
adminToken:
  hash: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
revisions:
  encryptionKeys: {existingSecret: anvil-keys}
nats:
  streamReplicas: 1
  bundled: {enabled: false}
  external: {url: nats://nats.example.net:4222, auth: creds}
  users:
    registry: {existingSecret: creds-registry}
    revisions: {existingSecret: creds-revisions}
    rollout: {existingSecret: creds-rollout}
    boot: {existingSecret: creds-boot}
    gateway: {existingSecret: creds-gateway, credsKey: user.creds}
`},
	{name: "digests-one-nats", values: `
existingSecret: anvil-secrets
image: {registry: registry.example.com, tag: "1.2.3"}
registry: {image: {digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}}
revisions: {image: {digest: "sha256:2222222222222222222222222222222222222222222222222222222222222222"}}
rollout: {image: {digest: "sha256:3333333333333333333333333333333333333333333333333333333333333333"}}
boot: {image: {digest: "sha256:4444444444444444444444444444444444444444444444444444444444444444"}}
gateway: {image: {digest: "sha256:5555555555555555555555555555555555555555555555555555555555555555"}}
nats:
  streamReplicas: 1
  bundled:
    replicas: 1
    podAntiAffinity: none
    zoneSpread: none
    image: {digest: "sha256:6666666666666666666666666666666666666666666666666666666666666666"}
  users:
    gateway: {existingSecret: nats-gateway}
`},
}

func (v valueSet) parse(t testing.TB) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(v.values))
	if err != nil {
		t.Fatalf("value set %s: %v", v.name, err)
	}
	return vals.AsMap()
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// rendered is one `helm template` of the chart.
type rendered struct {
	objects []runtime.Object
	byKey   map[string]runtime.Object // "<Kind>/<name>"
	notes   string
}

func (r rendered) get(t testing.TB, kind, name string) runtime.Object {
	t.Helper()
	o, ok := r.byKey[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s rendered; have %s", kind, name, strings.Join(r.keys(), ", "))
	}
	return o
}

func (r rendered) keys() []string {
	var ks []string
	for k := range r.byKey {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// strictDecoder refuses unknown and duplicate fields, so a typo in a template fails here.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// render runs the chart through Helm's install action in client-only dry-run mode (what `helm
// template` does) and decodes every manifest strictly into its typed object.
func render(t testing.TB, ch *chart.Chart, release, namespace string, vals map[string]any) rendered {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = release
	inst.Namespace = namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	r := rendered{byKey: map[string]runtime.Object{}, notes: rel.Info.Notes}
	manifests := releaseutil.SplitManifests(rel.Manifest)
	names := make([]string, 0, len(manifests))
	for k := range manifests {
		names = append(names, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(names))
	for _, k := range names {
		doc := manifests[k]
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
			continue
		}
		obj, gvk, err := strictDecoder.Decode([]byte(doc), nil, nil)
		if runtime.IsNotRegisteredError(err) {
			// The Prometheus Operator's kinds are not in client-go's scheme:
			// checked against their own shapes by TestMonitoring.
			obj, gvk, err = decodeMonitoring(doc)
		}
		if err != nil {
			t.Fatalf("decoding a rendered manifest: %v\n%s", err, doc)
		}
		var meta struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		key := gvk.Kind + "/" + meta.Metadata.Name
		if _, dup := r.byKey[key]; dup {
			t.Fatalf("%s is rendered twice", key)
		}
		if meta.Metadata.Namespace != namespace {
			t.Errorf("%s has namespace %q, want %q", key, meta.Metadata.Namespace, namespace)
		}
		r.byKey[key] = obj
		r.objects = append(r.objects, obj)
	}
	return r
}

// readVersion returns the VERSION file at the repository root.
func readVersion(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

var envLiteral = regexp.MustCompile(`"((?:ANVIL|OTEL)_[A-Z0-9_]+)"`)

// knownEnv returns the environment variables a service reads: the string literals in its
// service package (RegisterFlags) and in the shared runtime, plus its admin address variable,
// which the runtime builds from the service's name.
func knownEnv(t testing.TB, service string) map[string]bool {
	t.Helper()
	known := map[string]bool{
		"ANVIL_" + strings.ToUpper(service) + "_ADMIN_ADDR": true,
		"OTEL_EXPORTER_OTLP_ENDPOINT":                       true, // the OpenTelemetry SDK's own
		"GOMEMLIMIT":                                        true, // the Go runtime's own
	}
	dirs := []string{
		filepath.Join(repoRoot, "libs/events/svc"),
		filepath.Join(repoRoot, "services", service, "service"),
	}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				for _, m := range envLiteral.FindAllStringSubmatch(sc.Text(), -1) {
					known[m[1]] = true
				}
			}
			fh.Close()
		}
	}
	return known
}

func fullname(release string) string {
	if strings.Contains(release, "anvil") {
		return release
	}
	return fmt.Sprintf("%s-anvil", release)
}
