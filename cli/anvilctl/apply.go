package anvilctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// manifest is one YAML document of an apply file.
type manifest struct {
	Kind   string
	Name   string // name, or the machine's UUID
	Fields map[string]any
	Source string // file and document number, for messages
}

// splitDocuments splits a YAML stream at lines that are exactly "---".
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			docs = append(docs, slices.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimRight(line, " \t") == "---" {
			flush()
			continue
		}
		cur.WriteString(line + "\n")
	}
	flush()
	return docs
}

// parseManifests reads pool, cluster and machine manifests: YAML (or JSON)
// documents, each with a kind field.
func parseManifests(name string, data []byte) ([]manifest, error) {
	var out []manifest
	for i, doc := range splitDocuments(data) {
		src := fmt.Sprintf("%s (document %d)", name, i+1)
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		var fields map[string]any
		if err := decode(js, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("%s: must be a mapping with a kind field", src)
		}
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
				return nil, fmt.Errorf("%s: a %s needs a name", src, m.Kind)
			}
		case "machine":
			m.Name, _ = fields["uuid"].(string)
			if m.Name == "" {
				return nil, fmt.Errorf("%s: a machine needs its uuid", src)
			}
			m.Name = strings.ToLower(m.Name)
			fields["uuid"] = m.Name
		case "":
			return nil, fmt.Errorf("%s: no kind (Pool, Cluster or Machine)", src)
		default:
			return nil, fmt.Errorf("%s: kind %q cannot be applied: Pool, Cluster or Machine", src, kind)
		}
		out = append(out, m)
	}
	return out, nil
}

type applyOptions struct {
	Files         []string
	Apply         bool
	Watch         bool
	RotateSecrets bool
}

