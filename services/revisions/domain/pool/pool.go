// Package pool is the Machine Pool aggregate: the spec that a group of
// machines in one cluster share, its immutable numbered revisions, the
// requests to roll a revision out, and machine revisions.
package pool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
)

// PlatformAuthor is the author of revisions the platform makes itself.
const PlatformAuthor = "anvil"

// Pool is the state folded from a pool's events. The zero value means the
// pool does not exist.
type Pool struct {
	Name        string
	Cluster     string
	DisplayName string
	Rollout     Rollout
	Revisions   []Revision // Revisions[i].Number == i+1
	// AppliedRevision is the revision last asked to be rolled out (0: none).
	AppliedRevision int
	Deleted         bool
}

// Apply folds one event into the state; unknown events are ignored.
func (p *Pool) Apply(event any) {
	switch e := event.(type) {
	case *Created:
		p.Apply(*e)
	case *RevisionCreated:
		p.Apply(*e)
	case *SettingsChanged:
		p.Apply(*e)
	case *ApplyRequested:
		p.Apply(*e)
	case *Deleted:
		p.Apply(*e)
	case Created:
		*p = Pool{Name: e.Name, Cluster: e.Cluster, DisplayName: e.DisplayName, Rollout: e.Rollout}
	case RevisionCreated:
		p.Revisions = append(p.Revisions, e.Revision)
	case SettingsChanged:
		p.DisplayName = e.DisplayName
		p.Rollout = e.Rollout
	case ApplyRequested:
		p.AppliedRevision = e.Revision
	case Deleted:
		p.Deleted = true
	}
}

// Latest returns the newest revision.
func (p *Pool) Latest() (Revision, bool) {
	if len(p.Revisions) == 0 {
		return Revision{}, false
	}
	return p.Revisions[len(p.Revisions)-1], true
}

// Revision returns revision n.
func (p *Pool) Revision(n int) (Revision, error) {
	for _, r := range p.Revisions {
		if r.Number == n {
			return r, nil
		}
	}
	return Revision{}, errs.NotFound("pool %q has no revision %d", p.Name, n)
}

// Spec returns the pool's current spec (its latest revision's config).
func (p *Pool) Spec() Spec {
	latest, _ := p.Latest()
	return Spec{DisplayName: p.DisplayName, Config: latest.Config, Rollout: p.Rollout}
}

// KubernetesVersion is the resolved kubelet version of the latest revision.
func (p *Pool) KubernetesVersion() catalog.Version {
	latest, _ := p.Latest()
	v, _ := catalog.ParseVersion(latest.Config.Kubernetes.Version)
	return v
}

// Env is what deciding needs from outside the pool: the version catalog
// and the pool's cluster (for its existence and control plane version).
type Env struct {
	Catalog catalog.Catalog
	Cluster *cluster.Cluster
}

// cluster returns the env's cluster if it is the one named and exists.
func (e Env) cluster(name string) (*cluster.Cluster, error) {
	if e.Cluster == nil || !e.Cluster.Exists() || e.Cluster.Name != name {
		return nil, errs.NotFound("cluster %q not found", name)
	}
	return e.Cluster, nil
}

// Create makes a pool with its first revision ("Save"), and with Apply
// also asks for it to be rolled out ("Save & Apply").
type Create struct {
	Name    string    `json:"name"`
	Cluster string    `json:"cluster"`
	Spec    Spec      `json:"spec"`
	Author  string    `json:"author"`
	Message string    `json:"message,omitempty"`
	Apply   bool      `json:"apply"`
	At      time.Time `json:"at"`
}

// Create decides the creation of a pool.
func (p *Pool) Create(cmd Create, env Env) ([]any, error) {
	if p.Name != "" {
		if p.Deleted {
			return nil, errs.Conflict("pool %q was deleted; its name cannot be reused", p.Name)
		}
		return nil, errs.Conflict("pool %q already exists", p.Name)
	}
	var f errs.Fields
	if err := check.DNSLabel(cmd.Name); err != nil {
		f.Add("name", "%v", err)
	}
	if err := check.DNSLabel(cmd.Cluster); err != nil {
		f.Add("cluster", "%v", err)
	}
	validateAuthorship(&f, cmd.Author, cmd.Message)
	f.Merge("", cmd.Spec.Validate())
	if err := f.Err(); err != nil {
		return nil, err
	}
	if _, err := env.cluster(cmd.Cluster); err != nil {
		return nil, err
	}
	version, err := resolveVersion(cmd.Spec.Kubernetes.Minor, nil, cmd.Cluster, env)
	if err != nil {
		return nil, err
	}
	rollout := cmd.Spec.Rollout.WithDefaults()
	cfg := cmd.Spec.Config
	cfg.Kubernetes.Version = version.String()
	cfg = cfg.Normalize()
	rev := Revision{Number: 1, Hash: cfg.Hash(), Config: cfg, Author: cmd.Author, Message: cmd.Message, CreatedAt: cmd.At.UTC()}
	events := []any{
		Created{Name: cmd.Name, Cluster: cmd.Cluster, DisplayName: cmd.Spec.DisplayName, Rollout: rollout},
		RevisionCreated{Revision: rev},
	}
	if cmd.Apply {
		events = append(events, ApplyRequested{
			Pool: cmd.Name, Cluster: cmd.Cluster, Revision: 1, Hash: rev.Hash,
			RequestedBy: cmd.Author, RequestedAt: cmd.At.UTC(), Rollout: rollout,
		})
	}
	return events, nil
}

