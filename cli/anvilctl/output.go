package anvilctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// Output formats (-o).
const (
	FormatTable          = "table" // the default; also ""
	FormatWide           = "wide"
	FormatName           = "name"
	FormatJSON           = "json"
	FormatYAML           = "yaml"
	FormatJSONPath       = "jsonpath"
	FormatJSONPathAsJSON = "jsonpath-as-json"
	FormatCustomColumns  = "custom-columns"
)

// outputFormats is what -o takes, for messages and completion.
var outputFormats = []string{"table", "wide", "name", "json", "yaml", "jsonpath=…", "jsonpath-file=…", "jsonpath-as-json=…",
	"custom-columns=…", "custom-columns-file=…"}

// printer is -o with the flags that shape tables: how objects print.
type printer struct {
	format     string
	template   string             // jsonpath: the template as given
	jp         *jsonpath.JSONPath // jsonpath, jsonpath-as-json
	columns    []customColumn     // custom-columns
	noHeaders  bool
	showLabels bool
	sortBy     string
	sortJP     *jsonpath.JSONPath
	// stderr takes "No resources found." for an empty table.
	stderr io.Writer
}

type customColumn struct {
	header string
	path   string
	jp     *jsonpath.JSONPath
}

// parseOutput reads -o. readFile reads the *-file variants.
func parseOutput(spec string, readFile func(string) ([]byte, error)) (*printer, error) {
	p := &printer{}
	name, arg, hasArg := strings.Cut(spec, "=")
	bad := func(why string) error {
		return fmt.Errorf("--output %q: %s", spec, why)
	}
	switch name {
	case "", FormatTable:
		p.format = FormatTable
	case FormatWide, FormatName, FormatJSON, FormatYAML:
		p.format = name
	case FormatJSONPath, "jsonpath-file", FormatJSONPathAsJSON:
		if !hasArg || arg == "" {
			return nil, bad("needs a template: -o jsonpath='{.items[*].name}'")
		}
		if name == "jsonpath-file" {
			b, err := readFile(arg)
			if err != nil {
				return nil, bad(err.Error())
			}
			arg, name = string(b), FormatJSONPath
		}
		p.format, p.template = name, arg
		p.jp = jsonpath.New("output").AllowMissingKeys(true)
		if err := p.jp.Parse(arg); err != nil {
			return nil, bad("the template: " + err.Error())
		}
		if name == FormatJSONPathAsJSON {
			p.jp.EnableJSONOutput(true)
		}
	case FormatCustomColumns, "custom-columns-file":
		if !hasArg || arg == "" {
			return nil, bad("needs columns: -o custom-columns=NAME:.name,STATUS:.status")
		}
		var cols []customColumn
		var err error
		if name == "custom-columns-file" {
			b, rerr := readFile(arg)
			if rerr != nil {
				return nil, bad(rerr.Error())
			}
			cols, err = parseColumnsFile(string(b))
		} else {
			cols, err = parseColumns(arg)
		}
		if err != nil {
			return nil, bad(err.Error())
		}
		p.format, p.columns = FormatCustomColumns, cols
	default:
		return nil, bad("must be one of " + strings.Join(outputFormats, ", "))
	}
	return p, nil
}

// setSortBy compiles --sort-by, a JSONPath such as .name or {.created_at}.
func (p *printer) setSortBy(expr string) error {
	if expr == "" {
		return nil
	}
	rel, err := relaxedJSONPath(expr)
	if err != nil {
		return fmt.Errorf("--sort-by %q: %w", expr, err)
	}
	jp := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := jp.Parse(rel); err != nil {
		return fmt.Errorf("--sort-by %q: %w", expr, err)
	}
	p.sortBy, p.sortJP = expr, jp
	return nil
}

// human says the format prints tables for people (the commands' own
// wording goes with it).
func (p *printer) human() bool { return p.format == FormatTable || p.format == FormatWide }

// data says the format prints the objects themselves (JSON, YAML or a
// JSONPath template of them).
func (p *printer) data() bool {
	switch p.format {
	case FormatJSON, FormatYAML, FormatJSONPath, FormatJSONPathAsJSON:
		return true
	}
	return false
}

var relaxedRE = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// relaxedJSONPath turns name.sub, .name.sub, {name.sub} or {.name.sub}
// into {.name.sub}, as kubectl's custom columns and --sort-by do.
func relaxedJSONPath(expr string) (string, error) {
	m := relaxedRE.FindStringSubmatch(expr)
	if m == nil {
		return "", fmt.Errorf("want a path such as .name, .progress.done or {.labels.rack}")
	}
	field := m[1]
	if field == "" {
		field = m[2]
	}
	return "{." + field + "}", nil
}

func parseColumns(spec string) ([]customColumn, error) {
	var cols []customColumn
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("column %q: want HEADER:.path", part)
		}
		c, err := newColumn(header, path)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// parseColumnsFile reads kubectl's custom-columns-file: a line of headers,
