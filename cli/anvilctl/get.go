package anvilctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
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
	f.IntVar(&o.Limit, "limit", 0, "at most this many items per kind (0: every page)")
	f.IntVar(&o.ChunkSize, "chunk-size", pageSize, "ask for lists in pages of this many items")
	a.eventFlags(cmd, &o.events)
}

// tableFlags are the flags that shape -o output.
type tableFlags struct {
	noHeaders, showLabels bool
	sortBy                string
}

func (t *tableFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&t.noHeaders, "no-headers", false, "table, wide and custom-columns output: no header line")
	f.BoolVar(&t.showLabels, "show-labels", false, "table and wide output: add a LABELS column")
	f.StringVar(&t.sortBy, "sort-by", "", "sort lists by this JSONPath, such as .hostname or {.created_at}")
}

// printerFor builds the printer of a command from -o and the table flags.
func (a *app) printerFor(cmd *cobra.Command, t *tableFlags) (*printer, error) {
	p := *a.out
	p.stderr = cmd.ErrOrStderr()
	if t != nil {
		p.noHeaders, p.showLabels = t.noHeaders, t.showLabels
		if err := p.setSortBy(t.sortBy); err != nil {
			return nil, usageErr(err)
		}
	}
	return &p, nil
}

type getCmdOptions struct {
	getOptions
	table         tableFlags
	watch         bool
	watchOnly     bool
	watchEvents   bool
	watchInterval time.Duration
}

func (a *app) getCmd() *cobra.Command {
	o := &getCmdOptions{}
	cmd := &cobra.Command{
		Use:   "get <kind>[,<kind>…] [name…] | <kind>/<name>…",
		Short: "List objects of some kinds, or show some by name (" + strings.Join(kindNames(), ", ") + ")",
		Example: `  anvilctl get machines --pool workers -l rack=r1
  anvilctl get machine 4c4c4544-0035-4b10-8056-b7c04f4e3332 --at 2h
  anvilctl get pool/workers cluster/prod -o yaml
  anvilctl get pools,clusters
  anvilctl get machines -o custom-columns=HOST:.hostname,RACK:.labels.rack --sort-by .hostname
  anvilctl get machines -o jsonpath='{.items[*].uuid}'
  anvilctl get rollouts --status active -w`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			reqs, err := parseTargets(args)
			if err != nil {
				return usageErr(err)
			}
			p, err := a.printerFor(cmd, &o.table)
			if err != nil {
				return err
			}
			if o.watchOnly {
				o.watch = true
			}
			if o.watch && o.At != "" {
				return usageErr(fmt.Errorf("--watch follows objects as they are now: leave out --at"))
			}
			if err := a.checkFilters(cmd, reqs, &o.getOptions); err != nil {
				return err
			}
			if o.watch && o.watchInterval <= 0 {
				return usageErr(fmt.Errorf("--watch-interval: must be more than 0"))
			}
			w := cmd.OutOrStdout()
			if o.watch {
				return a.watchGet(cmd.Context(), cmd, p, reqs, o)
			}
			groups, more, err := a.fetch(cmd.Context(), reqs, &o.getOptions)
			if err != nil {
				return err
			}
			if err := p.print(w, groups, single(reqs)); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "(more: raise --limit, or pass 0 for every page)\n")
			}
			return nil
		},
	}
	a.listFlags(cmd, &o.getOptions)
	o.table.add(cmd)
	f := cmd.Flags()
	f.StringVar(&o.At, "at", "", "show objects named as they were: an RFC 3339 time, a stream sequence, or a duration ago (2h)")
	f.BoolVarP(&o.watch, "watch", "w", false, "after the objects, print each change until interrupted (Ctrl-C)")
	f.BoolVar(&o.watchOnly, "watch-only", false, "print only the changes, not the objects first (implies --watch)")
	f.BoolVar(&o.watchEvents, "output-watch-events", false, "--watch: say what changed: an EVENT column (ADDED, MODIFIED, DELETED), or {type, object} in JSON and YAML")
	f.DurationVar(&o.watchInterval, "watch-interval", 2*time.Second, "--watch: how often to ask the server for changes")
	return cmd
}

// checkFilters refuses a filter a kind does not take, and filters on
// objects named.
func (a *app) checkFilters(cmd *cobra.Command, reqs []request, o *getOptions) error {
	var err error
	if o.At, err = parseAt(o.At, a.env.Now()); err != nil {
		return usageErr(fmt.Errorf("--at %w", err))
	}
	if err := a.resolveTimes(&o.events); err != nil {
		return usageErr(err)
	}
	changed := func(name string) bool { f := cmd.Flags().Lookup(name); return f != nil && f.Changed }
	for _, q := range reqs {
		for _, flag := range filterFlags {
			if !changed(flag) {
				continue
			}
			name := "--" + flag
			if flag == "selector" {
				name = "--selector (-l)"
			}
			if len(q.names) > 0 && !(q.r.Name == "revision" && flag == "pool") {
				return usageErr(fmt.Errorf("%s filters lists: leave it out when naming %s", name, q.r.Plural))
			}
			if !q.r.takes(flag) {
				return usageErr(fmt.Errorf("%s cannot be filtered with %s (it filters %s)", q.r.Plural, name, takers(flag)))
			}
		}
		if len(q.names) > 0 && q.r.one == nil {
			return usageErr(fmt.Errorf("%s cannot be read one by one; list them with filters", q.r.Plural))
		}
		if len(q.names) == 0 && o.At != "" {
			return usageErr(fmt.Errorf("--at reads objects as they were: name them"))
		}
	}
	return nil
}

