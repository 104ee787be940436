package vmtest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ProbeReport is what ProbeScript printed in one boot: its lines by topic,
// in order.
type ProbeReport map[string][]string

var probeLine = regexp.MustCompile(`anvil-selftest: ([a-z0-9-]+): ?(.*)$`)

// ProbeReports splits a console into the probe's reports, one per boot
// (each ends with the "done" topic).
func ProbeReports(console string) []ProbeReport {
	var out []ProbeReport
	cur := ProbeReport{}
	for _, l := range strings.Split(console, "\n") {
		m := probeLine.FindStringSubmatch(strings.TrimRight(l, "\r"))
		if m == nil {
			continue
		}
		if m[1] == "done" {
			out = append(out, cur)
			cur = ProbeReport{}
			continue
		}
		cur[m[1]] = append(cur[m[1]], m[2])
	}
	return out
}

// Text is a topic's lines, joined by newlines.
func (r ProbeReport) Text(topic string) string { return strings.Join(r[topic], "\n") }

// Unit returns the `systemctl show` properties the probe printed for a
// unit (LoadState, ActiveState, SubState, Result, ExecMainStatus,
// ActiveEnterTimestampMonotonic).
func (r ProbeReport) Unit(name string) map[string]string {
	props := map[string]string{}
	for _, l := range r["unit"] {
		fields := strings.Fields(l)
		if len(fields) == 0 || fields[0] != name {
			continue
		}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			props[k] = v
		}
	}
	return props
}

// IsEnabled is `systemctl is-enabled` of a unit, as the probe printed it.
func (r ProbeReport) IsEnabled(name string) string {
	for _, l := range r["is-enabled"] {
		if u, state, ok := strings.Cut(l, " "); ok && u == name {
			return state
		}
	}
	return ""
}

// String lists the report, topic by topic.
func (r ProbeReport) String() string {
	var topics []string
	for k := range r {
		topics = append(topics, k)
	}
	slices.Sort(topics)
	var b strings.Builder
	for _, k := range topics {
		for _, l := range r[k] {
			fmt.Fprintf(&b, "  %s: %s\n", k, l)
		}
	}
	return b.String()
}

// WithoutKernelCmdline drops the console lines that echo the kernel's
// command line (the kernel prints it, per-boot token included, as it does
// on Flatcar), so what is left can be searched for secrets.
func WithoutKernelCmdline(console string) string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if !strings.Contains(l, "ommand line: ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
