package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/gateway/ports"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// machineStatuses are the lifecycle statuses, for the list's filter
// (docs/machine-states.md).
var machineStatuses = []string{"preregistered", "ready_unassigned", "pending", "provisioning", "ready", "reconfiguring",
	"entering_maintenance", "maintenance", "unassigning", "deleting", "failed"}

// machine is a machine with its version (the API's answer to one machine).
type machine struct {
	regapi.Machine
	Version uint64 `json:"version"`
}

type machineListData struct {
	Items    []regapi.Machine
	Next     string
	Pool     string
	Status   string
	Selector string
	Cursor   string
	Pools    []rev.PoolSummary
	Statuses []string
	Query    string // the filters, for the live refresh and the next page
	Now      time.Time
}

func (c *Console) machineList(w http.ResponseWriter, r *http.Request, v view) {
	q := r.URL.Query()
	d := machineListData{Pool: q.Get("pool"), Status: q.Get("status"), Selector: q.Get("selector"), Cursor: q.Get("cursor"),
		Statuses: machineStatuses, Now: time.Now()}
	api := url.Values{"limit": {"50"}}
	filters := url.Values{}
	for k, val := range map[string]string{"pool": d.Pool, "status": d.Status, "selector": d.Selector} {
		if val != "" {
			api.Set(k, val)
			filters.Set(k, val)
		}
	}
	d.Query = filters.Encode()
	if d.Cursor != "" {
		api.Set("cursor", d.Cursor)
	}
	var page ports.MachinePage
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "machines"), query: api}, &page); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			v.Flash = "The filter was refused: " + fieldText(err) + " Fix it above; the list shows no machines until then."
		} else {
			c.fail(w, r, v, "listing machines", err)
			return
		}
	}
	d.Items, d.Next = page.Items, page.Next
	if r.Header.Get("X-Console-Fragment") == "rows" {
		v.Data, v.Fragment = d, "machine-rows"
		c.render(w, r, http.StatusOK, "machines", v)
		return
	}
	d.Pools, _ = listAll[rev.PoolSummary](r.Context(), c, v.S.token, orgPath(v.Org, "pools"))
	v.Title, v.Section, v.Data = "Machines", "machines", d
	c.render(w, r, http.StatusOK, "machines", v)
}

// fieldText is a validation error's fields as one sentence.
func fieldText(err error) string {
	ae, ok := err.(*apiError)
	if !ok {
		return err.Error()
	}
	if len(ae.Errors) == 0 {
		return ae.Detail
	}
	var parts []string
	for _, f := range ae.Errors {
		parts = append(parts, f.Field+" "+f.Reason)
	}
	return strings.Join(parts, "; ") + "."
}

type machineFormData struct {
	Form   url.Values
	Errors map[string]string
	Pools  []rev.PoolSummary
}

func (c *Console) machineNew(w http.ResponseWriter, r *http.Request, v view) {
	c.renderMachineForm(w, r, v, http.StatusOK, url.Values{"pool": {r.URL.Query().Get("pool")}}, nil)
}

func (c *Console) renderMachineForm(w http.ResponseWriter, r *http.Request, v view, status int, form url.Values, errs map[string]string) {
	pools, _ := listAll[rev.PoolSummary](r.Context(), c, v.S.token, orgPath(v.Org, "pools"))
	v.Title, v.Section, v.Data = "Register Machine", "machines", machineFormData{Form: form, Errors: errs, Pools: pools}
	c.render(w, r, status, "machine_new", v)
}

// parseMap reads "key=value" lines (or comma-separated pairs) into a map;
// a line without "=" is an error naming it.
func parseMap(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ',' }) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out, nil
}

