package anvilctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func mustPrinter(t *testing.T, spec string) *printer {
	t.Helper()
	p, err := parseOutput(spec, os.ReadFile)
	if err != nil {
		t.Fatalf("-o %s: %v", spec, err)
	}
	return p
}

func render(t *testing.T, p *printer, groups []group, single bool) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	p.stderr = &errb
	if err := p.print(&out, groups, single); err != nil {
		t.Fatalf("print: %v", err)
	}
	return out.String(), errb.String()
}

func kind(t *testing.T, name string) *resource {
	t.Helper()
	r, err := lookupResource(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var testMachines = []map[string]any{
	obj(`{"uuid":"u2","hostname":"w2","status":"ready","pool":"workers","labels":{"rack":"r2"},"upgrade_index":3,"current_revision":2}`),
	obj(`{"uuid":"u1","hostname":"w1","status":"ready","pool":"workers","labels":{"zone":"b","rack":"r1"},"upgrade_index":10,"node_name":"node-1"}`),
	obj(`{"uuid":"u3","status":"pending"}`),
}

func TestTableOutput(t *testing.T) {
	cols := []column{field("UUID", "uuid"), field("HOSTNAME", "hostname"), field("LABELS", "labels"), field("SEEN", "last_seen"),
		field("CP", "control_plane"), field("DONE", "progress.done")}
	objs := []map[string]any{
		obj(`{"uuid":"u1","hostname":"w1","labels":{"zone":"b","rack":"r1"},"last_seen":"2026-11-02T09:00:01.123456Z","control_plane":true,"progress":{"done":12345678901}}`),
		obj(`{"uuid":"u2","labels":{}}`),
	}
	var b bytes.Buffer
	if err := printTable(&b, cols, objs); err != nil {
		t.Fatal(err)
	}
	want := "UUID   HOSTNAME   LABELS           SEEN                   CP    DONE\n" +
		"u1     w1         rack=r1,zone=b   2026-11-02T09:00:01Z   yes   12345678901\n" +
		"u2     -          -                -                      -     -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	machines := kind(t, "machines")
	p := mustPrinter(t, "")
	p.noHeaders, p.showLabels = true, true
	out, _ := render(t, p, []group{{r: machines, items: testMachines[:1]}}, false)
	if strings.HasPrefix(out, "UUID") || !strings.HasSuffix(out, "   rack=r2\n") {
		t.Errorf("--no-headers --show-labels:\n%s", out)
	}
	out, _ = render(t, mustPrinter(t, "wide"), []group{{r: machines, items: testMachines}}, false)
	if head := strings.SplitN(out, "\n", 2)[0]; !regexpMatch(head, `LAST SEEN +NODE +MAC +CONTROL PLANE +UPGRADE INDEX +REGISTERED$`) ||
		!strings.Contains(out, "node-1") {
		t.Errorf("-o wide:\n%s", out)
	}
	// several kinds: a table each, names prefixed with the kind
	pools := kind(t, "pools")
	out, _ = render(t, mustPrinter(t, ""), []group{{r: pools, items: []map[string]any{obj(`{"name":"workers","cluster":"prod"}`)}},
		{r: machines, items: testMachines[:1]}}, false)
	if !strings.HasPrefix(out, "NAME           CLUSTER   LATEST") || !strings.Contains(out, "\npool/workers   prod      -") ||
		!strings.Contains(out, "\n\nUUID         HOSTNAME") || !strings.Contains(out, "\nmachine/u2   w2 ") {
		t.Errorf("two kinds:\n%s", out)
	}
	// nothing: kubectl's note on stderr, nothing on stdout
	out, errOut := render(t, mustPrinter(t, ""), []group{{r: pools}}, false)
	if out != "" || errOut != "No resources found.\n" {
		t.Errorf("empty: %q %q", out, errOut)
	}
}

// Several objects print as one kubectl List in JSON and YAML (never as
// concatenated objects or one document with duplicate keys); one object
// asked for by name prints alone.
func TestListOutput(t *testing.T) {
	machines, pools := kind(t, "machines"), kind(t, "pools")
	two := []group{{r: pools, items: []map[string]any{obj(`{"name":"workers"}`)}}, {r: machines, items: testMachines[:2]}}

	out, _ := render(t, mustPrinter(t, "json"), two, false)
	var l struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&l); err != nil || l.APIVersion != "v1" || l.Kind != "List" || len(l.Items) != 3 || l.Items[0]["name"] != "workers" {
		t.Fatalf("-o json: %+v %v\n%s", l, err, out)
	}
	if dec.More() {
		t.Fatalf("-o json wrote more than one value:\n%s", out)
	}

	out, _ = render(t, mustPrinter(t, "yaml"), two, false)
	var y struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	if err := yaml.UnmarshalStrict([]byte(out), &y); err != nil || y.Kind != "List" || len(y.Items) != 3 || strings.Contains(out, "\n---") {
		t.Fatalf("-o yaml: %+v %v\n%s", y, err, out)
	}
	// a list of one is a List too; an object named is itself
	out, _ = render(t, mustPrinter(t, "json"), []group{{r: machines, items: testMachines[:1]}}, false)
	if !strings.Contains(out, `"kind": "List"`) {
		t.Errorf("a list of one: %s", out)
	}
	out, _ = render(t, mustPrinter(t, "yaml"), []group{{r: machines, items: testMachines[:1]}}, true)
	if !strings.HasPrefix(out, "current_revision: 2\n") || strings.Contains(out, "List") {
		t.Errorf("one object: %s", out)
	}
	out, _ = render(t, mustPrinter(t, "yaml"), []group{{r: pools}}, false)
	if out != "apiVersion: v1\nitems: []\nkind: List\n" {
		t.Errorf("empty yaml: %q", out)
	}
	out, _ = render(t, mustPrinter(t, "name"), two, false)
	if out != "pool/workers\nmachine/u2\nmachine/u1\n" {
		t.Errorf("-o name: %q", out)
	}
}

func TestJSONPathAndCustomColumns(t *testing.T) {
	machines := kind(t, "machines")
	g := []group{{r: machines, items: testMachines}}
	for spec, want := range map[string]string{
		`jsonpath={.items[*].uuid}`: "u2 u1 u3",
		`jsonpath={range .items[?(@.upgrade_index > 5)]}{.hostname}{"\n"}{end}`: "w1\n",
		`jsonpath={.items[0].labels}`:                                           `{"rack":"r2"}`,
		`jsonpath-as-json={.items[*].upgrade_index}`:                            "[\n    3,\n    10\n]\n",
		`custom-columns=HOST:.hostname,RACK:{.labels.rack},IDX:upgrade_index`:   "HOST     RACK     IDX\nw2       r2       3\nw1       r1       10\n<none>   <none>   <none>\n",
	} {
		if out, _ := render(t, mustPrinter(t, spec), g, false); out != want {
			t.Errorf("-o %s:\n%q\nwant\n%q", spec, out, want)
		}
	}
	// one object: the template sees the object, not a List
	if out, _ := render(t, mustPrinter(t, "jsonpath={.hostname}"), []group{{r: machines, items: testMachines[:1]}}, true); out != "w2" {
		t.Errorf("jsonpath of one: %q", out)
	}
	dir := t.TempDir()
	cf := filepath.Join(dir, "cols")
	_ = os.WriteFile(cf, []byte("HOST   STATUS\n.hostname   {.status}\n"), 0o600)
	jf := filepath.Join(dir, "tmpl")
	_ = os.WriteFile(jf, []byte(`{range .items[*]}{.status}{" "}{end}`), 0o600)
	p := mustPrinter(t, "custom-columns-file="+cf)
	p.noHeaders = true
	if out, _ := render(t, p, g, false); out != "w2       ready\nw1       ready\n<none>   pending\n" {
		t.Errorf("custom-columns-file --no-headers: %q", out)
	}
	if out, _ := render(t, mustPrinter(t, "jsonpath-file="+jf), g, false); out != "ready ready pending " {
		t.Errorf("jsonpath-file: %q", out)
	}
	for _, bad := range []string{"jsonpath", "jsonpath=", "jsonpath={.a", "custom-columns=A", "custom-columns=A:{{x}}", "jsonpath-file=" + filepath.Join(dir, "none"), "xml"} {
		if _, err := parseOutput(bad, os.ReadFile); err == nil {
			t.Errorf("-o %s accepted", bad)
		}
	}
	if _, err := parseColumnsFile("A B\n.a\n"); err == nil {
		t.Error("a columns file with a missing path accepted")
	}
}

func TestSortBy(t *testing.T) {
	machines := kind(t, "machines")
	ids := func(spec, sortBy string) string {
		p := mustPrinter(t, spec)
		if err := p.setSortBy(sortBy); err != nil {
			t.Fatal(err)
		}
		out, _ := render(t, p, []group{{r: machines, items: testMachines}}, false)
		return strings.TrimSpace(out)
	}
	// numbers by value (3 < 10, not "10" < "3"), the missing first
	if got := ids("jsonpath={.items[*].uuid}", ".upgrade_index"); got != "u3 u2 u1" {
		t.Errorf("--sort-by .upgrade_index: %q", got)
	}
	if got := ids("name", "{.hostname}"); got != "machine/u3\nmachine/u1\nmachine/u2" {
		t.Errorf("--sort-by {.hostname}: %q", got)
	}
	if got := ids("custom-columns=ID:.uuid", "labels.rack"); got != "ID\nu3\nu1\nu2" {
		t.Errorf("--sort-by labels.rack: %q", got)
	}
	p := mustPrinter(t, "json")
	if err := p.setSortBy("{.labels}x"); err == nil {
		t.Error("a bad --sort-by accepted")
	}
	_ = p.setSortBy(".labels.*")
	if err := p.print(&bytes.Buffer{}, []group{{r: machines, items: testMachines}}, false); err == nil || !strings.Contains(err.Error(), "must find one") {
		t.Errorf("--sort-by finding two values: %v", err)
	}
	for in, want := range map[string]string{".a.b": "{.a.b}", "a.b": "{.a.b}", "{.a}": "{.a}", "{a[0]}": "{.a[0]}"} {
		if got, err := relaxedJSONPath(in); err != nil || got != want {
			t.Errorf("relaxedJSONPath(%q) = %q %v", in, got, err)
		}
	}
}

func TestParseTargets(t *testing.T) {
	show := func(reqs []request) string {
		var parts []string
		for _, q := range reqs {
			parts = append(parts, q.r.Plural+"["+strings.Join(q.names, " ")+"]")
		}
		return strings.Join(parts, ",")
	}
	for _, c := range []struct {
		args   []string
		want   string
		single bool
	}{
		{[]string{"pools"}, "pools[]", false},
		{[]string{"mp", "workers"}, "pools[workers]", true},
		{[]string{"pool", "a", "b"}, "pools[a b]", false},
		{[]string{"pools,machines"}, "pools[],machines[]", false},
		{[]string{"pools,mp,cl"}, "pools[],clusters[]", false},
		{[]string{"pool/workers"}, "pools[workers]", true},
		{[]string{"pool/a", "cluster/prod", "mp/b"}, "pools[a b],clusters[prod]", false},
	} {
		reqs, err := parseTargets(c.args)
		if err != nil || show(reqs) != c.want || single(reqs) != c.single {
			t.Errorf("%v: %s %v (single %v), want %s", c.args, show(reqs), err, single(reqs), c.want)
		}
	}
}

func TestVersionLine(t *testing.T) {
	if got := versionLine(obj(`{"version":"0.2.0","git_commit":"0123456789abcdef0123","go_version":"go1.26.0"}`)); got != "0.2.0 (commit 0123456789ab, go1.26.0)" {
		t.Errorf("versionLine: %q", got)
	}
	if got := versionLine(obj(`{}`)); got != "unknown" {
		t.Errorf("versionLine of nothing: %q", got)
	}
	v := clientVersion()
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("clientVersion: %+v", v)
	}
	old := Version
	Version = "9.9.9"
	defer func() { Version = old }()
	var b bytes.Buffer
	if err := printVersions(&b, mustPrinter(t, "json"), structToMap(clientVersion()), nil); err != nil || !strings.Contains(b.String(), `"version": "9.9.9"`) ||
		strings.Contains(b.String(), "serverVersion") {
		t.Errorf("version -o json: %s %v", b.String(), err)
	}
}