// Update saves a whole new spec. A change to Config makes exactly one new
// revision (none if its hash equals the latest revision's); a change to
// DisplayName or Rollout makes a SettingsChanged and no revision. With
// Apply, the latest revision (new or not) is requested for rollout unless
// it is already the applied one.
type Update struct {
	Spec    Spec      `json:"spec"`
	Author  string    `json:"author"`
	Message string    `json:"message,omitempty"`
	Apply   bool      `json:"apply"`
	At      time.Time `json:"at"`
}

// Update decides a change of spec.
func (p *Pool) Update(cmd Update, env Env) ([]any, error) {
	if err := p.mustExist(); err != nil {
		return nil, err
	}
	var f errs.Fields
	validateAuthorship(&f, cmd.Author, cmd.Message)
	f.Merge("", cmd.Spec.Validate())
	if err := f.Err(); err != nil {
		return nil, err
	}
	latest, _ := p.Latest()
	current, _ := catalog.ParseVersion(latest.Config.Kubernetes.Version)
	version, err := resolveVersion(cmd.Spec.Kubernetes.Minor, &current, p.Cluster, env)
	if err != nil {
		return nil, err
	}

	var events []any
	rollout := cmd.Spec.Rollout.WithDefaults()
	if cmd.Spec.DisplayName != p.DisplayName || !sameJSON(rollout, p.Rollout) {
		events = append(events, SettingsChanged{DisplayName: cmd.Spec.DisplayName, Rollout: rollout})
	}
	cfg := cmd.Spec.Config
	cfg.Kubernetes.Version = version.String()
	cfg = cfg.Normalize()
	target := latest
	if hash := cfg.Hash(); hash != latest.Hash {
		target = Revision{
			Number: latest.Number + 1, Hash: hash, Config: cfg,
			Author: cmd.Author, Message: cmd.Message, CreatedAt: cmd.At.UTC(),
		}
		events = append(events, RevisionCreated{Revision: target})
	}
	if cmd.Apply && target.Number != p.AppliedRevision {
		events = append(events, ApplyRequested{
			Pool: p.Name, Cluster: p.Cluster, Revision: target.Number, Hash: target.Hash,
			Rollback:    target.Number < p.AppliedRevision,
			RequestedBy: cmd.Author, RequestedAt: cmd.At.UTC(), Rollout: rollout,
		})
	}
	return events, nil
}

// ApplyRevision asks for any existing revision to be rolled out: the
// latest, a re-apply of the current one, or an older one (a rollback).
type ApplyRevision struct {
	Revision    int       `json:"revision"`
	RequestedBy string    `json:"requested_by"`
	At          time.Time `json:"at"`
}

// ApplyRevision decides an apply. It is always emitted, even for the
// revision already applied, so that a failed rollout can be retried; it is
// refused if the revision's kubelet is no longer supported or would break
// the skew policy against today's control plane.
func (p *Pool) ApplyRevision(cmd ApplyRevision, env Env) ([]any, error) {
	if err := p.mustExist(); err != nil {
		return nil, err
	}
	if cmd.RequestedBy == "" || check.Text(cmd.RequestedBy, 256) != nil {
		return nil, errs.Invalid("requested_by", "must name who asked (at most 256 characters)")
	}
	rev, err := p.Revision(cmd.Revision)
	if err != nil {
		return nil, err
	}
	cl, err := env.cluster(p.Cluster)
	if err != nil {
		return nil, err
	}
	v, _ := catalog.ParseVersion(rev.Config.Kubernetes.Version)
	if err := env.Catalog.CheckKubelet(cl.KubernetesVersion, v); err != nil {
		return nil, errs.Conflict("revision %d cannot be applied: %v", rev.Number, err)
	}
	return []any{ApplyRequested{
		Pool: p.Name, Cluster: p.Cluster, Revision: rev.Number, Hash: rev.Hash,
		Rollback:    rev.Number < p.AppliedRevision,
		RequestedBy: cmd.RequestedBy, RequestedAt: cmd.At.UTC(), Rollout: p.Rollout,
	}}, nil
}