func (c *Console) machineRegister(w http.ResponseWriter, r *http.Request, v view) {
	f := r.PostForm
	errs := map[string]string{}
	body := map[string]any{"uuid": strings.TrimSpace(f.Get("uuid"))}
	if h := strings.TrimSpace(f.Get("hostname")); h != "" {
		body["hostname"] = h
	}
	if p := f.Get("pool"); p != "" {
		body["pool"] = p
	}
	if labels, err := parseMap(f.Get("labels")); err != nil {
		errs["labels"] = err.Error() + "; write one key=value per line"
	} else if len(labels) > 0 {
		body["labels"] = labels
	}
	if s := strings.TrimSpace(f.Get("upgrade_index")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			errs["upgrade_index"] = "must be a whole number (1 upgrades first); leave it empty for none"
		}
		body["upgrade_index"] = n
	}
	if f.Get("control_plane") == "on" {
		body["control_plane"] = true
	}
	if len(errs) > 0 {
		c.renderMachineForm(w, r, v, http.StatusUnprocessableEntity, f, errs)
		return
	}
	var m machine
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "machines"), body: body, idempotency: f.Get("idem")}, &m); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			c.renderMachineForm(w, r, v, http.StatusUnprocessableEntity, f, fieldMap(err))
			return
		}
		c.fail(w, r, v, "registering the machine", err)
		return
	}
	flash(w, r, "Machine "+m.UUID+" is registered. Power it on with the iPXE chain URL of the Organization page; it appears here when it boots.")
	http.Redirect(w, r, v.orgURL("machines", m.UUID)+"?after="+strconv.FormatUint(m.Version, 10), http.StatusSeeOther)
}

type machineDetailData struct {
	M          machine
	Tab        string
	At         string
	Revisions  *ports.MachineRevisions
	Operations []rolloutapi.Operation
	Rollouts   []rolloutapi.Rollout
	// MoreRollouts: the pool has rollouts older than those shown; the
	// rollouts page lists them all
	MoreRollouts bool
	Log          *bootapi.StartupLog
	LogMissing   bool
	Now          time.Time
	BootURL      string
}

// getMachine reads a machine; after a write (?after=N) it waits briefly
// until the read model shows version N, so the page shows what was done.
func (c *Console) getMachine(ctx context.Context, token, org, uuid, at string, after uint64) (machine, error) {
	var m machine
	q := url.Values{}
	if at != "" {
		q.Set("at", at)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := c.do(ctx, token, call{method: "GET", path: orgPath(org, "machines", uuid), query: q}, &m)
		if (err == nil && m.Version >= after) || (err != nil && statusOf(err) != http.StatusNotFound) || after == 0 || time.Now().After(deadline) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Console) machineDetail(w http.ResponseWriter, r *http.Request, v view) {
	q := r.URL.Query()
	uuid := r.PathValue("uuid")
	d := machineDetailData{Tab: q.Get("tab"), At: atParam(q.Get("at")), Now: time.Now(), BootURL: c.bootURL}
	after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
	m, err := c.getMachine(r.Context(), v.S.token, v.Org, uuid, d.At, after)
	if err != nil {
		v.Section = "machines"
		c.fail(w, r, v, "opening machine "+uuid, err)
		return
	}
	d.M = m
	if d.At != "" {
		d.Tab = "info" // only the machine itself travels in time
	}
	switch d.Tab {
	case "revisions":
		var mr ports.MachineRevisions
		if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "machines", m.UUID, "revisions")}, &mr); err != nil {
			c.fail(w, r, v, "reading the machine's revisions", err)
			return
		}
		sort.SliceStable(mr.Revisions, func(i, j int) bool { return mr.Revisions[i].Number > mr.Revisions[j].Number })
		d.Revisions = &mr
	case "operations":
		// The API lists operations by pool, status and kind, not by
		// machine: take every page of the one-machine operations (a first
		// page of the organization's newest would miss this machine's
		// older ones) and keep this one's, and the rollouts of its pool.
		ops, err := listEvery[rolloutapi.Operation](r.Context(), c, v.S.token, orgPath(v.Org, "operations"),
			url.Values{"kind": {"machine"}, "limit": {"500"}})
		if err != nil {
			c.fail(w, r, v, "reading the machine's operations", err)
			return
		}
		for _, op := range ops {
			if op.Machine == m.UUID {
				d.Operations = append(d.Operations, op)
			}
		}
		if m.Pool != "" {
			var ros rolloutapi.RolloutList
			if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "rollouts"),
				query: url.Values{"pool": {m.Pool}, "limit": {"20"}}}, &ros); err != nil {
				c.fail(w, r, v, "reading the rollouts of pool "+m.Pool, err)
				return
			}
			d.Rollouts, d.MoreRollouts = ros.Items, ros.Next != ""
		}
	case "log":
		var l bootapi.StartupLog
		_, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "machines", m.UUID, "startup-log")}, &l)
		switch {
		case statusOf(err) == http.StatusNotFound:
			d.LogMissing = true
		case err != nil:
			c.fail(w, r, v, "reading the machine's startup log", err)
			return
		default:
			d.Log = &l
		}
	default:
		d.Tab = "info"
	}
	if r.Header.Get("X-Console-Fragment") == "machine" {
		v.Data, v.Fragment = d, "machine-live"
		c.render(w, r, http.StatusOK, "machine", v)
		return
	}
	name := m.Hostname
	if name == "" {
		name = m.UUID
	}
	v.Title, v.Section, v.Data = "Machine "+name, "machines", d
	c.render(w, r, http.StatusOK, "machine", v)
}

