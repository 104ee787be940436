package anvilctl

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// parseAt turns --at into the API's ?at=: an RFC 3339 time or a stream
// sequence as they are, or a duration ("90m") meaning that long ago.
func parseAt(s string, now time.Time) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return s, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("%q: must be an RFC 3339 time, a stream sequence, or a duration ago such as 2h", s)
}

func (a *app) listFlags(cmd *cobra.Command, o *getOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Pool, "pool", "", "machines, rollouts, operations: only this pool; revisions: this pool's")
	f.StringVar(&o.Status, "status", "", "machines, rollouts, operations: only this status (rollouts: also \"active\")")
	f.StringVarP(&o.Selector, "selector", "l", "", "machines: a Kubernetes label selector, such as rack=r1,zone!=b")
	f.StringVar(&o.Kind, "kind", "", "operations: only this kind (rollout, maintenance_enter, …)")
	f.StringVar(&o.Cluster, "cluster", "", "pools: only this cluster's")
	f.StringVar(&o.Machine, "machine", "", "revisions: this machine's (its UUID)")
	f.IntVar(&o.Limit, "limit", 0, "at most this many items (0: every page)")
	a.eventFlags(cmd, &o.events)
}

func (a *app) getCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get <kind> [name]",
		Short: "List objects of a kind, or show one (" + strings.Join(kindNames(), ", ") + ")",
		Example: `  anvilctl get machines --pool workers -l rack=r1
  anvilctl get machine 4c4c4544-0035-4b10-8056-b7c04f4e3332 --at 2h
  anvilctl get revisions --pool workers
  anvilctl get rollouts --status active -o yaml`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := lookupResource(args[0])
			if err != nil {
				return err
			}
			if o.At, err = parseAt(o.At, a.env.Now()); err != nil {
				return fmt.Errorf("--at %w", err)
			}
			if err := a.resolveTimes(&o.events); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(args) == 2 {
				if r.one == nil {
					return fmt.Errorf("%s cannot be read one by one; list them with filters", r.Plural)
				}
				obj, err := a.getOne(cmd.Context(), r, o, args[1])
				if err != nil {
					return err
				}
				return printObject(w, a.output, r.cols, obj)
			}
			if o.At != "" {
				return fmt.Errorf("--at reads one object as it was: name it")
			}
			items, next, err := a.list(cmd.Context(), r, o)
			if err != nil {
				return err
			}
			if err := printObjects(w, a.output, r.cols, items); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "(more: raise --limit, or pass 0 for every page)\n")
			}
			return nil
		},
	}
	a.listFlags(cmd, o)
	cmd.Flags().StringVar(&o.At, "at", "", "show the object as it was: an RFC 3339 time, a stream sequence, or a duration ago (2h)")
	return cmd
}

// getOne reads one object.
func (a *app) getOne(ctx context.Context, r *resource, o *getOptions, name string) (map[string]any, error) {
	p, err := r.one(a.c, o, name)
	if err != nil {
		return nil, err
	}
	obj, _, err := a.c.get(ctx, p, at(url.Values{}, o))
	return obj, err
}

// list reads a kind's list, following next until --limit items or the end.
func (a *app) list(ctx context.Context, r *resource, o *getOptions) ([]map[string]any, string, error) {
	p, q, err := r.list(a.c, o)
	if err != nil {
		return nil, "", err
	}
	if q == nil {
		q = url.Values{}
	}
	var items []map[string]any
	next := ""
	for {
		if r.paged != "" {
			size := 500
			if o.Limit > 0 {
				size = min(size, o.Limit-len(items))
			}
			q.Set("limit", strconv.Itoa(size))
			if next != "" {
				q.Set(r.paged, next)
			}
		}
		page, _, err := a.c.get(ctx, p, q)
		if err != nil {
			return nil, "", err
		}
		raw, _ := page[r.key].([]any)
		for _, it := range raw {
			if m, ok := it.(map[string]any); ok {
				items = append(items, m)
			}
		}
		next, _ = page["next"].(string)
		if r.paged == "" || next == "" || o.Limit > 0 && len(items) >= o.Limit {
			return items, next, nil
		}
	}
}