// CreatePlatformRevision raises the pool's Kubernetes patch version: the
// platform's side of the shared responsibility. It makes a pending
// revision (platform-made, not applied) or nothing if the pool is already
// at that version or newer.
type CreatePlatformRevision struct {
	KubernetesVersion string    `json:"kubernetes_version"`
	Message           string    `json:"message,omitempty"`
	At                time.Time `json:"at"`
}

// CreatePlatformRevision decides a platform-made patch revision.
func (p *Pool) CreatePlatformRevision(cmd CreatePlatformRevision, env Env) ([]any, error) {
	if err := p.mustExist(); err != nil {
		return nil, err
	}
	v, err := catalog.ParseVersion(cmd.KubernetesVersion)
	if err != nil {
		return nil, errs.Invalid("kubernetes_version", "%v", err)
	}
	latest, _ := p.Latest()
	current, _ := catalog.ParseVersion(latest.Config.Kubernetes.Version)
	if v.MinorOf() != current.MinorOf() {
		return nil, errs.Conflict("pool %q is on Kubernetes %s; the platform only raises patch versions, and %s is another minor", p.Name, current.MinorOf(), v)
	}
	if v.Compare(current) <= 0 {
		return nil, nil
	}
	cl, err := env.cluster(p.Cluster)
	if err != nil {
		return nil, err
	}
	if err := env.Catalog.CheckKubelet(cl.KubernetesVersion, v); err != nil {
		return nil, errs.Conflict("pool %q cannot move to %s: %v", p.Name, v, err)
	}
	msg := cmd.Message
	if msg == "" {
		msg = fmt.Sprintf("Kubernetes patch release %s (was %s)", v, current)
	}
	cfg := latest.Config.Normalize()
	cfg.Kubernetes.Version = v.String()
	return []any{RevisionCreated{Revision: Revision{
		Number: latest.Number + 1, Hash: cfg.Hash(), Config: cfg,
		Author: PlatformAuthor, Message: msg, CreatedAt: cmd.At.UTC(), PlatformMade: true,
	}}}, nil
}

// Delete removes the pool. Whether machines still belong to it is the
// registry's to answer; the app layer checks before deciding.
type Delete struct {
	DeletedBy string `json:"deleted_by"`
}

func (p *Pool) Delete(cmd Delete) ([]any, error) {
	if err := p.mustExist(); err != nil {
		return nil, err
	}
	if cmd.DeletedBy == "" {
		return nil, errs.Invalid("deleted_by", "must name who deleted the pool")
	}
	return []any{Deleted{DeletedBy: cmd.DeletedBy}}, nil
}

func (p *Pool) mustExist() error {
	if p.Name == "" {
		return errs.NotFound("pool not found")
	}
	if p.Deleted {
		return errs.Conflict("pool %q was deleted", p.Name)
	}
	return nil
}

// resolveVersion turns the user's minor into a full version: the pool's
// current version if the minor is unchanged and still supported (patches
// are raised by platform revisions, not as a side effect of an unrelated
// edit), else the newest patch of the minor. A new version must pass the
// skew policy against the cluster's control plane.
func resolveVersion(minor string, current *catalog.Version, clusterName string, env Env) (catalog.Version, error) {
	m, err := catalog.ParseMinor(minor)
	if err != nil {
		return catalog.Version{}, errs.Invalid("kubernetes.minor", "%v", err)
	}
	if current != nil && current.MinorOf() == m && env.Catalog.Has(*current) {
		return *current, nil
	}
	v, err := env.Catalog.Latest(m)
	if err != nil {
		return catalog.Version{}, errs.Invalid("kubernetes.minor", "%v", err)
	}
	cl, err := env.cluster(clusterName)
	if err != nil {
		return catalog.Version{}, err
	}
	if err := env.Catalog.CheckKubelet(cl.KubernetesVersion, v); err != nil {
		return catalog.Version{}, errs.Invalid("kubernetes.minor", "%v", err)
	}
	return v, nil
}

func validateAuthorship(f *errs.Fields, author, message string) {
	if author == "" {
		f.Add("author", "must name who made the change")
	} else if err := check.Text(author, 256); err != nil {
		f.Add("author", "%v", err)
	}
	if err := check.Text(message, 2000); err != nil {
		f.Add("message", "%v", err)
	}
}

func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
