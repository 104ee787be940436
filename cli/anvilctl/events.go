package anvilctl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// eventFilter is the audit log's filters.
type eventFilter struct {
	Aggregate, Types, Actor, Since, Until string
	sinceAt, untilAt                      string
}

func (f *eventFilter) query() (url.Values, error) {
	q := url.Values{}
	set(q, "aggregate", f.Aggregate)
	set(q, "type", f.Types)
	set(q, "actor", f.Actor)
	set(q, "since", f.sinceAt)
	set(q, "until", f.untilAt)
	return q, nil
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
		out  *string
	}{{"since", f.Since, &f.sinceAt}, {"until", f.Until, &f.untilAt}} {
		if t.in == "" {
			continue
		}
		v, err := parseAt(t.in, a.env.Now())
		if err != nil || !strings.Contains(v, "T") {
			return fmt.Errorf("--%s %q: must be an RFC 3339 time or a duration ago such as 1h", t.name, t.in)
		}
		*t.out = v
	}
	return nil
}

func (a *app) eventsCmd() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Read the audit log: every event of the organization, oldest first",
		Example: `  anvilctl events --aggregate machine/4c4c4544-0035-4b10-8056-b7c04f4e3332 --since 24h
  anvilctl events --type pool.apply_requested --actor "token:ab12 (ci-bot)" -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.resolveTimes(&o.events); err != nil {
				return err
			}
			r, _ := lookupResource("events")
			items, next, err := a.list(cmd.Context(), r, o)
			if err != nil {
				return err
			}
			if err := printObjects(cmd.OutOrStdout(), a.output, eventCols, items); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "(more: raise --limit, or pass 0 for every page)\n")
			}
			return nil
		},
	}
	a.eventFlags(cmd, &o.events)
	cmd.Flags().IntVar(&o.Limit, "limit", 0, "at most this many events (0: all)")
	return cmd
}
