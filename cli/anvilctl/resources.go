package anvilctl

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// resource is a kind of thing `get`, `describe` and `delete` know.
type resource struct {
	Name    string   // singular: machine
	Plural  string   // machines
	Aliases []string // short names
	// list is the list's path and query; key the JSON field holding the
	// items; paged says it follows next (machines: ?cursor=, events:
	// ?after=).
	list  func(c *client, o *getOptions) (string, url.Values, error)
	key   string
	paged string // the query parameter that takes next; "" unpaged
	// one is one object's path; nil: cannot be read one by one.
	one func(c *client, o *getOptions, name string) (string, error)
	// remove is the delete path; nil: cannot be deleted.
	remove func(c *client, o *getOptions, name string) (string, url.Values, error)
	// aggregate is the event aggregate type, for describe.
	aggregate string
	cols      []column
}

// getOptions are the filters of get, describe and delete.
type getOptions struct {
	At, Pool, Status, Selector, Kind, Cluster, Machine, Policy string
	Limit                                                      int
	events                                                     eventFilter
}

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

func at(q url.Values, o *getOptions) url.Values {
	if o.At != "" {
		q.Set("at", o.At)
	}
	return q
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

var resources = []*resource{
	{Name: "org", Plural: "orgs", Aliases: []string{"organization", "organizations"}, key: "items",
		list: func(*client, *getOptions) (string, url.Values, error) { return "/api/v1/orgs", nil, nil },
		one: func(_ *client, _ *getOptions, name string) (string, error) {
			return "/api/v1/orgs/" + url.PathEscape(name), nil
		},
		aggregate: "org",
		cols:      []column{field("ID", "id"), field("DISPLAY NAME", "display_name"), field("VERSION", "version")}},
	{Name: "machine", Plural: "machines", Aliases: []string{"mc", "m"}, key: "items", paged: "cursor",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/machines")
			q := url.Values{}
			set(q, "pool", o.Pool)
			set(q, "status", o.Status)
			set(q, "selector", o.Selector)
			return p, q, err
		},
		one: func(c *client, _ *getOptions, name string) (string, error) { return c.orgPath("/machines/%s", name) },
		remove: func(c *client, o *getOptions, name string) (string, url.Values, error) {
			p, err := c.orgPath("/machines/%s", name)
			q := url.Values{}
			set(q, "policy", o.Policy)
			return p, q, err
		},
		aggregate: "machine",
		cols: []column{field("UUID", "uuid"), field("HOSTNAME", "hostname"), field("STATUS", "status"), field("POOL", "pool"),
			field("CURRENT", "current_revision"), field("TARGET", "target_revision"), {Header: "REBOOT", Get: rebootCell},
			field("CONNECTIVITY", "connectivity"), field("LAST SEEN", "last_seen")}},
	{Name: "pool", Plural: "pools", Aliases: []string{"machinepool", "machinepools", "mp"}, key: "pools",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/pools")
			q := url.Values{}
			set(q, "cluster", o.Cluster)
			return p, q, err
		},
		one: func(c *client, _ *getOptions, name string) (string, error) { return c.orgPath("/pools/%s", name) },
		remove: func(c *client, _ *getOptions, name string) (string, url.Values, error) {
			p, err := c.orgPath("/pools/%s", name)
			return p, nil, err
		},
		aggregate: "pool",
		cols: []column{field("NAME", "name"), field("CLUSTER", "cluster"), field("LATEST", "latest_revision"), field("KUBERNETES", "kubernetes_version"),
			field("APPLIED", "applied_revision"), field("RUNS", "applied_kubernetes_version"), field("UPDATED", "updated_at")}},
	{Name: "cluster", Plural: "clusters", Aliases: []string{"cl"}, key: "clusters",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/clusters")
			return p, nil, err
		},
		one: func(c *client, _ *getOptions, name string) (string, error) { return c.orgPath("/clusters/%s", name) },
		remove: func(c *client, _ *getOptions, name string) (string, url.Values, error) {
			p, err := c.orgPath("/clusters/%s", name)
			return p, nil, err
		},
		aggregate: "cluster",
		cols: []column{field("NAME", "name"), field("ENDPOINT", "api_endpoint"), field("KUBERNETES", "kubernetes_version"),
			field("POOLS", "pools"), field("UPDATED", "updated_at")}},
	{Name: "revision", Plural: "revisions", Aliases: []string{"rev", "revs"}, key: "revisions",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			switch {
			case o.Machine != "":
				p, err := c.orgPath("/machines/%s/revisions", o.Machine)
				return p, nil, err
			case o.Pool != "":
				p, err := c.orgPath("/pools/%s/revisions", o.Pool)
				return p, nil, err
			}
			return "", nil, fmt.Errorf("revisions belong to a pool or a machine: pass --pool <pool> or --machine <uuid>")
		},
		one: func(c *client, o *getOptions, name string) (string, error) {
			if o.Pool == "" {
				return "", fmt.Errorf("a revision belongs to a pool: pass --pool <pool>")
			}
			return c.orgPath("/pools/%s/revisions/%s", o.Pool, name)
		},
		cols: []column{field("NUMBER", "number"), field("HASH", "hash"), field("AUTHOR", "author"), field("CREATED", "created_at"),
			field("APPLIED", "applied"), field("PLATFORM", "platform_made"), field("MESSAGE", "message")}},
	{Name: "rollout", Plural: "rollouts", Aliases: []string{"ro"}, key: "items", paged: "cursor",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/rollouts")
			q := url.Values{}
			set(q, "pool", o.Pool)
			set(q, "status", o.Status)
			return p, q, err
		},
		one:       func(c *client, _ *getOptions, name string) (string, error) { return c.orgPath("/rollouts/%s", name) },
		aggregate: "rollout",
		cols: []column{field("ID", "id"), field("POOL", "pool"), field("REVISION", "revision"), field("STATUS", "status"),
			{Header: "PROGRESS", Get: progress}, {Header: "WAITING FOR", Get: waitingFor}, field("STARTED", "started_at"), field("FINISHED", "finished_at")}},
	{Name: "operation", Plural: "operations", Aliases: []string{"op", "ops"}, key: "items", paged: "cursor",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/operations")
			q := url.Values{}
			set(q, "pool", o.Pool)
			set(q, "status", o.Status)
			set(q, "kind", o.Kind)
			return p, q, err
		},
		one: func(c *client, _ *getOptions, name string) (string, error) { return c.orgPath("/operations/%s", name) },
		cols: []column{field("ID", "id"), field("KIND", "kind"), field("POOL", "pool"), field("MACHINE", "machine"), field("STATUS", "status"),
			{Header: "PROGRESS", Get: progress}, field("STEP", "step"), {Header: "WAITING FOR", Get: waitingFor}, field("STARTED", "started_at")}},
	{Name: "event", Plural: "events", Aliases: []string{"ev"}, key: "items", paged: "after",
		list: func(c *client, o *getOptions) (string, url.Values, error) {
			p, err := c.orgPath("/events")
			q, qerr := o.events.query()
			if err == nil {
				err = qerr
			}
			return p, q, err
		},
		cols: eventCols},
}

var eventCols = []column{field("SEQ", "sequence"), field("TIME", "time"), field("AGGREGATE", "aggregate"), field("TYPE", "type"), field("ACTOR", "actor")}

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