func (a *app) describeCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:               "describe <kind> <name>",
		Short:             "Show one object in detail, with its most recent events",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := lookupResource(args[0])
			if err != nil {
				return err
			}
			if r.one == nil {
				return fmt.Errorf("%s cannot be described one by one", r.Plural)
			}
			if o.At, err = parseAt(o.At, a.env.Now()); err != nil {
				return fmt.Errorf("--at %w", err)
			}
			obj, err := a.getOne(cmd.Context(), r, o, args[1])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if a.output != FormatTable {
				return printValue(w, a.output, obj)
			}
			fmt.Fprintf(w, "%s/%s\n", r.Name, args[1])
			if err := describe(w, obj); err != nil {
				return err
			}
			if r.aggregate == "" {
				return nil
			}
			id := args[1]
			if r.Name == "machine" {
				id = strings.ToLower(id)
			}
			evs, err := a.recentEvents(cmd.Context(), r.aggregate+"/"+id, 10)
			if err != nil {
				fmt.Fprintf(w, "Events: (not readable: %v)\n", err)
				return nil
			}
			fmt.Fprintln(w, "Events:")
			if len(evs) == 0 {
				fmt.Fprintln(w, "  (none)")
				return nil
			}
			return printTable(indent{w}, eventCols, evs)
		},
	}
	cmd.Flags().StringVar(&o.At, "at", "", "describe the object as it was: an RFC 3339 time, a stream sequence, or a duration ago (2h)")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "revisions: the pool")
	return cmd
}

// recentEvents reads the last n events of an aggregate.
func (a *app) recentEvents(ctx context.Context, aggregate string, n int) ([]map[string]any, error) {
	r, _ := lookupResource("events")
	o := &getOptions{events: eventFilter{Aggregate: aggregate}}
	items, _, err := a.list(ctx, r, o)
	if len(items) > n {
		items = items[len(items)-n:]
	}
	return items, err
}

// indent writes every line two spaces in.
type indent struct {
	w interface{ Write([]byte) (int, error) }
}

func (i indent) Write(p []byte) (int, error) {
	s := strings.ReplaceAll(string(p), "\n", "\n  ")
	s = "  " + strings.TrimSuffix(s, "  ")
	if _, err := i.w.Write([]byte(s)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (a *app) deleteCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:               "delete <kind> <name>",
		Short:             "Delete a machine, pool or cluster",
		Example:           "  anvilctl delete machine 4c4c4544-0035-4b10-8056-b7c04f4e3332 --policy graceful\n  anvilctl delete pool workers",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := lookupResource(args[0])
			if err != nil {
				return err
			}
			if r.remove == nil {
				return fmt.Errorf("%s cannot be deleted", r.Plural)
			}
			p, q, err := r.remove(a.c, o, args[1])
			if err != nil {
				return err
			}
			res, err := a.c.do(cmd.Context(), "DELETE", p, q, nil, nil)
			if err != nil {
				return err
			}
			if a.output != FormatTable {
				var v any
				if err := decode(res.Body, &v); err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), a.output, v)
			}
			what := "deleted"
			if r.Name == "machine" {
				var v map[string]any
				// A machine removed at once answers "deleted": true; one
				// being drained first answers its status (deleting).
				if decode(res.Body, &v) == nil && v["deleted"] != true && str(v["status"]) != "" {
					what = "deletion requested (status " + str(v["status"]) + ")"
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s %s\n", r.Name, args[1], what)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Policy, "policy", "", "machines: graceful (drain first, the default), unsafe or forced")
	return cmd
}

// completeKindAndName completes a kind, then the names of that kind from
// the API (best effort: nothing when the API cannot be reached).
func (a *app) completeKindAndName(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		var out []string
		for _, r := range resources {
			out = append(out, r.Name, r.Plural)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	r, err := lookupResource(args[0])
	if err != nil || r.one == nil || a.prepare(cmd) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	items, _, err := a.list(ctx, r, &getOptions{Limit: 500})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, it := range items {
		for _, k := range []string{"uuid", "id", "name", "number"} {
			if v := str(it[k]); v != "" {
				out = append(out, v)
				break
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
