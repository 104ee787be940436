package anvilctl

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/client"
)

// resource is a kind of thing `get`, `describe` and `delete` know.
type resource struct {
	Name    string   // singular: machine
	Plural  string   // machines
	Aliases []string // short names
	// global: the kind is not an organization's (orgs), so it needs no
	// --org.
	global bool
	// list reads the kind's list through the client: every page, or at
	// most --limit items (more: items remain).
	list func(ctx context.Context, c *client.Client, o *getOptions) (items []map[string]any, more bool, err error)
	// filters are the list flags this kind takes (pool, status, …).
	filters []string
	// one reads one object by name; nil: cannot be read one by one.
	one func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error)
	// remove deletes one and answers it as the deletion left it; nil:
	// cannot be deleted.
	remove func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error)
	// aggregate is the event aggregate type, for describe.
	aggregate string
	// id is the field that names an object (-o name, watch).
	id   string
	cols []column
	// wide are the columns -o wide adds.
	wide []column
}

// idOf is an object's name within its kind.
func (r *resource) idOf(o map[string]any) string { return str(o[r.id]) }

// takes says whether the kind's list takes a filter flag.
func (r *resource) takes(flag string) bool {
	for _, f := range r.filters {
		if f == flag {
			return true
		}
	}
	return false
}

// getOptions are the filters of get, describe and delete.
type getOptions struct {
	At, Pool, Status, Selector, Kind, Cluster, Machine, Policy string
	Limit, ChunkSize                                           int
	events                                                     eventFilter
}

// listing is how much of a list --limit and --chunk-size read.
func (o *getOptions) listing() listing { return listing{limit: o.Limit, chunk: o.ChunkSize} }

// at is --at for the client.
func (o *getOptions) at() client.CallOption { return client.At(o.At) }

func progress(o map[string]any) string {
	done, total := str(lookup(o, "progress.done")), str(lookup(o, "progress.total"))
	if total == "" {
		return ""
	}
	return done + "/" + total
}

// rebootCell is whether the machine's agent says it needs a reboot (its
// reboot.required): yes, no, or nothing while no agent has reported (the
// registry only keeps the indicator once the agent reports). describe
// shows the reason.
func rebootCell(o map[string]any) string {
	switch {
	case lookup(o, "reboot.required") == true:
		return "yes"
	case str(lookup(o, "current_revision_at")) != "" || str(lookup(o, "hardware_reported_at")) != "":
		return "no"
	}
	return ""
}

// eventFilterFlags are the events' filter flags.
var eventFilterFlags = []string{"aggregate", "type", "actor", "since", "until"}