// fetch reads every request: each list (every page, or --limit) and each
// object named. more says a list has more items than --limit.
func (a *app) fetch(ctx context.Context, reqs []request, o *getOptions) ([]group, bool, error) {
	var groups []group
	more := false
	for _, q := range reqs {
		g := group{r: q.r}
		if len(q.names) == 0 {
			items, m, err := a.list(ctx, q.r, o)
			if err != nil {
				return nil, false, err
			}
			g.items, more = items, more || m
		}
		for _, name := range q.names {
			obj, err := a.getOne(ctx, q.r, o, name)
			if err != nil {
				return nil, false, fmt.Errorf("%s/%s: %w", q.r.Name, name, err)
			}
			g.items = append(g.items, obj)
		}
		groups = append(groups, g)
	}
	return groups, more, nil
}

// clientFor is the client a kind is read with: the organization's, but
// for the organizations themselves.
func (a *app) clientFor(r *resource) (*client.Client, error) {
	if r.global {
		return a.api, nil
	}
	return a.org()
}

// getOne reads one object.
func (a *app) getOne(ctx context.Context, r *resource, o *getOptions, name string) (map[string]any, error) {
	c, err := a.clientFor(r)
	if err != nil {
		return nil, err
	}
	return r.one(ctx, c, o, name)
}

// list reads a kind's list, following next until --limit items or the end.
func (a *app) list(ctx context.Context, r *resource, o *getOptions) ([]map[string]any, bool, error) {
	c, err := a.clientFor(r)
	if err != nil {
		return nil, false, err
	}
	return r.list(ctx, c, o)
}

func (a *app) describeCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:               "describe <kind> <name>… | <kind>/<name>…",
		Short:             "Show objects in detail, with their most recent events",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			reqs, err := parseTargets(args)
			if err != nil {
				return usageErr(err)
			}
			for _, q := range reqs {
				if q.r.one == nil {
					return usageErr(fmt.Errorf("%s cannot be described one by one", q.r.Plural))
				}
				if len(q.names) == 0 {
					return usageErr(fmt.Errorf("name the %s to describe", q.r.Name))
				}
			}
			if o.At, err = parseAt(o.At, a.env.Now()); err != nil {
				return usageErr(fmt.Errorf("--at %w", err))
			}
			groups, _, err := a.fetch(cmd.Context(), reqs, o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			p, err := a.printerFor(cmd, nil)
			if err != nil {
				return err
			}
			if !p.human() {
				return p.print(w, groups, single(reqs))
			}
			first := true
			for i, g := range groups {
				for j, obj := range g.items {
					if !first {
						fmt.Fprintln(w)
					}
					first = false
					if err := a.describeOne(cmd.Context(), w, g.r, reqs[i].names[j], obj); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.At, "at", "", "describe the object as it was: an RFC 3339 time, a stream sequence, or a duration ago (2h)")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "revisions: the pool")
	return cmd
}

func (a *app) describeOne(ctx context.Context, w io.Writer, r *resource, name string, obj map[string]any) error {
	fmt.Fprintf(w, "%s/%s\n", r.Name, name)
	if err := describe(w, obj); err != nil {
		return err
	}
	if r.aggregate == "" {
		return nil
	}
	id := name
	if r.Name == "machine" {
		id = strings.ToLower(id)
	}
	evs, err := a.recentEvents(ctx, r.aggregate+"/"+id, 10)
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
	w io.Writer
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
		Use:               "delete <kind> <name>… | <kind>/<name>…",
		Short:             "Delete machines, pools or clusters",
		Example:           "  anvilctl delete machine 4c4c4544-0035-4b10-8056-b7c04f4e3332 --policy graceful\n  anvilctl delete pool/workers",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeKindAndName,
		RunE: func(cmd *cobra.Command, args []string) error {
			reqs, err := parseTargets(args)
			if err != nil {
				return usageErr(err)
			}
			for _, q := range reqs {
				if q.r.remove == nil {
					return usageErr(fmt.Errorf("%s cannot be deleted", q.r.Plural))
				}
				if len(q.names) == 0 {
					return usageErr(fmt.Errorf("name the %s to delete", q.r.Name))
				}
			}
			if cmd.Flags().Changed("policy") {
				for _, q := range reqs {
					if q.r.Name != "machine" {
						return usageErr(fmt.Errorf("--policy is for machines; %s have none", q.r.Plural))
					}
				}
			}
			p, err := a.printerFor(cmd, nil)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			var groups []group
			for _, q := range reqs {
				g := group{r: q.r}
				c, err := a.clientFor(q.r)
				if err != nil {
					return err
				}
				for _, name := range q.names {
					v, err := q.r.remove(cmd.Context(), c, o, name)
					if err != nil {
						return fmt.Errorf("%s/%s: %w", q.r.Name, name, err)
					}
					if !p.human() {
						if v == nil {
							v = map[string]any{}
						}
						if q.r.idOf(v) == "" {
							v[q.r.id] = name
						}
						g.items = append(g.items, v)
						continue
					}
					what := "deleted"
					// A machine removed at once answers "deleted": true; one
					// being drained first answers its status (deleting).
					if q.r.Name == "machine" && v["deleted"] != true && str(v["status"]) != "" {
						what = "deletion requested (status " + str(v["status"]) + ")"
					}
					fmt.Fprintf(w, "%s/%s %s\n", q.r.Name, name, what)
				}
				groups = append(groups, g)
			}
			if p.human() {
				return nil
			}
			return p.print(w, groups, single(reqs))
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
	if strings.Contains(args[0], "/") || strings.Contains(args[0], ",") {
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
		if v := r.idOf(it); v != "" {
			out = append(out, v)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
