package render

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_4"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// templateHostnames are the hostnames every specialisation test renders:
// the longest allowed, digits only (YAML would read them as numbers, so the
// join configuration quotes them), words YAML 1.1 reads as booleans or null,
// dotted names, one character.
func templateHostnames() []string {
	return []string{
		"node-1", "a", "7", "0", "123", "08", "1e5", "0x1f", "1.5", "1-2", "true", "null", "yes", "on", "off", "n", "y",
		"node-1.rack12.example", "x.y.z", "0.0.0.0",
		strings.Repeat("a", 63), strings.Repeat("9", 63), strings.Repeat("a1-", 20) + "end",
		"w" + strings.Repeat("0", 61) + "z",
	}
}

func templateLabels() []map[string]string {
	return []map[string]string{
		nil,
		{},
		{"anvil.dev/slot": "7"},
		{"anvil.dev/rack": "r13"}, // overrides the bond shape's pool label
		{"anvil.dev/flag": "true", "zone": "null", "topology.kubernetes.io/zone": "eu-1a", "n": ""},
		{"a.b/c": strings.Repeat("v", 63)},
	}
}

// templateConfigs are the golden shapes, plus the kubeadm v1beta3 join
// configuration (Kubernetes before 1.31) and a pool without node labels.
func templateConfigs() map[string]pool.Config {
	cfgs := shapes()
	old := baseConfig()
	old.Kubernetes = pool.Kubernetes{Minor: "1.30", Version: "1.30.14"}
	old.KubeletExtraArgs = map[string]string{"max-pods": "300"}
	cfgs["v1beta3"] = old
	oldLabels := old
	oldLabels.NodeLabels = map[string]string{"anvil.dev/pool": "old"}
	cfgs["v1beta3-labels"] = oldLabels
	return cfgs
}

// TestTemplateSpecialiseIsRender: for every shape, hostname and label set,
// the specialised template is byte for byte the full render, and valid
// Ignition.
func TestTemplateSpecialiseIsRender(t *testing.T) {
	n := 0
	for name, cfg := range templateConfigs() {
		tmpl, err := NewTemplate(testInput(t, cfg, "node-1", nil))
		if err != nil {
			t.Fatalf("%s: template: %v", name, err)
		}
		// Every hostname (with the label sets in turn), and every label set
		// with the first hostname: the files differ by one or the other.
		type machine struct {
			host   string
			labels map[string]string
		}
		var machines []machine
		for i, host := range templateHostnames() {
			machines = append(machines, machine{host, templateLabels()[i%len(templateLabels())]})
		}
		for _, labels := range templateLabels() {
			machines = append(machines, machine{templateHostnames()[0], labels})
		}
		for _, mc := range machines {
			host, labels := mc.host, mc.labels
			in := testInput(t, cfg, host, labels)
			want, err := Render(in)
			if err != nil {
				t.Fatalf("%s %q %v: render: %v", name, host, labels, err)
			}
			got, err := tmpl.Specialise(in.Machine)
			if err != nil {
				t.Fatalf("%s %q %v: specialise: %v", name, host, labels, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %q %v: the specialised template differs from the render:\n%s", name, host, labels, firstDiff(got, want))
			}
			if err := VerifyIgnition(got); err != nil {
				t.Fatalf("%s %q %v: %v", name, host, labels, err)
			}
			n++
		}
	}
	t.Logf("%d machine revisions specialised, each equal to its full render", n)
}

// TestTemplatesRenderOncePerPoolRevision: a cache renders Butane once per
// pool revision, and each machine's config is its full render.
func TestTemplatesRenderOncePerPoolRevision(t *testing.T) {
	c := NewCache(64 << 20)
	cfg := shapes()["bond-vlan-bridge"]
	for i := range 50 {
		in := testInput(t, cfg, fmt.Sprintf("node-%d", i), map[string]string{"anvil.dev/slot": fmt.Sprint(i)})
		got, err := c.Render(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("machine %d:\n%s", i, firstDiff(got, want))
		}
	}
	if s := c.Stats(); s.TemplateRenders != 1 || s.Templates != 1 || s.Renders != 50 {
		t.Fatalf("stats %+v, want one template render for 50 machines", s)
	}
	// Other join material is another template.
	in := testInput(t, cfg, "node-1", nil)
	in.Join.CACertHash = "sha256:" + strings.Repeat("ab", 32)
	if _, err := c.Render(in); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.TemplateRenders != 2 {
		t.Fatalf("stats %+v: a cluster's new join material reused the old template", s)
	}
}

// TestTemplateRefusesOtherRevisions: a template only specialises machine
// revisions of its own pool revision, untampered.
func TestTemplateRefusesOtherRevisions(t *testing.T) {
	tmpl, err := NewTemplate(testInput(t, shapes()["dhcp"], "node-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	other := testInput(t, shapes()["static"], "node-1", nil).Machine
	tampered := testInput(t, shapes()["dhcp"], "node-1", nil).Machine
	tampered.Hostname = "node-2"
	for name, m := range map[string]pool.MachineRevision{"other revision": other, "tampered": tampered} {
		if _, err := tmpl.Specialise(m); !errs.Is(err, errs.KindValidation) {
			t.Errorf("%s: got %v, want a validation error", name, err)
		}
	}
}

// FuzzTemplateSpecialise compares the specialised template with the full
// render for any hostname and machine label the validation lets through.
func FuzzTemplateSpecialise(f *testing.F) {
	for _, h := range templateHostnames() {
		f.Add(h, "anvil.dev/slot", "7")
	}
	f.Add("n", "null", "true")
	f.Add("x1", "a/b", "")
	tmpls := map[string]*Template{}
	cfgs := templateConfigs()
	for name, cfg := range cfgs {
		tmpl, err := NewTemplate(testInput(f, cfg, "node-1", nil))
		if err != nil {
			f.Fatal(err)
		}
		tmpls[name] = tmpl
	}
	f.Fuzz(func(t *testing.T, hostname, labelKey, labelValue string) {
		settings := pool.MachineSettings{Hostname: hostname, Labels: map[string]string{labelKey: labelValue}}
		if settings.Validate() != nil {
			return
		}
		for name, cfg := range cfgs {
			in := testInput(t, cfg, hostname, settings.Labels)
			want, err := Render(in)
			if err != nil {
				t.Fatalf("%s: render: %v", name, err)
			}
			got, err := tmpls[name].Specialise(in.Machine)
			if err != nil {
				t.Fatalf("%s: specialise: %v", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %q %q=%q:\n%s", name, hostname, labelKey, labelValue, firstDiff(got, want))
			}
			if _, report, err := v3_4.Parse(got); err != nil || len(report.Entries) > 0 {
				t.Fatalf("%s: invalid: %v %s", name, err, report)
			}
		}
	})
}

// firstDiff shows where two configs part.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(i-80, 0)
	return fmt.Sprintf("at byte %d:\ngot:  …%s\nwant: …%s", i, got[from:min(i+80, len(got))], want[from:min(i+80, len(want))])
}

func BenchmarkTemplateSpecialise(b *testing.B) {
	in := testInput(b, shapes()["bond-vlan-bridge"], "node-1.rack12.example", map[string]string{"anvil.dev/slot": "7"})
	tmpl, err := NewTemplate(in)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Specialise(in.Machine); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "specialisations/s")
}