// then a line of paths.
func parseColumnsFile(text string) ([]customColumn, error) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		return nil, fmt.Errorf("the columns file must have two lines: headers, then paths")
	}
	heads, paths := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(heads) != len(paths) {
		return nil, fmt.Errorf("the columns file has %d headers and %d paths", len(heads), len(paths))
	}
	var cols []customColumn
	for i := range heads {
		c, err := newColumn(heads[i], paths[i])
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, nil
}

func newColumn(header, path string) (customColumn, error) {
	rel, err := relaxedJSONPath(path)
	if err != nil {
		return customColumn{}, fmt.Errorf("column %s: %w", header, err)
	}
	jp := jsonpath.New(header).AllowMissingKeys(true)
	if err := jp.Parse(rel); err != nil {
		return customColumn{}, fmt.Errorf("column %s: %w", header, err)
	}
	return customColumn{header: header, path: path, jp: jp}, nil
}

// plain turns decoded JSON into what the JSONPath engine compares and
// prints as kubectl does: json.Number as int64 or float64.
func plain(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	}
	return v
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

// labelsColumn is --show-labels' column.
var labelsColumn = column{Header: "LABELS", Get: func(o map[string]any) string { return str(o["labels"]) }}

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

// tableWriter aligns rows as text/tabwriter does (three spaces between
// columns), and keeps its widths so that the rows a watch adds later line
// up with the first ones.
type tableWriter struct {
	widths []int
}

func (t *tableWriter) fit(rows [][]string) {
	for _, r := range rows {
		for i, c := range r {
			for len(t.widths) <= i {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
}

func (t *tableWriter) write(w io.Writer, rows [][]string) error {
	t.fit(rows)
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)+3))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cells renders one object's row; an empty cell shows "-".
func cells(cols []column, o map[string]any, prefix string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Get(o)
		if out[i] == "" {
			out[i] = "-"
		}
		out[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(out[i])
	}
	if prefix != "" && len(out) > 0 {
		out[0] = prefix + out[0]
	}
	return out
}

func headers(cols []column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Header
	}
	return out
}

// printTable writes objects as an aligned table with a header.
func printTable(w io.Writer, cols []column, objs []map[string]any) error {
	rows := [][]string{headers(cols)}
	for _, o := range objs {
		rows = append(rows, cells(cols, o, ""))
	}
	return (&tableWriter{}).write(w, rows)
}

// group is objects of one kind to print; r is nil for what is not a kind
// (the configuration, the catalog).
type group struct {
	r     *resource
	items []map[string]any
	cols  []column // the table's columns when r is nil
}

// tableColumns are a group's columns for table and wide output.
func (p *printer) tableColumns(g group) []column {
	cols := g.cols
	if g.r != nil {
		cols = g.r.cols
		if p.format == FormatWide {
			cols = append(append([]column{}, cols...), g.r.wide...)
		}
	}
	if p.showLabels {
		cols = append(append([]column{}, cols...), labelsColumn)
	}
	return cols
}

// customCells renders an object's custom columns as kubectl does: values
// joined by commas, <none> for nothing.
func (p *printer) customCells(o map[string]any) ([]string, error) {
	data := plain(o)
	out := make([]string, len(p.columns))
	for i, c := range p.columns {
		res, err := c.jp.FindResults(data)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.header, err)
		}
		var vals []string
		for _, r := range res {
			for _, v := range r {
				vals = append(vals, strings.NewReplacer("\t", " ", "\n", " ").Replace(fmt.Sprint(v.Interface())))
			}
		}
		if len(vals) == 0 {
			vals = []string{"<none>"}
		}
		out[i] = strings.Join(vals, ",")
	}
	return out, nil
}

// nameOf is kubectl's -o name: kind/name.
func nameOf(r *resource, o map[string]any) string {
	if r == nil {
		return ""
	}
	return r.Name + "/" + r.idOf(o)
}

