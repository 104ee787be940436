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
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
)

// PlatformAuthor is the author of revisions the platform makes itself.
const PlatformAuthor = "anvil"

// PlatformActor is who requests the apply of a platform-made revision
// when the pool auto-applies them (pool.apply_requested's requested_by,
// and the actor of the events the platform appends by itself).
const PlatformActor = api.PlatformActor

// Pool is the state folded from a pool's events. The zero value means the
// pool does not exist.
type Pool struct {
	Name        string
	Cluster     string
	DisplayName string
	Rollout     Rollout
	// AutoApplyPlatformRevisions: platform-made revisions are applied as
	// they are made (see CreatePlatformRevision).
	AutoApplyPlatformRevisions bool
	Revisions                  []Revision // Revisions[i].Number == i+1
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
		*p = Pool{Name: e.Name, Cluster: e.Cluster, DisplayName: e.DisplayName, Rollout: e.Rollout,
			AutoApplyPlatformRevisions: e.AutoApplyPlatformRevisions}
	case RevisionCreated:
		p.Revisions = append(p.Revisions, e.Revision)
	case SettingsChanged:
		p.DisplayName = e.DisplayName
		p.Rollout = e.Rollout
		p.AutoApplyPlatformRevisions = e.AutoApplyPlatformRevisions
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
	return Spec{DisplayName: p.DisplayName, Config: latest.Config, Rollout: p.Rollout,
		AutoApplyPlatformRevisions: p.AutoApplyPlatformRevisions}
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
		Created{Name: cmd.Name, Cluster: cmd.Cluster, DisplayName: cmd.Spec.DisplayName, Rollout: rollout,
			AutoApplyPlatformRevisions: cmd.Spec.AutoApplyPlatformRevisions},
		RevisionCreated{Revision: rev},
	}
	if cmd.Apply {
		events = append(events, ApplyRequested{
			Pool: cmd.Name, Cluster: cmd.Cluster, Revision: 1, Hash: rev.Hash,
			RequestedBy: cmd.Author, RequestedAt: cmd.At.UTC(), Rollout: rollout,
			RolloutID: RolloutIDOf(cmd.Name, 1, cmd.At),
		})
	}
	return events, nil
}

// Update saves a whole new spec. A change to Config makes exactly one new
// revision (none if its hash equals the latest revision's); a change to
// DisplayName, Rollout or AutoApplyPlatformRevisions makes a
// SettingsChanged and no revision. With
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
	if cmd.Spec.DisplayName != p.DisplayName || !sameJSON(rollout, p.Rollout) ||
		cmd.Spec.AutoApplyPlatformRevisions != p.AutoApplyPlatformRevisions {
		events = append(events, SettingsChanged{DisplayName: cmd.Spec.DisplayName, Rollout: rollout,
			AutoApplyPlatformRevisions: cmd.Spec.AutoApplyPlatformRevisions})
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
			RolloutID: RolloutIDOf(p.Name, target.Number, cmd.At),
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
		RolloutID: RolloutIDOf(p.Name, rev.Number, cmd.At),
	}}, nil
}

// CreatePlatformRevision raises the pool's Kubernetes patch version: the
// platform's side of the shared responsibility. It makes a platform-made
// revision, or nothing if the pool is already at that version or newer.
// The revision is pending unless the pool auto-applies platform revisions
// (see CreatePlatformRevision's decision).
type CreatePlatformRevision struct {
	KubernetesVersion string    `json:"kubernetes_version"`
	Message           string    `json:"message,omitempty"`
	At                time.Time `json:"at"`
	// ApplyHeld, when set, is why the revision must not be applied even
	// if the pool auto-applies them (the boot service cannot serve its
	// files); it goes into the revision's message.
	ApplyHeld string `json:"apply_held,omitempty"`
}

// CreatePlatformRevision decides a platform-made patch revision. If the
// pool auto-applies platform revisions, the same append also requests its
// rollout (requested by PlatformActor), which the rollout service holds
// until a maintenance window opens. It does so only when the config it
// carries forward is the applied one but for the Kubernetes version: a
// revision someone saved but did not apply would otherwise be rolled out
// with it (platform revisions left pending in between are fine: they only
// raised the version). The revision's message says what was decided and
// why.
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
	apply := false
	if p.AutoApplyPlatformRevisions {
		switch {
		case cmd.ApplyHeld != "":
			msg += "; not applied automatically: " + cmd.ApplyHeld
		case p.AppliedRevision == 0:
			msg += "; not applied automatically although the pool auto-applies platform revisions: none of its revisions was ever applied; apply it yourself"
		case p.unappliedUserRevision() != 0:
			msg += fmt.Sprintf("; not applied automatically although the pool auto-applies platform revisions: it carries forward revision %d, "+
				"which was saved but not applied (the applied one is %d), and applying it would roll that change out too; apply it yourself",
				p.unappliedUserRevision(), p.AppliedRevision)
		default:
			apply = true
			msg += "; applied automatically because the pool auto-applies platform revisions"
			if len(p.Rollout.MaintenanceWindows) > 0 {
				msg += ", in its maintenance windows"
			} else {
				msg += " (it has no maintenance windows, so at once)"
			}
		}
	}
	cfg := latest.Config.Normalize()
	cfg.Kubernetes.Version = v.String()
	rev := Revision{
		Number: latest.Number + 1, Hash: cfg.Hash(), Config: cfg,
		Author: PlatformAuthor, Message: msg, CreatedAt: cmd.At.UTC(), PlatformMade: true,
	}
	events := []any{RevisionCreated{Revision: rev}}
	if apply {
		events = append(events, ApplyRequested{
			Pool: p.Name, Cluster: p.Cluster, Revision: rev.Number, Hash: rev.Hash,
			RequestedBy: PlatformActor, RequestedAt: cmd.At.UTC(), Rollout: p.Rollout,
			RolloutID: RolloutIDOf(p.Name, rev.Number, cmd.At),
		})
	}
	return events, nil
}

// unappliedUserRevision is the newest revision after the applied one
// that a person made (0: none): the change a platform revision would
// carry into a rollout unasked.
func (p *Pool) unappliedUserRevision() int {
	for i := len(p.Revisions) - 1; i >= 0 && p.Revisions[i].Number > p.AppliedRevision; i-- {
		if !p.Revisions[i].PlatformMade {
			return p.Revisions[i].Number
		}
	}
	return 0
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
