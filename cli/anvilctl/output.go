package anvilctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// Output formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

func checkFormat(f string) error {
	switch f {
	case FormatTable, FormatJSON, FormatYAML:
		return nil
	}
	return fmt.Errorf("--output %q: must be table, json or yaml", f)
}

// column is one column of a table: a header and how to read it from an
// object.
type column struct {
	Header string
	Get    func(obj map[string]any) string
}

// field is a column showing a dotted path of the object.
func field(header, path string) column {
	return column{Header: header, Get: func(o map[string]any) string { return str(lookup(o, path)) }}
}

// lookup walks a dotted path ("progress.done") through nested objects.
func lookup(o any, path string) any {
	for _, p := range strings.Split(path, ".") {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

// str renders a scalar for a table cell: "" for nothing, times as RFC 3339
// in UTC to the second, lists joined, maps as k=v.
func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil && len(x) >= 20 {
			return t.UTC().Format(time.RFC3339)
		}
		return x
	case json.Number:
		return x.String()
	case float64:
		return fmt.Sprint(x)
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = str(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + str(x[k])
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// printValue writes v as JSON or YAML.
func printValue(w io.Writer, format string, v any) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case FormatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("format %q is not a data format", format)
}

// printTable writes objects as an aligned table; an empty cell shows "-".
func printTable(w io.Writer, cols []column, objs []map[string]any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.Header
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, o := range objs {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c.Get(o)
			if cells[i] == "" {
				cells[i] = "-"
			}
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(cells[i])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// printObjects writes a list in the chosen format: a table, or
// {"items": [...]} as JSON or YAML.
func printObjects(w io.Writer, format string, cols []column, objs []map[string]any) error {
	if format == FormatTable {
		return printTable(w, cols, objs)
	}
	if objs == nil {
		objs = []map[string]any{}
	}
	return printValue(w, format, map[string]any{"items": objs})
}

// printObject writes one object: a one-row table, or the object itself.
func printObject(w io.Writer, format string, cols []column, obj map[string]any) error {
	if format == FormatTable {
		return printTable(w, cols, []map[string]any{obj})
	}
	return printValue(w, format, obj)
}

// describe writes an object for people: its fields as an indented,
// key-sorted outline (YAML without the quoting noise).
func describe(w io.Writer, obj map[string]any) error {
	var b bytes.Buffer
	outline(&b, obj, 0)
	_, err := w.Write(b.Bytes())
	return err
}

func outline(b *bytes.Buffer, v any, depth int) {
	pad := strings.Repeat("  ", depth)
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			label := pad + title(k) + ":"
			switch c := x[k].(type) {
			case map[string]any:
				if len(c) == 0 {
					continue
				}
				b.WriteString(label + "\n")
				outline(b, c, depth+1)
			case []any:
				if len(c) == 0 {
					continue
				}
				b.WriteString(label + "\n")
				outline(b, c, depth+1)
			case nil:
			default:
				if s := str(c); s != "" {
					b.WriteString(label + " " + s + "\n")
				}
			}
		}
	case []any:
		for _, e := range x {
			switch c := e.(type) {
			case map[string]any:
				var sub bytes.Buffer
				outline(&sub, c, depth+1)
				s := sub.String()
				// the first line of an object in a list carries the dash
				s = pad + "- " + strings.TrimPrefix(s, pad+"  ")
				b.WriteString(s)
			default:
				b.WriteString(pad + "- " + str(c) + "\n")
			}
		}
	}
}

// title turns "current_revision" into "Current Revision".
func title(k string) string {
	words := strings.Split(k, "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}
