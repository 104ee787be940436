package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// poolFormFields are the pool form's fields, named by the JSON paths the
// API's validation errors use, so an error lands next to its field.
var poolFormFields = []string{"name", "cluster", "display_name", "kubernetes.minor", "flatcar.channel", "flatcar.version",
	"node_labels", "taints", "kubelet_extra_args", "ssh_keys", "cache_disk.device", "cache_disk.filesystem", "cache_disk.wipe",
	"network", "rollout.max_unavailable", "rollout.pause", "rollout.drain_timeout", "rollout.drain_grace_period",
	"rollout.node_ready_timeout", "rollout.maintenance_windows", "rollout.remediation.max_in_flight", "auto_apply_platform_revisions", "message"}

// formErrors files the API's field errors under the form field that
// causes them (the longest field name that is the error's path or a
// prefix of it); the rest go under "".
func formErrors(apiFields map[string]string, fields []string) map[string]string {
	out := map[string]string{}
	for path, reason := range apiFields {
		best := ""
		for _, f := range fields {
			if (path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[")) && len(f) > len(best) {
				best = f
			}
		}
		msg := reason
		if best != path && path != "" {
			msg = path + ": " + reason
		}
		if out[best] != "" {
			out[best] += "; "
		}
		out[best] += msg
	}
	return out
}

// poolForm is the pool form's values, as strings.
type poolForm map[string]string

func (f poolForm) Get(k string) string { return f[k] }

// formOfSpec fills the form from a pool's spec.
func formOfSpec(name, cluster string, s rev.PoolSpec) poolForm {
	f := poolForm{"name": name, "cluster": cluster, "display_name": s.DisplayName, "kubernetes.minor": s.Kubernetes.Minor,
		"flatcar.channel": s.Flatcar.Channel, "flatcar.version": s.Flatcar.Version,
		"node_labels": formatMap(s.NodeLabels, "\n"), "kubelet_extra_args": formatMap(s.KubeletExtraArgs, "\n"),
		"ssh_keys":                strings.Join(s.SSHKeys, "\n"),
		"rollout.max_unavailable": string(s.Rollout.MaxUnavailable), "rollout.pause": s.Rollout.Pause,
		"rollout.drain_timeout": s.Rollout.DrainTimeout, "rollout.node_ready_timeout": s.Rollout.NodeReadyTimeout}
	var taints []string
	for _, t := range s.Taints {
		line := t.Key
		if t.Value != "" {
			line += "=" + t.Value
		}
		taints = append(taints, line+":"+t.Effect)
	}
	f["taints"] = strings.Join(taints, "\n")
	if s.CacheDisk != nil {
		f["cache_disk.device"], f["cache_disk.filesystem"] = s.CacheDisk.Device, s.CacheDisk.Filesystem
		if s.CacheDisk.Wipe {
			f["cache_disk.wipe"] = "on"
		}
	}
	if s.Rollout.DrainGracePeriod != nil {
		f["rollout.drain_grace_period"] = *s.Rollout.DrainGracePeriod
	}
	if n := s.Network; len(n.Bonds)+len(n.VLANs)+len(n.Bridges)+len(n.Interfaces) > 0 {
		b, _ := json.MarshalIndent(n, "", "  ")
		f["network"] = string(b)
	}
	if len(s.Rollout.MaintenanceWindows) > 0 {
		b, _ := json.MarshalIndent(s.Rollout.MaintenanceWindows, "", "  ")
		f["rollout.maintenance_windows"] = string(b)
	}
	if s.Rollout.Remediation != nil {
		f["rollout.remediation.max_in_flight"] = strconv.Itoa(s.Rollout.Remediation.MaxInFlight)
	}
	if s.AutoApplyPlatformRevisions {
		f["auto_apply_platform_revisions"] = "on"
	}
	return f
}

// specOfForm reads a pool spec from the form; errors name the field.
func specOfForm(form url.Values) (rev.PoolSpec, poolForm, map[string]string) {
	f := poolForm{}
	for _, k := range poolFormFields {
		f[k] = form.Get(k)
	}
	errs := map[string]string{}
	s := rev.PoolSpec{DisplayName: strings.TrimSpace(f["display_name"]),
		Kubernetes: rev.Kubernetes{Minor: strings.TrimSpace(f["kubernetes.minor"])},
		Flatcar:    rev.Flatcar{Channel: strings.TrimSpace(f["flatcar.channel"]), Version: strings.TrimSpace(f["flatcar.version"])},
		Rollout: rev.Rollout{MaxUnavailable: rev.IntOrPercent(strings.TrimSpace(f["rollout.max_unavailable"])),
			Pause: strings.TrimSpace(f["rollout.pause"]), DrainTimeout: strings.TrimSpace(f["rollout.drain_timeout"]),
			NodeReadyTimeout: strings.TrimSpace(f["rollout.node_ready_timeout"])}}
	var err error
	if s.NodeLabels, err = parseMap(f["node_labels"]); err != nil {
		errs["node_labels"] = err.Error() + "; write one key=value per line"
	}
	if s.KubeletExtraArgs, err = parseMap(f["kubelet_extra_args"]); err != nil {
		errs["kubelet_extra_args"] = err.Error() + "; write one flag=value per line"
	}
	if len(s.NodeLabels) == 0 {
		s.NodeLabels = nil
	}
	if len(s.KubeletExtraArgs) == 0 {
		s.KubeletExtraArgs = nil
	}
	for _, line := range strings.Split(f["ssh_keys"], "\n") {
		if line = strings.TrimSpace(line); line != "" {
			s.SSHKeys = append(s.SSHKeys, line)
		}
	}
	for i, line := range strings.Split(f["taints"], "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		kv, effect, ok := strings.Cut(line, ":")
		if !ok {
			errs["taints"] = fmt.Sprintf("line %d (%q) is not key[=value]:Effect, such as dedicated=gpu:NoSchedule", i+1, line)
			continue
		}
		k, val, _ := strings.Cut(kv, "=")
		s.Taints = append(s.Taints, rev.Taint{Key: strings.TrimSpace(k), Value: strings.TrimSpace(val), Effect: strings.TrimSpace(effect)})
	}
	if d := strings.TrimSpace(f["cache_disk.device"]); d != "" || strings.TrimSpace(f["cache_disk.filesystem"]) != "" {
		s.CacheDisk = &rev.CacheDisk{Device: d, Filesystem: strings.TrimSpace(f["cache_disk.filesystem"]), Wipe: f["cache_disk.wipe"] == "on"}
	}
	if g := strings.TrimSpace(f["rollout.drain_grace_period"]); g != "" {
		s.Rollout.DrainGracePeriod = &g
	}
	if n := strings.TrimSpace(f["network"]); n != "" {
		dec := json.NewDecoder(strings.NewReader(n))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s.Network); err != nil {
			errs["network"] = "is not a network profile in JSON (" + err.Error() + "); see docs/pool-fields.md for bonds, vlans, bridges and interfaces"
		}
	}
	if r := strings.TrimSpace(f["rollout.remediation.max_in_flight"]); r != "" {
		if n, err := strconv.Atoi(r); err != nil {
			errs["rollout.remediation.max_in_flight"] = "is not a whole number of machines (0 turns remediation off; empty leaves it to the rollout service)"
		} else {
			s.Rollout.Remediation = &rev.Remediation{MaxInFlight: n}
		}
	}
	s.AutoApplyPlatformRevisions = f["auto_apply_platform_revisions"] == "on"
	if mw := strings.TrimSpace(f["rollout.maintenance_windows"]); mw != "" {
		dec := json.NewDecoder(strings.NewReader(mw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s.Rollout.MaintenanceWindows); err != nil {
			errs["rollout.maintenance_windows"] = "is not a JSON list of windows (" + err.Error() + `), such as [{"days":["sat"],"start":"02:00","end":"05:00","time_zone":"Europe/Berlin"}]`
		}
	}
	return s, f, errs
}

// listAll reads every page of a list: the API answers every list as
// {"items", "next"}, next to be passed back as ?cursor= until it is absent.
// It asks for the API's largest page (1000), which most lists take.
func listAll[T any](ctx context.Context, c *Console, token, path string) ([]T, error) {
	return listEvery[T](ctx, c, token, path, url.Values{"limit": {"1000"}})
}

// listEvery is listAll with the list's filters and page size in query (the
// rollout service's lists, rollouts and operations, take at most 500 a
// page).
func listEvery[T any](ctx context.Context, c *Console, token, path string, query url.Values) ([]T, error) {
	out := []T{}
	for cursor := ""; ; {
		var page struct {
			Items []T    `json:"items"`
			Next  string `json:"next"`
		}
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if _, err := c.do(ctx, token, call{method: "GET", path: path, query: q}, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" || page.Next == cursor {
			return out, nil
		}
		cursor = page.Next
	}
}

type poolListData struct {
	Items []rev.PoolSummary
}

func (c *Console) poolList(w http.ResponseWriter, r *http.Request, v view) {
	pools, err := listAll[rev.PoolSummary](r.Context(), c, v.S.token, orgPath(v.Org, "pools"))
	if err != nil {
		c.fail(w, r, v, "listing pools", err)
		return
	}
	v.Title, v.Section, v.Data = "Machine Pools", "pools", poolListData{Items: pools}
	c.render(w, r, http.StatusOK, "pools", v)
}

type poolData struct {
	New      bool
	Pool     *rev.Pool
	At       string
	Form     poolForm
	Errors   map[string]string
	Clusters []rev.Cluster
	Machines int
	Rollouts []rolloutSummary
}

type rolloutSummary struct {
	ID, Status string
	Revision   uint64
	Done       int
	Total      int
}

func (c *Console) poolNew(w http.ResponseWriter, r *http.Request, v view) {
	f := poolForm{"flatcar.channel": "stable", "rollout.max_unavailable": "1"}
	c.renderPoolForm(w, r, v, http.StatusOK, poolData{New: true, Form: f})
}

func (c *Console) renderPoolForm(w http.ResponseWriter, r *http.Request, v view, status int, d poolData) {
	if d.New {
		clusters, err := listAll[rev.Cluster](r.Context(), c, v.S.token, orgPath(v.Org, "clusters"))
		if err != nil {
			c.fail(w, r, v, "listing clusters", err)
			return
		}
		d.Clusters = clusters
		v.Title = "New Machine Pool"
	} else {
		v.Title = "Pool " + d.Pool.Name
	}
	v.Section, v.Data = "pools", d
	c.render(w, r, status, "pool", v)
}

func (c *Console) poolCreate(w http.ResponseWriter, r *http.Request, v view) {
	spec, f, errs := specOfForm(r.PostForm)
	name, cluster := strings.TrimSpace(f["name"]), f["cluster"]
	if len(errs) > 0 {
		c.renderPoolForm(w, r, v, http.StatusUnprocessableEntity, poolData{New: true, Form: f, Errors: errs})
		return
	}
	req := rev.NewCreatePoolRequest(v.Org, name, cluster, spec)
	req.Apply, req.Message = r.PostFormValue("apply") == "1", strings.TrimSpace(f["message"])
	var ch rev.PoolChange
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "pools"), body: poolBody(req), idempotency: r.PostFormValue("idem")}, &ch); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			c.renderPoolForm(w, r, v, http.StatusUnprocessableEntity, poolData{New: true, Form: f, Errors: formErrors(fieldMap(err), poolFormFields)})
			return
		}
		c.fail(w, r, v, "creating pool "+name, err)
		return
	}
	flash(w, r, poolChangeText(ch))
	http.Redirect(w, r, v.orgURL("pools", name), http.StatusSeeOther)
}