// atParam reads a time-travel instant: a stream sequence, an RFC 3339
// time, or what a datetime-local field sends (taken as UTC).
func atParam(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return s
}

// machineActions says, for each action, what will happen, in words for
// the confirmation page.
type machineAction struct {
	Name, Button, Explain string
	Danger                bool
}

func actionOf(name string, m machine) (machineAction, bool) {
	host := m.Hostname
	if host == "" {
		host = m.UUID
	}
	switch name {
	case "assign":
		return machineAction{Name: name, Button: "Assign to pool",
			Explain: host + " joins the pool you choose. If the pool has an applied revision, the machine is provisioned with it as soon as it boots (a machine waiting in iPXE boots at its next attempt), then joins the pool's cluster as a node."}, true
	case "unassign":
		return machineAction{Name: name, Button: "Unassign", Danger: true,
			Explain: host + " leaves pool " + m.Pool + " gracefully: its node is cordoned and drained (PodDisruptionBudgets hold), deleted from the cluster, and the machine goes back to waiting in iPXE, unassigned."}, true
	case "force-unassign":
		return machineAction{Name: name, Button: "Force unassign", Danger: true,
			Explain: host + " leaves pool " + m.Pool + " at once, without a drain: its pods are not evicted first. Use it only for a machine that is lost or stuck; its node is still deleted from the cluster."}, true
	case "maintenance-on":
		return machineAction{Name: name, Button: "Enter maintenance",
			Explain: host + " is cordoned and drained; rollouts skip it until maintenance ends. It keeps running, so you can power it off for a repair once the drain is done."}, true
	case "maintenance-off":
		return machineAction{Name: name, Button: "End maintenance",
			Explain: host + " goes back to the status it had before maintenance and is uncordoned."}, true
	case "delete":
		return machineAction{Name: name, Button: "Delete machine", Danger: true,
			Explain: host + " is deleted from the inventory. Graceful (the default) cordons and drains first and can be aborted while it drains; unsafe skips the drain; forced removes it at once even if clean-up is stuck. If it boots again, it registers again as a new machine."}, true
	case "abort-deletion":
		return machineAction{Name: name, Button: "Abort deletion",
			Explain: "The graceful deletion of " + host + " stops: its node is uncordoned and it goes back to the status it had. Possible only while the drain has not completed."}, true
	}
	return machineAction{}, false
}

type machineConfirmData struct {
	M        machine
	Action   machineAction
	Pools    []rev.PoolSummary
	Revision int
	Reapply  bool
}

func (c *Console) machineConfirm(w http.ResponseWriter, r *http.Request, v view) {
	v.Section = "machines"
	uuid := r.PathValue("uuid")
	m, err := c.getMachine(r.Context(), v.S.token, v.Org, uuid, "", 0)
	if err != nil {
		c.fail(w, r, v, "opening machine "+uuid, err)
		return
	}
	d := machineConfirmData{M: m}
	name := r.URL.Query().Get("action")
	if name == "apply-revision" {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 || m.Pool == "" {
			c.showTrouble(w, r, v, trouble{Status: http.StatusBadRequest, Headline: "Which revision?",
				Happened: "The link names no revision of the machine's pool.", ToDo: "Open the machine's Revisions tab and pick one there."})
			return
		}
		d.Revision, d.Reapply = n, uint64(n) == m.CurrentRevision
		host := m.Hostname
		if host == "" {
			host = m.UUID
		}
		explain := "A rollout of one machine moves " + host + " to revision " + strconv.Itoa(n) + " of pool " + m.Pool +
			": cordon, drain, reboot into it, wait until the node is Ready, uncordon. The rest of the pool is not touched."
		if d.Reapply {
			explain = host + " already runs revision " + strconv.Itoa(n) + ". Reapplying reboots it into the same revision (cordon, drain, reboot, rejoin, uncordon): use it to recover a machine whose state drifted."
		}
		d.Action = machineAction{Name: name, Button: map[bool]string{true: "Reapply revision " + strconv.Itoa(n), false: "Roll to revision " + strconv.Itoa(n)}[d.Reapply], Explain: explain}
	} else {
		a, ok := actionOf(name, m)
		if !ok {
			c.showTrouble(w, r, v, trouble{Status: http.StatusBadRequest, Headline: "Unknown action",
				Happened: "The console knows no machine action " + strconv.Quote(name) + ".", ToDo: "Go back to the machine and use its buttons."})
			return
		}
		d.Action = a
		if name == "assign" {
			pools, err := listAll[rev.PoolSummary](r.Context(), c, v.S.token, orgPath(v.Org, "pools"))
			if err != nil {
				c.fail(w, r, v, "listing pools", err)
				return
			}
			d.Pools = pools
		}
	}
	v.Title, v.Data = d.Action.Button+"?", d
	c.render(w, r, http.StatusOK, "machine_confirm", v)
}

