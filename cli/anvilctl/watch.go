package anvilctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
)

// Watch events, as kubectl names them.
const (
	watchAdded    = "ADDED"
	watchModified = "MODIFIED"
	watchDeleted  = "DELETED"
)

// watcher prints the objects of a get and then each change to them. The
// API has no watch of lists, so it asks again every --watch-interval and
// prints what renders differently: a row whose cells changed, an object
// whose JSON changed, one that appeared or went away.
type watcher struct {
	a      *app
	p      *printer
	w      io.Writer
	stderr io.Writer
	reqs   []request
	o      *getCmdOptions
	// per request: the objects last seen, by name, with their rendering
	seen   []map[string]seenObject
	tables []*tableWriter
	headed []bool
	custom *tableWriter
	// customHeaded: the custom columns' header is out
	customHeaded bool
	// the rows of this poll, written together so that its columns line
	// up (the first poll's whole list, as kubectl prints it)
	tableRows  [][][]string
	customRows [][]string
	documents  int // JSON and YAML documents written
	failing    bool
}

type seenObject struct {
	obj       map[string]any
	rendering string
}

func (a *app) watchGet(ctx context.Context, cmd *cobra.Command, p *printer, reqs []request, o *getCmdOptions) error {
	wt := &watcher{a: a, p: p, w: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(), reqs: reqs, o: o,
		seen: make([]map[string]seenObject, len(reqs)), tables: make([]*tableWriter, len(reqs)), headed: make([]bool, len(reqs)),
		custom: &tableWriter{}, tableRows: make([][][]string, len(reqs))}
	for i := range reqs {
		wt.seen[i] = map[string]seenObject{}
		wt.tables[i] = &tableWriter{}
	}
	first := true
	for {
		current, err := wt.poll(ctx)
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: the way a watch ends
		case err != nil && transient(err):
			if !wt.failing {
				fmt.Fprintf(wt.stderr, "watch: %v (retrying)\n", err)
			}
			wt.failing = true
		case err != nil:
			return err
		default:
			wt.failing = false
			if err := wt.show(current, first); err != nil {
				return err
			}
			first = false
		}
		t := time.NewTimer(o.watchInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// transient says an error may pass: the network (no answer, a connection
// refused or reset, an answer cut short), or a gateway or service that
// does not answer for now (502, 503, 504). Anything else (another problem
// the API answered, a missing organization, a bad template) would fail the
// same way at every poll, so it ends the watch.
func transient(err error) bool {
	if p, ok := client.AsProblem(err); ok {
		return p.Status == http.StatusServiceUnavailable || p.Status == http.StatusBadGateway || p.Status == http.StatusGatewayTimeout
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// poll reads every request: for each, the objects by name, in order.
func (wt *watcher) poll(ctx context.Context) ([][]named, error) {
	out := make([][]named, len(wt.reqs))
	for i, q := range wt.reqs {
		if len(q.names) == 0 {
			items, _, err := wt.a.list(ctx, q.r, &wt.o.getOptions)
			if err != nil {
				return nil, err
			}
			items, err = wt.p.sorted(items)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				out[i] = append(out[i], named{q.r.idOf(it), it})
			}
			continue
		}
		for _, name := range q.names {
			obj, err := wt.a.getOne(ctx, q.r, &wt.o.getOptions, name)
			if isStatus(err, http.StatusNotFound) {
				continue // gone, or not there yet
			}
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", q.r.Name, name, err)
			}
			out[i] = append(out[i], named{name, obj})
		}
	}
	return out, nil
}

type named struct {
	name string
	obj  map[string]any
}

// show prints what changed since the last poll (everything the first
// time, unless --watch-only).
func (wt *watcher) show(current [][]named, first bool) error {
	for i, objs := range current {
		next := map[string]seenObject{}
		for _, n := range objs {
			r, err := wt.render(i, n.obj)
			if err != nil {
				return err
			}
			next[n.name] = seenObject{n.obj, r}
			old, known := wt.seen[i][n.name]
			if first && wt.o.watchOnly {
				continue
			}
			switch {
			case !known:
				err = wt.emit(i, watchAdded, n.obj)
			case old.rendering != r:
				err = wt.emit(i, watchModified, n.obj)
			}
			if err != nil {
				return err
			}
		}
		var gone []string
		for name := range wt.seen[i] {
			if _, ok := next[name]; !ok {
				gone = append(gone, name)
			}
		}
		sort.Strings(gone)
		for _, name := range gone {
			if err := wt.emit(i, watchDeleted, wt.seen[i][name].obj); err != nil {
				return err
			}
		}
		wt.seen[i] = next
	}
	return wt.flushRows()
}

// flushRows writes the table rows emit gathered in this poll.
func (wt *watcher) flushRows() error {
	for i, rows := range wt.tableRows {
		if len(rows) > 0 {
			if err := wt.tables[i].write(wt.w, rows); err != nil {
				return err
			}
		}
		wt.tableRows[i] = nil
	}
	rows := wt.customRows
	wt.customRows = nil
	if len(rows) == 0 {
		return nil
	}
	return wt.custom.write(wt.w, rows)
}

// render is how an object prints, to tell whether it changed.
func (wt *watcher) render(i int, obj map[string]any) (string, error) {
	p := wt.p
	switch p.format {
	case FormatTable, FormatWide:
		return strings.Join(cells(p.tableColumns(group{r: wt.reqs[i].r}), obj, ""), "\t"), nil
	case FormatCustomColumns:
		c, err := p.customCells(obj)
		return strings.Join(c, "\t"), err
	case FormatName:
		return nameOf(wt.reqs[i].r, obj), nil
	}
	b, err := json.Marshal(obj)
	return string(b), err
}

// emit prints one object that was added, changed or deleted (a table
// row at the end of the poll, see flushRows).
func (wt *watcher) emit(i int, event string, obj map[string]any) error {
	p, r := wt.p, wt.reqs[i].r
	switch p.format {
	case FormatTable, FormatWide:
		cols := p.tableColumns(group{r: r})
		prefix := ""
		if len(wt.reqs) > 1 {
			prefix = r.Name + "/"
		}
		var rows [][]string
		if !wt.headed[i] && !p.noHeaders {
			h := headers(cols)
			if wt.o.watchEvents {
				h = append([]string{"EVENT"}, h...)
			}
			rows = append(rows, h)
		}
		wt.headed[i] = true
		row := cells(cols, obj, prefix)
		if wt.o.watchEvents {
			row = append([]string{event}, row...)
		}
		wt.tableRows[i] = append(wt.tableRows[i], append(rows, row)...)
		return nil
	case FormatCustomColumns:
		var rows [][]string
		if !wt.customHeaded && !p.noHeaders {
			h := p.customHeaders()
			if wt.o.watchEvents {
				h = append([]string{"EVENT"}, h...)
			}
			rows = append(rows, h)
		}
		wt.customHeaded = true
		row, err := p.customCells(obj)
		if err != nil {
			return err
		}
		if wt.o.watchEvents {
			row = append([]string{event}, row...)
		}
		wt.customRows = append(wt.customRows, append(rows, row)...)
		return nil
	case FormatName:
		line := nameOf(r, obj)
		if wt.o.watchEvents {
			line = event + " " + line
		}
		_, err := fmt.Fprintln(wt.w, line)
		return err
	}
	var v any = obj
	if wt.o.watchEvents {
		v = map[string]any{"type": event, "object": obj}
	}
	if p.format == FormatYAML && wt.documents > 0 {
		fmt.Fprintln(wt.w, "---")
	}
	wt.documents++
	return p.printData(wt.w, v)
}