// poolBody is the request as the API takes it: without the fields the
// path carries.
func poolBody(req any) map[string]any {
	b, _ := json.Marshal(req)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "org")
	if _, ok := req.(rev.UpdatePoolRequest); ok {
		delete(m, "name")
		delete(m, "expected_version")
	}
	return m
}

func poolChangeText(ch rev.PoolChange) string {
	var parts []string
	switch {
	case ch.RevisionCreated > 0:
		parts = append(parts, fmt.Sprintf("Saved as revision %d.", ch.RevisionCreated))
	case ch.SettingsChanged:
		parts = append(parts, "Saved (display name or rollout settings only: no new revision, nothing reboots).")
	case !ch.Changed:
		parts = append(parts, "Nothing changed.")
	}
	if ch.ApplyRequested > 0 {
		what := "Rolling out"
		if ch.Rollback {
			what = "Rolling back to"
		}
		parts = append(parts, fmt.Sprintf("%s revision %d: follow it under Rollouts.", what, ch.ApplyRequested))
	} else if ch.RevisionCreated > 0 {
		parts = append(parts, "It is not rolled out yet: machines that boot get the applied revision; use Save & Apply or apply it from the revisions list.")
	}
	return strings.Join(parts, " ")
}

func (c *Console) poolDetail(w http.ResponseWriter, r *http.Request, v view) {
	name := r.PathValue("pool")
	at := atParam(r.URL.Query().Get("at"))
	q := url.Values{}
	if at != "" {
		q.Set("at", at)
	}
	var p rev.Pool
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", name), query: q}, &p); err != nil {
		v.Section = "pools"
		c.fail(w, r, v, "opening pool "+name, err)
		return
	}
	d := poolData{Pool: &p, At: at, Form: formOfSpec(p.Name, p.Cluster, p.Spec)}
	if at == "" {
		var ros struct {
			Items []struct {
				ID       string `json:"id"`
				Status   string `json:"status"`
				Revision uint64 `json:"revision"`
				Progress struct{ Done, Total int }
			} `json:"items"`
		}
		_, _ = c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "rollouts"), query: url.Values{"pool": {p.Name}, "limit": {"5"}}}, &ros)
		for _, ro := range ros.Items {
			d.Rollouts = append(d.Rollouts, rolloutSummary{ID: ro.ID, Status: ro.Status, Revision: ro.Revision, Done: ro.Progress.Done, Total: ro.Progress.Total})
		}
	}
	reverseRevisions(p.Revisions)
	c.renderPoolForm(w, r, v, http.StatusOK, d)
}