func (c *Console) machineAction(w http.ResponseWriter, r *http.Request, v view) {
	v.Section = "machines"
	uuid, action := r.PathValue("uuid"), r.PathValue("action")
	// No If-Match: a machine's version moves with every boot it records,
	// so an operator reading the confirmation would nearly always be
	// "stale"; the API's state machine refuses what the state forbids.
	cl := call{method: "POST", idempotency: r.PostFormValue("idem")}
	var done string
	switch action {
	case "assign":
		pool := r.PostFormValue("pool")
		cl.path, cl.body, done = orgPath(v.Org, "machines", uuid, "assign"), map[string]string{"pool": pool}, "Assigned to pool "+pool+"."
	case "unassign", "force-unassign", "abort-deletion":
		cl.path, done = orgPath(v.Org, "machines", uuid, action), map[string]string{
			"unassign": "Unassigning: the node is drained first; follow it under Operations.", "force-unassign": "Unassigned at once.",
			"abort-deletion": "The deletion is being aborted."}[action]
	case "maintenance-on":
		cl.path, done = orgPath(v.Org, "machines", uuid, "maintenance", "on"), "Entering maintenance: the node is cordoned and drained."
	case "maintenance-off":
		cl.path, done = orgPath(v.Org, "machines", uuid, "maintenance", "off"), "Maintenance ends."
	case "delete":
		policy := r.PostFormValue("policy")
		cl.method, cl.path, cl.query, cl.idempotency = "DELETE", orgPath(v.Org, "machines", uuid), url.Values{"policy": {policy}}, ""
		done = "Deleting with policy " + policy + "."
	default:
		c.showTrouble(w, r, v, trouble{Status: http.StatusNotFound, Headline: "Unknown action",
			Happened: "The console knows no machine action " + strconv.Quote(action) + ".", ToDo: "Go back to the machine and use its buttons."})
		return
	}
	var m machine
	if _, err := c.do(r.Context(), v.S.token, cl, &m); err != nil {
		c.fail(w, r, v, "doing “"+actionButton(action, m)+"” on machine "+uuid, err)
		return
	}
	flash(w, r, done)
	if action == "delete" {
		http.Redirect(w, r, v.orgURL("machines"), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, v.orgURL("machines", uuid)+"?after="+strconv.FormatUint(m.Version, 10), http.StatusSeeOther)
}

func actionButton(name string, m machine) string {
	a, _ := actionOf(name, m)
	if a.Button == "" {
		return name
	}
	return a.Button
}

func (c *Console) machineApplyRevision(w http.ResponseWriter, r *http.Request, v view) {
	v.Section = "machines"
	uuid := r.PathValue("uuid")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		c.showTrouble(w, r, v, trouble{Status: http.StatusBadRequest, Headline: "Which revision?", Happened: "The form names no revision.",
			ToDo: "Open the machine's Revisions tab and pick one there."})
		return
	}
	body := map[string]any{"pool": r.PostFormValue("pool"), "revision": n, "machine": uuid}
	var ro rolloutapi.Rollout
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "rollouts"), body: body, idempotency: r.PostFormValue("idem")}, &ro); err != nil {
		c.fail(w, r, v, "starting the rollout of machine "+uuid+" to revision "+strconv.Itoa(n), err)
		return
	}
	flash(w, r, "Rollout "+ro.ID+" moves the machine to revision "+strconv.Itoa(n)+".")
	http.Redirect(w, r, v.orgURL("rollouts", ro.ID), http.StatusSeeOther)
}