func (a *app) applyCmd() *cobra.Command {
	o := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply -f <file.yaml>",
		Short: "Create or update pools, clusters and machines from manifests (kind: Pool, Cluster or Machine)",
		Long: "apply creates each object that does not exist and changes the ones that do, in file order\n" +
			"(put clusters before their pools). A pool change that needs a reboot makes a new revision;\n" +
			"with --apply it is also rolled out (Save & Apply). Use -f - for standard input.",
		Example: `  anvilctl apply -f fleet.yaml
  anvilctl apply -f pool.yaml --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.Files) == 0 {
				return fmt.Errorf("name a file with -f (or -f - for standard input)")
			}
			var all []manifest
			for _, f := range o.Files {
				var data []byte
				var err error
				if f == "-" {
					data, err = io.ReadAll(a.env.Stdin)
				} else {
					data, err = os.ReadFile(f)
				}
				if err != nil {
					return err
				}
				ms, err := parseManifests(f, data)
				if err != nil {
					return err
				}
				all = append(all, ms...)
			}
			var started []string // the rollouts the applies started, to --watch
			for _, m := range all {
				msg, obj, err := a.applyOne(cmd.Context(), m, o)
				if err != nil {
					return fmt.Errorf("%s/%s: %w", m.Kind, m.Name, err)
				}
				if id := str(obj["rollout"]); id != "" {
					started = append(started, id)
				}
				if a.output != FormatTable {
					if err := printValue(cmd.OutOrStdout(), a.output, obj); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s %s\n", m.Kind, m.Name, msg)
			}
			if o.Watch {
				// One after another: each ends before the next is shown.
				for _, id := range started {
					if err := a.watchStarted(cmd.Context(), id, cmd.OutOrStdout()); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&o.Files, "filename", "f", nil, "manifest file(s), YAML or JSON, several documents separated by ---")
	cmd.Flags().BoolVar(&o.Apply, "apply", false, "pools: also roll the saved revision out (Save & Apply)")
	cmd.Flags().BoolVarP(&o.Watch, "watch", "w", false, "with --apply: follow the rollouts started live until they end (as rollout status --watch)")
	cmd.Flags().BoolVar(&o.RotateSecrets, "rotate-secrets", false, "clusters that exist: also replace the kubeconfig and bootstrap token given (they are sealed and cannot be compared)")
	return cmd
}

func (a *app) applyOne(ctx context.Context, m manifest, o *applyOptions) (string, map[string]any, error) {
	switch m.Kind {
	case "pool":
		return a.applyPool(ctx, m, o)
	case "cluster":
		return a.applyCluster(ctx, m, o)
	default:
		return a.applyMachine(ctx, m)
	}
}

func (a *app) send(ctx context.Context, method, path string, body any, etag string) (map[string]any, error) {
	var hdr map[string]string
	if etag != "" {
		hdr = map[string]string{"If-Match": etag}
	}
	res, err := a.c.do(ctx, method, path, nil, body, hdr)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if len(bytes.TrimSpace(res.Body)) > 0 {
		if err := decode(res.Body, &v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (a *app) applyPool(ctx context.Context, m manifest, o *applyOptions) (string, map[string]any, error) {
	one, err := a.c.orgPath("/pools/%s", m.Name)
	if err != nil {
		return "", nil, err
	}
	body := maps.Clone(m.Fields)
	if o.Apply {
		body["apply"] = true
	}
	_, res, err := a.c.get(ctx, one, nil)
	if isStatus(err, 404) {
		list, _ := a.c.orgPath("/pools")
		out, err := a.send(ctx, "POST", list, body, "")
		if err != nil {
			return "", nil, err
		}
		return "created" + poolNote(out), out, nil
	}
	if err != nil {
		return "", nil, err
	}
	delete(body, "cluster") // a pool never moves between clusters
	out, err := a.send(ctx, "PUT", one, body, res.Header.Get("ETag"))
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

func (a *app) applyCluster(ctx context.Context, m manifest, o *applyOptions) (string, map[string]any, error) {
	one, err := a.c.orgPath("/clusters/%s", m.Name)
	if err != nil {
		return "", nil, err
	}
	cur, res, err := a.c.get(ctx, one, nil)
	if isStatus(err, 404) {
		list, _ := a.c.orgPath("/clusters")
		out, err := a.send(ctx, "POST", list, m.Fields, "")
		return "created", out, err
	}
	if err != nil {
		return "", nil, err
	}
	etag := res.Header.Get("ETag")
	patch := map[string]any{}
	for _, k := range []string{"api_endpoint", "kubernetes_version", "ca_cert_hash"} {
		if v, ok := m.Fields[k]; ok && str(v) != str(cur[k]) {
			patch[k] = v
		}
	}
	var done []string
	out := cur
	if len(patch) > 0 {
		if out, err = a.send(ctx, "PATCH", one, patch, etag); err != nil {
			return "", nil, err
		}
		if c, ok := out["cluster"].(map[string]any); ok {
			out = c
		}
		etag = ""
		done = append(done, "configured")
	}
	skipped := []string{}
	for _, s := range []struct{ field, path string }{{"kubeconfig", "/kubeconfig"}, {"bootstrap_token", "/bootstrap-token"}} {
		v, ok := m.Fields[s.field]
		if !ok {
			continue
		}
		if !o.RotateSecrets {
			skipped = append(skipped, s.field)
			continue
		}
		if out, err = a.send(ctx, "PUT", one+s.path, map[string]any{s.field: v}, etag); err != nil {
			return "", nil, err
		}
		etag = ""
		done = append(done, s.field+" replaced")
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

func (a *app) applyMachine(ctx context.Context, m manifest) (string, map[string]any, error) {
	one, err := a.c.orgPath("/machines/%s", m.Name)
	if err != nil {
		return "", nil, err
	}
	cur, res, err := a.c.get(ctx, one, nil)
	if isStatus(err, 404) {
		list, _ := a.c.orgPath("/machines")
		out, err := a.send(ctx, "POST", list, m.Fields, "")
		return "created (pre-registered)", out, err
	}
	if err != nil {
		return "", nil, err
	}
	for k := range m.Fields {
		switch k {
		case "uuid", "hostname", "labels", "upgrade_index", "control_plane", "pool":
		default:
			return "", nil, fmt.Errorf("%s: field %q cannot be applied to a machine (uuid, hostname, labels, pool, upgrade_index, control_plane)", m.Source, k)
		}
	}
	patch := map[string]any{}
	for _, k := range []string{"hostname", "labels", "upgrade_index", "control_plane"} {
		v, ok := m.Fields[k]
		if !ok || sameJSON(v, cur[k]) {
			continue
		}
		patch[k] = v
	}
	var done []string
	out := cur
	etag := res.Header.Get("ETag")
	if len(patch) > 0 {
		if out, err = a.send(ctx, "PATCH", one, patch, etag); err != nil {
			return "", nil, err
		}
		etag = ""
		done = append(done, "configured")
	}
	if p, ok := m.Fields["pool"].(string); ok && p != "" && p != str(cur["pool"]) {
		if out, err = a.send(ctx, "POST", one+"/assign", map[string]any{"pool": p}, etag); err != nil {
			return "", nil, err
		}
		done = append(done, "assigned to "+p)
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