func reverseRevisions(rs []rev.RevisionSummary) {
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
}

func (c *Console) poolSave(w http.ResponseWriter, r *http.Request, v view) {
	name := r.PathValue("pool")
	var p rev.Pool
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", name)}, &p); err != nil {
		v.Section = "pools"
		c.fail(w, r, v, "opening pool "+name, err)
		return
	}
	reverseRevisions(p.Revisions)
	spec, f, errs := specOfForm(r.PostForm)
	f["name"], f["cluster"] = p.Name, p.Cluster
	if len(errs) > 0 {
		c.renderPoolForm(w, r, v, http.StatusUnprocessableEntity, poolData{Pool: &p, Form: f, Errors: errs})
		return
	}
	req := rev.NewUpdatePoolRequest(v.Org, name, spec)
	req.Apply, req.Message = r.PostFormValue("apply") == "1", strings.TrimSpace(f["message"])
	version, _ := strconv.ParseUint(r.PostFormValue("version"), 10, 64)
	var ch rev.PoolChange
	if _, err := c.do(r.Context(), v.S.token, call{method: "PUT", path: orgPath(v.Org, "pools", name), body: poolBody(req), ifMatch: version}, &ch); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			c.renderPoolForm(w, r, v, http.StatusUnprocessableEntity, poolData{Pool: &p, Form: f, Errors: formErrors(fieldMap(err), poolFormFields)})
			return
		}
		c.fail(w, r, v, "saving pool "+name, err)
		return
	}
	flash(w, r, poolChangeText(ch))
	http.Redirect(w, r, v.orgURL("pools", name), http.StatusSeeOther)
}

