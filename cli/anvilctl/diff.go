package anvilctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// plan is what apply would do to one manifest's object, found by reading
// it and comparing on the client (the API has no dry run).
type plan struct {
	m      manifest
	exists bool
	// live is the object as the server has it, limited to what the
	// manifest sets (a pool: its whole spec); nil when it does not exist.
	live map[string]any
	// desired is the manifest, spelt as the server spells what it keeps
	// the same (15m as 15m0s, 1 as "1"), so that only real changes differ.
	desired map[string]any
	changed bool
	// reboot: a pool change that makes a new revision (its machines reboot
	// when it is rolled out).
	reboot bool
	notes  []string
}

// summary is the dry run's line for people.
func (pl *plan) summary(o *applyOptions) string {
	var s string
	switch {
	case !pl.exists:
		s = "created (dry run)"
		if pl.m.Kind == "pool" && o.Apply {
			s += ": revision 1, rolled out"
		}
	case pl.changed:
		s = "configured (dry run)"
		if pl.m.Kind == "pool" {
			if pl.reboot {
				s += ": a new revision"
				if o.Apply {
					s += ", rolled out"
				}
			} else {
				s += ": settings only, no new revision"
			}
		}
	default:
		s = "unchanged (dry run)"
	}
	if len(pl.notes) > 0 {
		s += " (" + strings.Join(pl.notes, "; ") + ")"
	}
	return s
}

// Pool rollout defaults the revisions service fills in when a manifest
// leaves them out (services/revisions/domain/pool/rollout.go), so that a
// manifest without them does not look like a change.
var poolRolloutDefaults = map[string]any{"max_unavailable": json.Number("1"), "drain_timeout": "15m", "node_ready_timeout": "2h"}

// poolSettings are a pool's fields that need no reboot (no new revision);
// every other field of its spec does.
var poolSettings = []string{"name", "cluster", "display_name", "rollout", "auto_apply_platform_revisions"}

// plan reads the manifest's object and compares.
func (a *app) plan(ctx context.Context, m manifest, o *applyOptions) (*plan, error) {
	pl := &plan{m: m}
	c, err := a.org()
	if err != nil {
		return nil, err
	}
	var cur map[string]any
	switch m.Kind {
	case "pool":
		cur, err = asMap(c.GetPool(ctx, m.Name))
	case "cluster":
		cur, err = asMap(c.GetCluster(ctx, m.Name))
	default:
		cur, err = asMap(c.GetMachine(ctx, m.Name))
	}
	switch {
	case isStatus(err, http.StatusNotFound):
		cur = nil
	case err != nil:
		return nil, err
	default:
		pl.exists = true
	}
	desired := maps.Clone(m.Fields)
	switch m.Kind {
	case "pool":
		delete(desired, "apply")
		delete(desired, "message")
		if r, ok := desired["rollout"].(map[string]any); ok || desired["rollout"] == nil {
			r = maps.Clone(r)
			if r == nil {
				r = map[string]any{}
			}
			for k, v := range poolRolloutDefaults {
				if isEmpty(r[k]) {
					r[k] = v
				}
			}
			desired["rollout"] = r
		}
		if cur != nil {
			spec, _ := cur["spec"].(map[string]any)
			pl.live = maps.Clone(spec)
			if pl.live == nil {
				pl.live = map[string]any{}
			}
			pl.live["name"], pl.live["cluster"] = cur["name"], cur["cluster"]
			// the platform resolves the minor to a version; a manifest
			// sets the minor only
			if k, ok := pl.live["kubernetes"].(map[string]any); ok {
				if dk, _ := desired["kubernetes"].(map[string]any); dk == nil || dk["version"] == nil {
					k = maps.Clone(k)
					delete(k, "version")
					pl.live["kubernetes"] = k
				}
			}
			if c := str(desired["cluster"]); c != "" && c != str(cur["cluster"]) {
				pl.notes = append(pl.notes, fmt.Sprintf("cluster stays %s: a pool never moves between clusters", str(cur["cluster"])))
				desired["cluster"] = cur["cluster"]
			}
		}
	case "cluster":
		for _, s := range clusterSecrets {
			if _, ok := desired[s]; !ok {
				continue
			}
			delete(desired, s)
			switch {
			case cur == nil:
			case o.RotateSecrets:
				pl.notes = append(pl.notes, s+" replaced")
				pl.changed = true
			default:
				pl.notes = append(pl.notes, s+" kept: sealed, not compared; --rotate-secrets replaces it")
			}
		}
		if cur != nil {
			// (a manifest holds no other field: it was read strictly)
			pl.live = project(cur, append([]string{"name"}, clusterCompared...), desired)
		}
	default:
		if cur != nil {
			pl.live = project(cur, machineFields, desired)
			if p, ok := desired["pool"].(string); ok && p != "" && p != str(cur["pool"]) {
				pl.notes = append(pl.notes, "assigned to "+p)
			}
		}
	}
	if cur == nil {
		pl.desired = desired
		return pl, nil
	}
	pl.desired, _ = align(desired, pl.live).(map[string]any)
	if pl.desired == nil {
		pl.desired = map[string]any{}
	}
	for k := range union(pl.desired, pl.live) {
		if reflect.DeepEqual(pl.desired[k], pl.live[k]) {
			continue
		}
		pl.changed = true
		if m.Kind == "pool" && !containsString(poolSettings, k) {
			pl.reboot = true
		}
	}
	return pl, nil
}

