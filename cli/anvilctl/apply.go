package anvilctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/anvil-fleet/anvil/client"
)

// manifest is one object of an apply file.
type manifest struct {
	Kind string
	Name string // name, or the machine's UUID
	// Fields are the manifest as written (without kind and apiVersion):
	// which fields it sets, for diff and for the changes apply makes.
	Fields map[string]any
	// Request is the manifest read into the client's request type:
	// *client.PoolCreate, *client.ClusterCreate or
	// *client.MachinePreregister.
	Request any
	Source  string // file and document number, for messages
}

// documents splits a manifest file into its documents, as JSON: a YAML
// stream (documents separated by ---, comments allowed after it) read with
// apimachinery's YAML reader, or a stream of JSON values. An empty
// document (nothing, or only comments) comes back as nil; its place is
// kept so that the numbers in messages match the file.
func documents(data []byte) ([][]byte, error) {
	_, _, isJSON := utilyaml.GuessJSONStream(bytes.NewReader(data), 4096)
	var docs [][]byte
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			if err != nil {
				return docs, fmt.Errorf("document %d: %w", len(docs)+1, err)
			}
			docs = append(docs, raw)
		}
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return docs, fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			js = nil
		}
		docs = append(docs, js)
	}
}

// parseManifests reads pool, cluster and machine manifests: YAML (or JSON)
// documents, each with a kind field, or a kind: List of them.
func parseManifests(name string, data []byte) ([]manifest, error) {
	docs, err := documents(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var out []manifest
	for i, doc := range docs {
		if doc == nil {
			continue // an empty document
		}
		src := fmt.Sprintf("%s (document %d)", name, i+1)
		var v any
		if err := decode(doc, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		fields, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: must be a mapping with a kind field", src)
		}
		if k, _ := fields["kind"].(string); strings.EqualFold(k, "List") {
			items, ok := fields["items"].([]any)
			if !ok {
				return nil, fmt.Errorf("%s: a List needs items", src)
			}
			for j, it := range items {
				f, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s, item %d: must be a mapping with a kind field", src, j+1)
				}
				m, err := toManifest(fmt.Sprintf("%s, item %d", src, j+1), f)
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
			continue
		}
		m, err := toManifest(src, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func toManifest(src string, fields map[string]any) (manifest, error) {
	kind, _ := fields["kind"].(string)
	delete(fields, "kind")
	delete(fields, "apiVersion")
	m := manifest{Kind: strings.ToLower(kind), Fields: fields, Source: src}
	switch m.Kind {
	case "pool", "machinepool", "cluster":
		if m.Kind == "machinepool" {
			m.Kind = "pool"
		}
		m.Name, _ = fields["name"].(string)
		if m.Name == "" {
			return m, fmt.Errorf("%s: a %s needs a name", src, m.Kind)
		}
	case "machine":
		m.Name, _ = fields["uuid"].(string)
		if m.Name == "" {
			return m, fmt.Errorf("%s: a machine needs its uuid", src)
		}
		m.Name = strings.ToLower(m.Name)
		fields["uuid"] = m.Name
	case "":
		return m, fmt.Errorf("%s: no kind (Pool, Cluster or Machine)", src)
	default:
		return m, fmt.Errorf("%s: kind %q cannot be applied: Pool, Cluster or Machine", src, kind)
	}
	switch m.Kind {
	case "pool":
		m.Request = &client.PoolCreate{}
	case "cluster":
		m.Request = &client.ClusterCreate{}
	default:
		m.Request = &client.MachinePreregister{}
	}
	if err := decodeStrict(fields, m.Request, kindTitle(m.Kind)); err != nil {
		return m, fmt.Errorf("%s: %w", src, err)
	}
	return m, nil
}

// decodeStrict reads a manifest's fields into the client's request type as
// strictly as the API reads a body: a field the type does not have is an
// error naming it (a Machine's with the fields it has), and so is a value
// of the wrong type.
func decodeStrict(fields map[string]any, v any, kind string) error {
	t := reflect.TypeOf(v).Elem()
	if path := unknownField(fields, t, ""); path != "" {
		if strings.ContainsAny(path, ".[") {
			return fmt.Errorf("unknown field %q", path)
		}
		return fmt.Errorf("unknown field %q: a %s has %s", path, kind, strings.Join(jsonFieldNames(t), ", "))
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// the path without the Go names of embedded structs
			var path []string
			for _, p := range strings.Split(te.Field, ".") {
				if p != "" && !unicode.IsUpper(rune(p[0])) {
					path = append(path, p)
				}
			}
			return fmt.Errorf("%s: must be %s, not %s", strings.Join(path, "."), te.Type, te.Value)
		}
		return err
	}
	return nil
}

// unknownField is the path of the first field of v (decoded JSON) that
// type t does not have, or "".
func unknownField(v any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		switch {
		case t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]():
			fields := jsonFields(t)
			for _, k := range keys {
				ft, ok := fields[k]
				if !ok {
					return join(k)
				}
				if p := unknownField(x[k], ft, join(k)); p != "" {
					return p
				}
			}
		case t.Kind() == reflect.Map:
			for _, k := range keys {
				if p := unknownField(x[k], t.Elem(), join(k)); p != "" {
					return p
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, e := range x {
				if p := unknownField(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

// jsonFields are a struct's JSON fields, its embedded structs' included,
// as encoding/json reads them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			maps.Copy(out, jsonFields(f.Type))
		case name == "":
			out[f.Name] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

// jsonFieldNames are a struct's JSON field names in the order it declares
// them.
func jsonFieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFieldNames(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// manifestFiles expands -f: a file as it is, a directory's .yaml, .yml and
// .json files (with -R, its subdirectories' too), in name order; "-" is
// standard input.
func manifestFiles(names []string, recursive bool) ([]string, error) {
	var out []string
	for _, n := range names {
		if n == "-" {
			out = append(out, n)
			continue
		}
		fi, err := os.Stat(n)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			out = append(out, n)
			continue
		}
		var found []string
		err = filepath.WalkDir(n, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != n && !recursive {
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json file%s", n, map[bool]string{false: " (-R reads its subdirectories too)", true: ""}[recursive])
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// readManifests reads every manifest -f names.
func (a *app) readManifests(files []string, recursive bool) ([]manifest, error) {
	if len(files) == 0 {
		return nil, usageErr(fmt.Errorf("name a file with -f (or -f - for standard input)"))
	}
	names, err := manifestFiles(files, recursive)
	if err != nil {
		return nil, err
	}
	var all []manifest
	for _, f := range names {
		var data []byte
		if f == "-" {
			data, err = io.ReadAll(a.env.Stdin)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		ms, err := parseManifests(f, data)
		if err != nil {
			return nil, err
		}
		all = append(all, ms...)
	}
	return all, nil
}

type applyOptions struct {
	Files         []string
	Recursive     bool
	Apply         bool
	Watch         bool
	RotateSecrets bool
	DryRun        string
}

// Dry-run modes.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

func (a *app) applyCmd() *cobra.Command {
	o := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply -f <file.yaml|dir> [-R]",
		Short: "Create or update pools, clusters and machines from manifests (kind: Pool, Cluster or Machine)",
		Long: "apply creates each object that does not exist and changes the ones that do, in file order\n" +
			"(put clusters before their pools). A pool change that needs a reboot makes a new revision;\n" +
			"with --apply it is also rolled out (Save & Apply). Use -f - for standard input, -f dir/ for a\n" +
			"directory's .yaml, .yml and .json files (-R: and its subdirectories').\n\n" +
			"--dry-run=client and --dry-run=server read the objects from the server and say what apply would\n" +
			"do, writing nothing. The API has no dry run of its own, so both compare on the client: what the\n" +
			"server alone would refuse (a bad value, a missing cluster) is not found.",
		Example: `  anvilctl apply -f fleet.yaml
  anvilctl apply -f pool.yaml --apply --watch
  anvilctl apply -R -f manifests/
  anvilctl apply -f fleet.yaml --dry-run=server`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.DryRun {
			case dryRunNone, dryRunClient, dryRunServer:
			default:
				return usageErr(fmt.Errorf("--dry-run %q: must be none, client or server", o.DryRun))
			}
			if o.Watch && !o.Apply {
				return usageErr(fmt.Errorf("--watch follows the rollouts --apply starts: pass --apply too"))
			}
			all, err := a.readManifests(o.Files, o.Recursive)
			if err != nil {
				return err
			}
			p, err := a.printerFor(cmd, nil)
			if err != nil {
				return err
			}
			if o.Watch && !p.human() {
				return usageErr(fmt.Errorf("--watch writes for people: leave out -o"))
			}
			w := cmd.OutOrStdout()
			if o.DryRun != dryRunNone {
				return a.dryRun(cmd.Context(), w, p, all, o)
			}
			var started []string // the rollouts the applies started, to --watch
			var groups []group
			for _, m := range all {
				msg, obj, err := a.applyOne(cmd.Context(), m, o)
				if err != nil {
					return fmt.Errorf("%s/%s: %w", m.Kind, m.Name, err)
				}
				if id := str(obj["rollout"]); id != "" {
					started = append(started, id)
				}
				switch {
				case p.human():
					fmt.Fprintf(w, "%s/%s %s\n", m.Kind, m.Name, msg)
				case p.format == FormatName:
					fmt.Fprintf(w, "%s/%s\n", m.Kind, m.Name)
				default:
					if obj == nil {
						obj = map[string]any{}
					}
					r, _ := lookupResource(m.Kind)
					groups = append(groups, group{r: r, items: []map[string]any{obj}})
				}
			}
			if len(groups) > 0 {
				if err := p.print(w, groups, len(all) == 1); err != nil {
					return err
				}
			}
			if o.Watch {
				// One after another: each ends before the next is shown.
				for _, id := range started {
					if err := a.watchStarted(cmd.Context(), id, w); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.Files, "filename", "f", nil, "manifest file(s) or directories, YAML or JSON; repeat or comma-separate; - is standard input")
	f.BoolVarP(&o.Recursive, "recursive", "R", false, "-f directories: also their subdirectories")
	f.BoolVar(&o.Apply, "apply", false, "pools: also roll the saved revision out (Save & Apply)")
	f.BoolVarP(&o.Watch, "watch", "w", false, "with --apply: follow the rollouts started live until they end (as rollout status --watch)")
	f.BoolVar(&o.RotateSecrets, "rotate-secrets", false, "clusters that exist: also replace the kubeconfig and bootstrap token given (they are sealed and cannot be compared)")
	f.StringVar(&o.DryRun, "dry-run", dryRunNone, "none, or client or server: say what would change and write nothing (both compare on the client: the API has no dry run)")
	f.Lookup("dry-run").NoOptDefVal = dryRunClient
	return cmd
}

// dryRun says what apply would do, writing nothing.
func (a *app) dryRun(ctx context.Context, w io.Writer, p *printer, all []manifest, o *applyOptions) error {
	var groups []group
	for _, m := range all {
		pl, err := a.plan(ctx, m, o)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", m.Kind, m.Name, err)
		}
		switch {
		case p.human():
			fmt.Fprintf(w, "%s/%s %s\n", m.Kind, m.Name, pl.summary(o))
		case p.format == FormatName:
			fmt.Fprintf(w, "%s/%s\n", m.Kind, m.Name)
		default:
			obj := maps.Clone(pl.desired)
			obj["kind"] = kindTitle(m.Kind)
			r, _ := lookupResource(m.Kind)
			groups = append(groups, group{r: r, items: []map[string]any{obj}})
		}
	}
	if len(groups) == 0 {
		return nil
	}
	return p.print(w, groups, len(all) == 1)
}

func kindTitle(k string) string {
	if k == "" {
		return k
	}
	return strings.ToUpper(k[:1]) + k[1:]
}

func (a *app) applyOne(ctx context.Context, m manifest, o *applyOptions) (string, map[string]any, error) {
	c, err := a.org()
	if err != nil {
		return "", nil, err
	}
	switch m.Kind {
	case "pool":
		return applyPool(ctx, c, m, o)
	case "cluster":
		return applyCluster(ctx, c, m, o)
	default:
		return applyMachine(ctx, c, m)
	}
}

func applyPool(ctx context.Context, c *client.Client, m manifest, o *applyOptions) (string, map[string]any, error) {
	req := *m.Request.(*client.PoolCreate)
	req.Apply = req.Apply || o.Apply
	cur, err := call(c.GetPool(ctx, m.Name))
	if isStatus(err, http.StatusNotFound) {
		out, err := asMap(c.CreatePool(ctx, req))
		if err != nil {
			return "", nil, err
		}
		return "created" + poolNote(out), out, nil
	}
	if err != nil {
		return "", nil, err
	}
	// a pool never moves between clusters: an update names none
	out, err := asMap(c.UpdatePool(ctx, m.Name, client.PoolUpdate{PoolSpec: req.PoolSpec, Message: req.Message, Apply: req.Apply},
		client.IfMatch(cur.Version)))
	if err != nil {
		return "", nil, err
	}
	if changed, _ := out["changed"].(bool); !changed && out["apply_requested"] == nil {
		return "unchanged", out, nil
	}
	return "configured" + poolNote(out), out, nil
}

func poolNote(out map[string]any) string {
	var notes []string
	if n := str(out["revision_created"]); n != "" {
		notes = append(notes, "revision "+n)
	}
	if n := str(out["apply_requested"]); n != "" {
		what := "rolling out revision " + n
		if b, _ := out["rollback"].(bool); b {
			what = "rolling back to revision " + n
		}
		what += rolloutNote(str(out["rollout"]))
		notes = append(notes, what)
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

// clusterSecrets are a cluster's sealed fields: never returned, so never
// compared.
var clusterSecrets = []string{"kubeconfig", "bootstrap_token"}

// clusterCompared are the cluster fields apply compares and patches.
var clusterCompared = []string{"api_endpoint", "kubernetes_version", "ca_cert_hash"}

func applyCluster(ctx context.Context, c *client.Client, m manifest, o *applyOptions) (string, map[string]any, error) {
	req := m.Request.(*client.ClusterCreate)
	cur, err := call(c.GetCluster(ctx, m.Name))
	if isStatus(err, http.StatusNotFound) {
		out, err := asMap(c.CreateCluster(ctx, *req))
		return "created", out, err
	}
	if err != nil {
		return "", nil, err
	}
	out := structToMap(cur)
	version := cur.Version // the first write is conditional on the object read
	var patch client.ClusterPatch
	changed := false
	for _, k := range clusterCompared {
		if v, ok := m.Fields[k]; !ok || str(v) == str(out[k]) {
			continue
		}
		changed = true
		switch k {
		case "api_endpoint":
			patch.APIEndpoint = &req.APIEndpoint
		case "kubernetes_version":
			patch.KubernetesVersion = &req.KubernetesVersion
		case "ca_cert_hash":
			patch.CACertHash = &req.CACertHash
		}
	}
	var done []string
	if changed {
		ch, err := call(c.UpdateCluster(ctx, m.Name, patch, client.IfMatch(version)))
		if err != nil {
			return "", nil, err
		}
		out, version = structToMap(ch.Cluster), 0
		done = append(done, "configured")
	}
	skipped := []string{}
	for _, s := range clusterSecrets {
		if _, ok := m.Fields[s]; !ok {
			continue
		}
		if !o.RotateSecrets {
			skipped = append(skipped, s)
			continue
		}
		if s == "kubeconfig" {
			out, err = asMap(c.RotateClusterKubeconfig(ctx, m.Name, req.Kubeconfig, client.IfMatch(version)))
		} else {
			out, err = asMap(c.RotateClusterBootstrapToken(ctx, m.Name, req.BootstrapToken, client.IfMatch(version)))
		}
		if err != nil {
			return "", nil, err
		}
		version = 0
		done = append(done, s+" replaced")
	}
	msg := "unchanged"
	if len(done) > 0 {
		msg = strings.Join(done, ", ")
	}
	if len(skipped) > 0 {
		msg += " (" + strings.Join(skipped, " and ") + " kept: pass --rotate-secrets to replace)"
	}
	return msg, out, nil
}

// machineFields are the fields a machine manifest may have (those of
// client.MachinePreregister).
var machineFields = jsonFieldNames(reflect.TypeFor[client.MachinePreregister]())

func applyMachine(ctx context.Context, c *client.Client, m manifest) (string, map[string]any, error) {
	req := m.Request.(*client.MachinePreregister)
	cur, err := call(c.GetMachine(ctx, m.Name))
	if isStatus(err, http.StatusNotFound) {
		out, err := asMap(c.PreregisterMachine(ctx, *req))
		return "created (pre-registered)", out, err
	}
	if err != nil {
		return "", nil, err
	}
	out := structToMap(cur)
	// the fields the manifest sets that differ
	var patch client.MachinePatch
	changed := false
	for _, k := range []string{"hostname", "labels", "upgrade_index", "control_plane"} {
		if v, ok := m.Fields[k]; !ok || sameJSON(v, out[k]) {
			continue
		}
		changed = true
		switch k {
		case "hostname":
			patch.Hostname = &req.Hostname
		case "labels":
			patch.Labels = &req.Labels
		case "upgrade_index":
			patch.UpgradeIndex = &req.UpgradeIndex
		case "control_plane":
			patch.ControlPlane = &req.ControlPlane
		}
	}
	var done []string
	version := cur.Version // the first write is conditional on the object read
	if changed {
		if out, err = asMap(c.UpdateMachine(ctx, m.Name, patch, client.IfMatch(version))); err != nil {
			return "", nil, err
		}
		version = 0
		done = append(done, "configured")
	}
	if req.Pool != "" && req.Pool != cur.Pool {
		if out, err = asMap(c.AssignMachine(ctx, m.Name, req.Pool, client.IfMatch(version))); err != nil {
			return "", nil, err
		}
		done = append(done, "assigned to "+req.Pool)
	}
	if len(done) == 0 {
		return "unchanged", out, nil
	}
	return strings.Join(done, ", "), out, nil
}

// sameJSON compares a manifest value with the server's, treating absent
// and empty alike.
func sameJSON(a, b any) bool {
	norm := func(v any) any {
		j, _ := json.Marshal(v)
		var out any
		_ = decode(j, &out)
		switch x := out.(type) {
		case nil:
			return nil
		case map[string]any:
			if len(x) == 0 {
				return nil
			}
		case string:
			if x == "" {
				return nil
			}
		case bool:
			if !x {
				return nil
			}
		case json.Number:
			if x.String() == "0" {
				return nil
			}
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
