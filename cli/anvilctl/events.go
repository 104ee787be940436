package anvilctl

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
)

// eventFilter is the audit log's filters, as given and (sinceAt,
// untilAt) resolved.
type eventFilter struct {
	Aggregate, Types, Actor, Since, Until string
	sinceAt, untilAt                      time.Time
}

// filter is the client's filter: --type is comma-separated.
func (f *eventFilter) filter() client.EventFilter {
	ef := client.EventFilter{Aggregate: f.Aggregate, Actor: f.Actor, Since: f.sinceAt, Until: f.untilAt}
	if f.Types != "" {
		ef.Types = strings.Split(f.Types, ",")
	}
	return ef
}

func (a *app) eventFlags(cmd *cobra.Command, f *eventFilter) {
	fl := cmd.Flags()
	fl.StringVar(&f.Aggregate, "aggregate", "", "events: only of this aggregate: <type> or <type>/<id>, such as machine/4c4c4544-…")
	fl.StringVar(&f.Types, "type", "", "events: only these event types, comma-separated (machine.preregistered,…)")
	fl.StringVar(&f.Actor, "actor", "", "events: only by this actor, such as \"token:ab12 (ci-bot)\"")
	fl.StringVar(&f.Since, "since", "", "events: from this time: RFC 3339, or a duration ago such as 1h")
	fl.StringVar(&f.Until, "until", "", "events: until this time: RFC 3339, or a duration ago")
}

// resolveTimes turns --since and --until into RFC 3339 times.
func (a *app) resolveTimes(f *eventFilter) error {
	for _, t := range []struct {
		name string
		in   string
		out  *time.Time
	}{{"since", f.Since, &f.sinceAt}, {"until", f.Until, &f.untilAt}} {
		if t.in == "" {
			continue
		}
		v, err := parseAt(t.in, a.env.Now())
		var at time.Time
		if err == nil {
			at, err = time.Parse(time.RFC3339Nano, v)
		}
		if err != nil {
			return fmt.Errorf("--%s %q: must be an RFC 3339 time or a duration ago such as 1h", t.name, t.in)
		}
		*t.out = at
	}
	return nil
}

func (a *app) eventsCmd() *cobra.Command {
	o := &getOptions{}
	var t tableFlags
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Read the audit log: every event of the organization, oldest first",
		Example: `  anvilctl events --aggregate machine/4c4c4544-0035-4b10-8056-b7c04f4e3332 --since 24h
  anvilctl events --type pool.apply_requested --actor "token:ab12 (ci-bot)" -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.resolveTimes(&o.events); err != nil {
				return usageErr(err)
			}
			p, err := a.printerFor(cmd, &t)
			if err != nil {
				return err
			}
			r, _ := lookupResource("events")
			items, more, err := a.list(cmd.Context(), r, o)
			if err != nil {
				return err
			}
			if err := p.print(cmd.OutOrStdout(), []group{{r: r, items: items}}, false); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "(more: raise --limit, or pass 0 for every page)\n")
			}
			return nil
		},
	}
	a.eventFlags(cmd, &o.events)
	t.add(cmd)
	cmd.Flags().IntVar(&o.Limit, "limit", 0, "at most this many events (0: all)")
	cmd.Flags().IntVar(&o.ChunkSize, "chunk-size", pageSize, "ask for events in pages of this many")
	return cmd
}