// project keeps the keys of obj that the manifest sets, among those
// compared.
func project(obj map[string]any, keys []string, desired map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if _, ok := desired[k]; !ok {
			continue
		}
		if v, ok := obj[k]; ok {
			out[k] = v
		}
	}
	return out
}

func union(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// isEmpty: nothing, "", 0, false, {} or [].
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case json.Number:
		f, err := strconv.ParseFloat(x.String(), 64)
		return err == nil && f == 0
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// equivalent says two scalars mean the same to the server: both empty,
// equal numbers (1 and "1"), equal durations (15m and 15m0s).
func equivalent(d, l any) bool {
	if isEmpty(d) && isEmpty(l) {
		return true
	}
	num := func(v any) (float64, bool) {
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = x
		default:
			return 0, false
		}
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	switch dv := d.(type) {
	case json.Number, string:
		if ls, ok := l.(string); ok {
			if ds, ok := dv.(string); ok {
				if ds == ls {
					return true
				}
				dd, e1 := time.ParseDuration(ds)
				ld, e2 := time.ParseDuration(ls)
				if e1 == nil && e2 == nil {
					return dd == ld
				}
			}
		}
		x, ok1 := num(d)
		y, ok2 := num(l)
		return ok1 && ok2 && x == y
	case bool:
		lb, ok := l.(bool)
		return ok && lb == dv
	}
	return false
}

// align returns desired with the live value wherever the two mean the same,
// so that comparing and diffing show only real changes. Lists that hold the
// same elements in another order are the same (the server sorts SSH keys,
// taints, bond members and the like).
func align(d, l any) any {
	if equivalent(d, l) {
		return l
	}
	switch dm := d.(type) {
	case map[string]any:
		lm, _ := l.(map[string]any)
		out := map[string]any{}
		for k, v := range dm {
			lv, inLive := lm[k]
			av := align(v, lv)
			if av == nil && !inLive {
				continue
			}
			out[k] = av
		}
		for k, v := range lm {
			if _, ok := dm[k]; !ok && isEmpty(v) {
				out[k] = v
			}
		}
		return out
	case []any:
		ll, ok := l.([]any)
		if !ok || len(ll) != len(dm) {
			return d
		}
		out := make([]any, len(dm))
		for i := range dm {
			out[i] = align(dm[i], ll[i])
		}
		if reflect.DeepEqual(out, ll) {
			return ll
		}
		used := make([]bool, len(ll))
		for _, x := range dm {
			found := false
			for j, y := range ll {
				if !used[j] && reflect.DeepEqual(align(x, y), y) {
					used[j], found = true, true
					break
				}
			}
			if !found {
				return out
			}
		}
		return ll
	}
	return d
}

// unifiedDiff is the diff -u of two objects rendered as YAML.
func unifiedDiff(from, to string, live, desired map[string]any) (string, error) {
	render := func(v map[string]any) (string, error) {
		if v == nil {
			return "", nil
		}
		b, err := yaml.Marshal(v)
		return string(b), err
	}
	a, err := render(live)
	if err != nil {
		return "", err
	}
	b, err := render(desired)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(a), B: difflib.SplitLines(b),
		FromFile: from, ToFile: to, Context: 3})
}

func (a *app) diffCmd() *cobra.Command {
	o := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "diff -f <file.yaml|dir> [-R]",
		Short: "Show what apply -f would change: the objects on the server against the manifests",
		Long: "diff reads each manifest's object from the server and prints a unified diff of the two, as YAML,\n" +
			"for every object apply would create or change. It compares on the client, as apply --dry-run does:\n" +
			"a pool is compared whole (its spec; the Kubernetes version the platform resolves is left out), a\n" +
			"cluster and a machine on the fields the manifest sets; sealed cluster secrets are not compared.\n\n" +
			"Exit status, as kubectl diff: 0 no differences, 1 differences, 2 an error.",
		Example:     "  anvilctl diff -f fleet.yaml\n  anvilctl diff -R -f manifests/ && echo in sync",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{errorExit: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			fail := func(err error) error { return &exitError{code: ExitFailed, err: err} }
			all, err := a.readManifests(o.Files, o.Recursive)
			if err != nil {
				return fail(err)
			}
			w := cmd.OutOrStdout()
			differ := false
			for _, m := range all {
				pl, err := a.plan(cmd.Context(), m, o)
				if err != nil {
					return fail(fmt.Errorf("%s/%s: %w", m.Kind, m.Name, err))
				}
				for _, n := range pl.notes {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s/%s: %s\n", m.Kind, m.Name, n)
				}
				if pl.exists && !pl.changed {
					continue
				}
				differ = true
				name := m.Kind + "/" + m.Name
				from := "live/" + name
				if !pl.exists {
					from = "/dev/null"
				}
				d, err := unifiedDiff(from, "desired/"+name, pl.live, pl.desired)
				if err != nil {
					return fail(err)
				}
				if d == "" && pl.changed {
					d = fmt.Sprintf("--- %s\n+++ desired/%s\n(%s)\n", from, name, strings.Join(pl.notes, "; "))
				}
				if _, err := io.WriteString(w, d); err != nil {
					return fail(err)
				}
			}
			if differ {
				return &exitError{code: ExitError, silent: true}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.Files, "filename", "f", nil, "manifest file(s) or directories, as for apply")
	f.BoolVarP(&o.Recursive, "recursive", "R", false, "-f directories: also their subdirectories")
	return cmd
}