type revisionData struct {
	Pool      rev.Pool
	Revision  rev.Revision
	Against   int
	Diff      *rev.RevisionDiff
	Sides     []diffFile
	Ignition  string
	Confirm   bool
	Rollback  bool
	Revisions []rev.RevisionSummary
}

func (c *Console) revisionCommon(w http.ResponseWriter, r *http.Request, v view) (revisionData, bool) {
	v.Section = "pools"
	name := r.PathValue("pool")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		c.showTrouble(w, r, v, trouble{Status: http.StatusNotFound, Headline: "No such revision",
			Happened: "Revisions are numbered from 1; " + strconv.Quote(r.PathValue("n")) + " is not one.", ToDo: "Pick a revision from the pool's list."})
		return revisionData{}, false
	}
	var d revisionData
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", name)}, &d.Pool); err != nil {
		c.fail(w, r, v, "opening pool "+name, err)
		return d, false
	}
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", name, "revisions", strconv.Itoa(n))}, &d.Revision); err != nil {
		c.fail(w, r, v, "opening revision "+strconv.Itoa(n)+" of pool "+name, err)
		return d, false
	}
	d.Revisions = append(d.Revisions, d.Pool.Revisions...)
	reverseRevisions(d.Revisions)
	return d, true
}

func (c *Console) revisionDetail(w http.ResponseWriter, r *http.Request, v view) {
	d, ok := c.revisionCommon(w, r, v)
	if !ok {
		return
	}
	n := d.Revision.Number
	d.Against = n - 1
	if a := r.URL.Query().Get("against"); a != "" {
		d.Against, _ = strconv.Atoi(a)
	}
	if d.Against >= 1 && d.Against != n {
		var diff rev.RevisionDiff
		if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", d.Pool.Name, "revisions", strconv.Itoa(n), "diff"),
			query: url.Values{"against": {strconv.Itoa(d.Against)}}}, &diff); err != nil {
			c.fail(w, r, v, fmt.Sprintf("comparing revision %d with %d", n, d.Against), err)
			return
		}
		d.Diff, d.Sides = &diff, sideBySide(diff)
	} else {
		var ig rev.RevisionIgnition
		if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "pools", d.Pool.Name, "revisions", strconv.Itoa(n), "ignition")}, &ig); err != nil {
			c.fail(w, r, v, "rendering the Ignition of revision "+strconv.Itoa(n), err)
			return
		}
		d.Ignition = indentJSON(ig.Ignition)
	}
	v.Title, v.Section, v.Data = fmt.Sprintf("Pool %s · revision %d", d.Pool.Name, n), "pools", d
	c.render(w, r, http.StatusOK, "revision", v)
}