var resources = []*resource{
	{Name: "org", Plural: "orgs", Aliases: []string{"organization", "organizations"}, id: "id", global: true,
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Org], error) { return c.ListOrgs(ctx, lo) })
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.InOrg(name).GetOrg(ctx, o.at()))
		},
		aggregate: "org",
		cols:      []column{field("ID", "id"), field("DISPLAY NAME", "display_name"), field("VERSION", "version")}},
	{Name: "machine", Plural: "machines", Aliases: []string{"mc", "m"}, id: "uuid", filters: []string{"pool", "status", "selector"},
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			f := client.MachineFilter{Pool: o.Pool, Status: client.MachineStatus(o.Status), Selector: o.Selector}
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Machine], error) {
				f.ListOptions = lo
				return c.ListMachines(ctx, f)
			})
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.GetMachine(ctx, name, o.at()))
		},
		remove: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.DeleteMachine(ctx, name, client.DeletionPolicy(o.Policy)))
		},
		aggregate: "machine",
		cols: []column{field("UUID", "uuid"), field("HOSTNAME", "hostname"), field("STATUS", "status"), field("POOL", "pool"),
			field("CURRENT", "current_revision"), field("TARGET", "target_revision"), {Header: "REBOOT", Get: rebootCell},
			field("CONNECTIVITY", "connectivity"), field("LAST SEEN", "last_seen")},
		wide: []column{field("NODE", "node_name"), field("MAC", "mac"), field("CONTROL PLANE", "control_plane"),
			field("UPGRADE INDEX", "upgrade_index"), field("REGISTERED", "registered_at")}},
	{Name: "pool", Plural: "pools", Aliases: []string{"machinepool", "machinepools", "mp"}, id: "name", filters: []string{"cluster"},
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			f := client.PoolFilter{Cluster: o.Cluster}
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.PoolSummary], error) {
				f.ListOptions = lo
				return c.ListPools(ctx, f)
			})
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.GetPool(ctx, name, o.at()))
		},
		remove: func(ctx context.Context, c *client.Client, _ *getOptions, name string) (map[string]any, error) {
			return asMap(c.DeletePool(ctx, name))
		},
		aggregate: "pool",
		cols: []column{field("NAME", "name"), field("CLUSTER", "cluster"), field("LATEST", "latest_revision"), field("KUBERNETES", "kubernetes_version"),
			field("APPLIED", "applied_revision"), field("RUNS", "applied_kubernetes_version"), field("UPDATED", "updated_at")},
		wide: []column{field("DISPLAY NAME", "display_name"), field("CREATED", "created_at"), field("VERSION", "version")}},
	{Name: "cluster", Plural: "clusters", Aliases: []string{"cl"}, id: "name",
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Cluster], error) { return c.ListClusters(ctx, lo) })
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.GetCluster(ctx, name, o.at()))
		},
		remove: func(ctx context.Context, c *client.Client, _ *getOptions, name string) (map[string]any, error) {
			return asMap(c.DeleteCluster(ctx, name))
		},
		aggregate: "cluster",
		cols: []column{field("NAME", "name"), field("ENDPOINT", "api_endpoint"), field("KUBERNETES", "kubernetes_version"),
			field("POOLS", "pools"), field("UPDATED", "updated_at")},
		wide: []column{field("BOOTSTRAP TOKEN", "bootstrap_token_id"), field("CA CERT HASH", "ca_cert_hash"), field("CREATED", "created_at"), field("VERSION", "version")}},
	{Name: "revision", Plural: "revisions", Aliases: []string{"rev", "revs"}, id: "number", filters: []string{"pool", "machine"},
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			switch {
			case o.Machine != "" && o.Pool != "":
				return nil, false, fmt.Errorf("revisions: pass --pool or --machine, not both")
			case o.Machine != "":
				// a machine's revisions come in one answer, not pages
				mr, err := call(c.GetMachineRevisions(ctx, o.Machine))
				if err != nil {
					return nil, false, err
				}
				var items []map[string]any
				for _, r := range mr.Revisions {
					items = append(items, structToMap(r))
				}
				if o.Limit > 0 && len(items) > o.Limit {
					return items[:o.Limit], true, nil
				}
				return items, false, nil
			case o.Pool != "":
				return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.RevisionSummary], error) {
					l, err := c.ListPoolRevisions(ctx, o.Pool, lo)
					if err != nil {
						return nil, err
					}
					return &l.Page, nil
				})
			}
			return nil, false, fmt.Errorf("revisions belong to a pool or a machine: pass --pool <pool> or --machine <uuid>")
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			if o.Pool == "" {
				return nil, fmt.Errorf("a revision belongs to a pool: pass --pool <pool>")
			}
			if o.At != "" {
				return nil, usageErr(fmt.Errorf("a revision never changes: leave out --at"))
			}
			n, err := strconv.Atoi(name)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q: a revision is named by its number (1 or more)", name)
			}
			return asMap(c.GetPoolRevision(ctx, o.Pool, n))
		},
		cols: []column{field("NUMBER", "number"), field("HASH", "hash"), field("AUTHOR", "author"), field("CREATED", "created_at"),
			field("APPLIED", "applied"), field("PLATFORM", "platform_made"), field("MESSAGE", "message")},
		wide: []column{field("CURRENT", "current"), field("TARGET", "target")}},
	{Name: "rollout", Plural: "rollouts", Aliases: []string{"ro"}, id: "id", filters: []string{"pool", "status"},
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			f := client.RolloutFilter{Pool: o.Pool, Status: client.RolloutStatus(o.Status)}
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Rollout], error) {
				f.ListOptions = lo
				return c.ListRollouts(ctx, f)
			})
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.GetRollout(ctx, name, o.at()))
		},
		aggregate: "rollout",
		cols: []column{field("ID", "id"), field("POOL", "pool"), field("REVISION", "revision"), field("STATUS", "status"),
			{Header: "PROGRESS", Get: progress}, {Header: "WAITING FOR", Get: waitingFor}, field("STARTED", "started_at"), field("FINISHED", "finished_at")},
		wide: []column{field("ROLLBACK", "rollback"), field("AFTER", "after"), field("REASON", "reason"), field("VERSION", "version")}},
	{Name: "operation", Plural: "operations", Aliases: []string{"op", "ops"}, id: "id", filters: []string{"pool", "status", "kind"},
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			f := client.OperationFilter{Pool: o.Pool, Status: o.Status, Kind: o.Kind}
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Operation], error) {
				f.ListOptions = lo
				return c.ListOperations(ctx, f)
			})
		},
		one: func(ctx context.Context, c *client.Client, o *getOptions, name string) (map[string]any, error) {
			return asMap(c.GetOperation(ctx, name, o.at()))
		},
		cols: []column{field("ID", "id"), field("KIND", "kind"), field("POOL", "pool"), field("MACHINE", "machine"), field("STATUS", "status"),
			{Header: "PROGRESS", Get: progress}, field("STEP", "step"), {Header: "WAITING FOR", Get: waitingFor}, field("STARTED", "started_at")},
		wide: []column{field("REVISION", "revision"), field("REASON", "reason"), field("FINISHED", "finished_at"), field("VERSION", "version")}},
	{Name: "event", Plural: "events", Aliases: []string{"ev"}, id: "sequence", filters: eventFilterFlags,
		list: func(ctx context.Context, c *client.Client, o *getOptions) ([]map[string]any, bool, error) {
			f := o.events.filter()
			return readList(o.listing(), func(lo client.ListOptions) (*client.Page[client.Event], error) {
				f.ListOptions = lo
				return c.ListEvents(ctx, f)
			})
		},
		cols: eventCols,
		wide: []column{field("ID", "id"), field("CORRELATION", "correlation_id"), field("CAUSATION", "causation_id")}},
}