// sorted orders items by --sort-by (stable; items without the field
// first).
func (p *printer) sorted(items []map[string]any) ([]map[string]any, error) {
	if p.sortJP == nil || len(items) < 2 {
		return items, nil
	}
	keys := make([]any, len(items))
	for i, it := range items {
		res, err := p.sortJP.FindResults(plain(it))
		if err != nil {
			return nil, fmt.Errorf("--sort-by %q: %w", p.sortBy, err)
		}
		var vals []any
		for _, r := range res {
			for _, v := range r {
				vals = append(vals, v.Interface())
			}
		}
		switch len(vals) {
		case 0:
		case 1:
			keys[i] = vals[0]
		default:
			return nil, fmt.Errorf("--sort-by %q: finds %d values in one object; it must find one", p.sortBy, len(vals))
		}
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lessValue(keys[idx[a]], keys[idx[b]]) })
	out := make([]map[string]any, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

// lessValue orders sort keys: nothing first, numbers by value, times by
// time, the rest as text.
func lessValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b != nil
	}
	num := func(v any) (float64, bool) {
		switch x := v.(type) {
		case int64:
			return float64(x), true
		case float64:
			return x, true
		case string:
			f, err := strconv.ParseFloat(x, 64)
			return f, err == nil
		}
		return 0, false
	}
	if x, ok := num(a); ok {
		if y, ok := num(b); ok {
			return x < y
		}
	}
	if x, ok := a.(bool); ok {
		if y, ok := b.(bool); ok {
			return !x && y
		}
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			tx, ex := time.Parse(time.RFC3339Nano, x)
			ty, ey := time.Parse(time.RFC3339Nano, y)
			if ex == nil && ey == nil {
				return tx.Before(ty)
			}
			return x < y
		}
	}
	return fmt.Sprint(a) < fmt.Sprint(b)
}

// list is the kubectl List that several objects print as.
func list(items []map[string]any) map[string]any {
	if items == nil {
		items = []map[string]any{}
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
}

// print writes groups of objects. single says one object was asked for by
// name: JSON, YAML and JSONPath then print it alone; otherwise they print
// one List of every object (as kubectl does, even for one item).
func (p *printer) print(w io.Writer, groups []group, single bool) error {
	for i := range groups {
		s, err := p.sorted(groups[i].items)
		if err != nil {
			return err
		}
		groups[i].items = s
	}
	var all []map[string]any
	for _, g := range groups {
		all = append(all, g.items...)
	}
	switch p.format {
	case FormatJSON, FormatYAML, FormatJSONPath, FormatJSONPathAsJSON:
		var v any = list(all)
		if single && len(all) == 1 {
			v = all[0]
		}
		return p.printData(w, v)
	case FormatName:
		for _, g := range groups {
			if g.r == nil && len(g.items) > 0 {
				return usageErr(fmt.Errorf("-o name: this command prints no objects of a kind; use -o json, yaml or jsonpath"))
			}
			for _, o := range g.items {
				if _, err := fmt.Fprintln(w, nameOf(g.r, o)); err != nil {
					return err
				}
			}
		}
		return nil
	case FormatCustomColumns:
		if len(all) == 0 {
			p.noneFound()
			return nil
		}
		var rows [][]string
		if !p.noHeaders {
			rows = append(rows, p.customHeaders())
		}
		for _, o := range all {
			r, err := p.customCells(o)
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return (&tableWriter{}).write(w, rows)
	}
	// table, wide: a table per kind, the names prefixed with their kind
	// when there are several kinds
	if len(all) == 0 && !(single && len(groups) == 1) {
		p.noneFound()
		return nil
	}
	first := true
	for _, g := range groups {
		if len(g.items) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		if err := p.writeTable(w, &tableWriter{}, g, len(groups) > 1, !p.noHeaders, g.items); err != nil {
			return err
		}
	}
	return nil
}

func (p *printer) customHeaders() []string {
	h := make([]string, len(p.columns))
	for i, c := range p.columns {
		h[i] = c.header
	}
	return h
}

func (p *printer) noneFound() {
	if p.stderr != nil {
		fmt.Fprintln(p.stderr, "No resources found.")
	}
}

// writeTable writes a group's rows (with its header when head).
func (p *printer) writeTable(w io.Writer, t *tableWriter, g group, prefixKind, head bool, items []map[string]any) error {
	cols := p.tableColumns(g)
	prefix := ""
	if prefixKind && g.r != nil {
		prefix = g.r.Name + "/"
	}
	var rows [][]string
	if head {
		rows = append(rows, headers(cols))
	}
	for _, o := range items {
		rows = append(rows, cells(cols, o, prefix))
	}
	return t.write(w, rows)
}

// printData writes a value as JSON, YAML or through the JSONPath template.
func (p *printer) printData(w io.Writer, v any) error {
	switch p.format {
	case FormatJSON, FormatYAML:
		return printValue(w, p.format, v)
	}
	if err := p.jp.Execute(w, plain(v)); err != nil {
		return fmt.Errorf("-o jsonpath: the template %q: %w", p.template, err)
	}
	return nil
}

// printObject writes one object that is not a kind's (an answer of a
// command): for people through the given function, else in the format.
func (p *printer) printObject(w io.Writer, r *resource, obj map[string]any, human func() error) error {
	if p.human() {
		return human()
	}
	return p.print(w, []group{{r: r, items: []map[string]any{obj}}}, true)
}

// readFileArg reads a file named by an -o variant.
func readFileArg(path string) ([]byte, error) { return os.ReadFile(path) }

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

// structToMap turns a value into decoded JSON, for the printers.
func structToMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = decode(b, &m)
	return m
}