func (c *Console) revisionConfirm(w http.ResponseWriter, r *http.Request, v view) {
	d, ok := c.revisionCommon(w, r, v)
	if !ok {
		return
	}
	d.Confirm, d.Rollback = true, d.Revision.Number < d.Pool.AppliedRevision
	v.Title, v.Section, v.Data = fmt.Sprintf("Apply revision %d of %s?", d.Revision.Number, d.Pool.Name), "pools", d
	c.render(w, r, http.StatusOK, "revision_confirm", v)
}

func (c *Console) revisionApply(w http.ResponseWriter, r *http.Request, v view) {
	v.Section = "pools"
	name, n := r.PathValue("pool"), r.PathValue("n")
	version, _ := strconv.ParseUint(r.PostFormValue("version"), 10, 64)
	var ch rev.PoolChange
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "pools", name, "revisions", n, "apply"),
		ifMatch: version, idempotency: r.PostFormValue("idem")}, &ch); err != nil {
		c.fail(w, r, v, "applying revision "+n+" of pool "+name, err)
		return
	}
	flash(w, r, poolChangeText(ch))
	http.Redirect(w, r, v.orgURL("rollouts")+"?pool="+url.QueryEscape(name), http.StatusSeeOther)
}

type clusterData struct {
	Items  []rev.Cluster
	Form   url.Values
	Errors map[string]string
}

func (c *Console) clusterList(w http.ResponseWriter, r *http.Request, v view) {
	c.renderClusters(w, r, v, http.StatusOK, clusterData{})
}

func (c *Console) renderClusters(w http.ResponseWriter, r *http.Request, v view, status int, d clusterData) {
	clusters, err := listAll[rev.Cluster](r.Context(), c, v.S.token, orgPath(v.Org, "clusters"))
	if err != nil {
		c.fail(w, r, v, "listing clusters", err)
		return
	}
	d.Items = clusters
	v.Title, v.Section, v.Data = "Clusters", "pools", d
	c.render(w, r, status, "clusters", v)
}

var clusterFields = []string{"name", "api_endpoint", "kubernetes_version", "kubeconfig", "bootstrap_token", "ca_cert_hash"}

func (c *Console) clusterCreate(w http.ResponseWriter, r *http.Request, v view) {
	body := map[string]string{}
	for _, k := range clusterFields {
		body[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "clusters"), body: body, idempotency: r.PostFormValue("idem")}, nil); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			form := url.Values{}
			for _, k := range clusterFields {
				if k != "kubeconfig" && k != "bootstrap_token" { // secrets are not sent back to the browser
					form.Set(k, body[k])
				}
			}
			c.renderClusters(w, r, v, http.StatusUnprocessableEntity, clusterData{Form: form, Errors: formErrors(fieldMap(err), clusterFields)})
			return
		}
		c.fail(w, r, v, "creating cluster "+body["name"], err)
		return
	}
	flash(w, r, "Cluster "+body["name"]+" created; its kubeconfig and bootstrap token are sealed and never shown again. Create a pool in it next.")
	http.Redirect(w, r, v.orgURL("clusters"), http.StatusSeeOther)
}