var eventCols = []column{field("SEQ", "sequence"), field("TIME", "time"), field("AGGREGATE", "aggregate"), field("TYPE", "type"), field("ACTOR", "actor")}

// filterFlags are the flags that filter a list, in the order they are
// checked.
var filterFlags = append([]string{"pool", "status", "selector", "kind", "cluster", "machine"}, eventFilterFlags...)

// takers lists the kinds whose lists take a filter flag.
func takers(flag string) string {
	var out []string
	for _, r := range resources {
		if r.takes(flag) {
			out = append(out, r.Plural)
		}
	}
	return strings.Join(out, ", ")
}

// lookupResource finds a kind by name, plural or alias.
func lookupResource(kind string) (*resource, error) {
	k := strings.ToLower(kind)
	for _, r := range resources {
		if k == r.Name || k == r.Plural {
			return r, nil
		}
		for _, a := range r.Aliases {
			if k == a {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("unknown kind %q: one of %s", kind, strings.Join(kindNames(), ", "))
}

func kindNames() []string {
	var out []string
	for _, r := range resources {
		out = append(out, r.Plural)
	}
	sort.Strings(out)
	return out
}

// request is what one kind of a get, describe or delete asks for: the
// whole list, or some objects by name.
type request struct {
	r     *resource
	names []string
}

// parseTargets reads kubectl's ways of naming objects: `kind`,
// `kind name…`, `kind1,kind2 [name…]`, or `kind/name…`.
func parseTargets(args []string) ([]request, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("name a kind: one of %s", strings.Join(kindNames(), ", "))
	}
	var out []request
	find := func(r *resource) *request {
		for i := range out {
			if out[i].r == r {
				return &out[i]
			}
		}
		out = append(out, request{r: r})
		return &out[len(out)-1]
	}
	slashed := 0
	for _, a := range args {
		if strings.Contains(a, "/") {
			slashed++
		}
	}
	if slashed > 0 {
		if slashed != len(args) {
			return nil, fmt.Errorf("name objects either as kind/name or as a kind followed by names, not both (%s)", strings.Join(args, " "))
		}
		for _, a := range args {
			kind, name, _ := strings.Cut(a, "/")
			if name == "" || strings.Contains(name, "/") {
				return nil, fmt.Errorf("%q: want kind/name, such as pool/workers", a)
			}
			r, err := lookupResource(kind)
			if err != nil {
				return nil, err
			}
			q := find(r)
			q.names = append(q.names, name)
		}
		return out, nil
	}
	for _, kind := range strings.Split(args[0], ",") {
		if kind == "" {
			return nil, fmt.Errorf("%q: an empty kind", args[0])
		}
		r, err := lookupResource(kind)
		if err != nil {
			return nil, err
		}
		q := find(r)
		q.names = append(q.names, args[1:]...)
	}
	return out, nil
}

// single says the targets name exactly one object.
func single(reqs []request) bool { return len(reqs) == 1 && len(reqs[0].names) == 1 }
