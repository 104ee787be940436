package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// StartRollout is a rollout to start: a pool revision, for the whole pool
// or one machine of it.
type StartRollout struct {
	ID          string
	Org         string
	Pool        string
	Cluster     string
	Revision    uint64
	Hash        string
	Rollback    bool
	After       string
	Machine     string // one machine's UUID, or all of the pool's
	Strategy    rollout.PoolSettings
	RequestedBy string
	// Provisioning: the machine's own first rollout (see StartProvisioning).
	Provisioning bool
}

// RolloutIDFor is the id of the rollout that an event (a
// pool.apply_requested) starts: deterministic, so that a redelivered event
// finds the rollout it already started.
func RolloutIDFor(eventID string) string {
	sum := sha256.Sum256([]byte("rollout\x00" + eventID))
	return "ro-" + hex.EncodeToString(sum[:10])
}

// Start snapshots the pool's machines from the registry and starts the
// rollout. Starting one that exists already (a redelivery, a retried
// request) returns it unchanged.
func (a *App) Start(ctx context.Context, c StartRollout) (uint64, error) {
	if c.After != "" {
		if c.After == c.ID {
			return 0, errs.Invalid("after", "a rollout cannot come after itself")
		}
		after, ok := a.Rollouts.Get(c.Org, c.After)
		if !ok {
			return 0, errs.Invalid("after", "rollout %q does not exist in organization %s", c.After, c.Org)
		}
		if after.State.Refused { // it will never succeed or be aborted
			return 0, errs.Invalid("after", "rollout %s never started (%s)", c.After, after.State.Reason)
		}
	}
	existing, err := a.Store.Load(ctx, ref(c.Org, c.ID))
	if err != nil {
		return 0, errs.Unavailable("reading rollout %s: %v", c.ID, err)
	}
	if len(existing) > 0 {
		return events.Version(existing), nil
	}
	ms, err := a.Registry.PoolMachines(ctx, c.Org, c.Pool)
	if err != nil {
		return 0, err
	}
	cmd := rollout.Start{
		ID: c.ID, Pool: c.Pool, Cluster: c.Cluster, Revision: c.Revision, Hash: c.Hash, Rollback: c.Rollback,
		After: c.After, PoolSize: len(ms), RequestedBy: c.RequestedBy, Provisioning: c.Provisioning,
		Strategy: rollout.Strategy{PoolSettings: c.Strategy, RemediationMaxInFlight: c.Strategy.ResolveRemediation(a.Settings.RemediationMaxInFlight)},
	}
	provisioning := a.provisioningRollouts(c.Org, c.Pool)
	found := false
	for _, m := range ms {
		if c.Machine != "" && m.UUID != c.Machine {
			continue
		}
		found = true
		why := excluded(m)
		if by, ok := provisioning[m.UUID]; ok && why == "" && !c.Provisioning {
			why = "being provisioned by rollout " + by + "; it moves on to this rollout's revision when that finishes"
		}
		if why != "" {
			cmd.Excluded = append(cmd.Excluded, rollout.Exclusion{UUID: m.UUID, Hostname: nodeName(m), Reason: why})
			continue
		}
		cmd.Machines = append(cmd.Machines, rollout.Machine{
			UUID: m.UUID, Hostname: nodeName(m), ControlPlane: m.ControlPlane, UpgradeIndex: m.UpgradeIndex,
			CurrentRevision: m.CurrentRevision, NoNode: noNode(m),
		})
	}
	if c.Machine != "" && !found {
		return 0, errs.Invalid("machine", "machine %s is not in pool %s", c.Machine, c.Pool)
	}
	if cmd.PoolSize < len(cmd.Machines) || cmd.PoolSize == 0 {
		cmd.PoolSize = max(len(cmd.Machines), 1)
	}
	evs, err := rollout.Decide(rollout.State{}, cmd, a.now())
	if err != nil {
		return 0, err
	}
	ds, err := drafts(evs)
	if err != nil {
		return 0, err
	}
	envs, err := a.Store.Append(ctx, ref(c.Org, c.ID), 0, ds...)
	var conflict *events.ConflictError
	if errors.As(err, &conflict) {
		return conflict.Actual, nil // started by a concurrent delivery
	}
	if err != nil {
		return 0, errs.Unavailable("starting rollout %s: %v", c.ID, err)
	}
	a.Log.InfoContext(ctx, "rollout started", "org", c.Org, "rollout", c.ID, "pool", c.Pool, "revision", c.Revision,
		"machines", len(cmd.Machines), "excluded", len(cmd.Excluded))
	return events.Version(envs), nil
}

// provisioningRollouts maps the machines of the pool's active
// provisioning rollouts to the rollout provisioning them.
func (a *App) provisioningRollouts(org, poolName string) map[string]string {
	out := map[string]string{}
	for _, r := range a.Rollouts.Active() {
		if r.Org != org || r.State.Pool != poolName || !r.State.Provisioning {
			continue
		}
		for _, m := range r.State.Machines {
			out[m.UUID] = r.State.ID
		}
	}
	return out
}

// excluded says why a machine of the pool is left out of a rollout, or "".
func excluded(m regapi.Machine) string {
	switch m.Status {
	case regapi.StatusEnteringMaintenance, regapi.StatusMaintenance:
		return "in maintenance"
	case regapi.StatusUnassigning:
		return "leaving the pool"
	case regapi.StatusDeleting:
		return "being deleted"
	case regapi.StatusPreregistered:
		return "never booted (pre-registered); it joins when it first boots"
	case regapi.StatusReadyUnassigned:
		return "not in the pool"
	}
	return ""
}

// noNode reports whether the machine never joined its cluster: it has no
// node to cordon or drain.
func noNode(m regapi.Machine) bool {
	switch m.Status {
	case regapi.StatusPending, regapi.StatusProvisioning:
		return true
	case regapi.StatusFailed:
		return m.Failure != nil && (m.Failure.During == regapi.StatusPending || m.Failure.During == regapi.StatusProvisioning)
	}
	return false
}

// StartFromApply starts the rollout that a pool.apply_requested asks for.
// The caller was told the rollout's id, so a start that can never succeed
// is not left to the poison queue: the rollout is recorded as refused
// under that id, failed with the reason (rollout.start_refused). Only what
// retrying may fix (a service that did not answer, this one stopping) is
// returned, for the handler to retry.
func (a *App) StartFromApply(ctx context.Context, env *events.Envelope, e revapi.ApplyRequested) error {
	id := e.RolloutID
	if id == "" {
		id = RolloutIDFor(env.ID)
	}
	if err := ref(env.Org, id).Validate(); err != nil {
		// No rollout can have this id: there is nowhere to record a
		// refusal, and the caller follows an id that will never exist.
		a.Log.ErrorContext(ctx, "apply names a rollout id that cannot exist", "org", env.Org, "rollout", id, "pool", e.Pool, "err", err)
		return errs.Invalid("rollout_id", "%q cannot name a rollout: %v", id, err)
	}
	strategy, err := poolStrategy(e.Rollout)
	c := StartRollout{
		ID: id, Org: env.Org, Pool: e.Pool, Cluster: e.Cluster, Revision: uint64(max(e.Revision, 0)),
		Hash: e.Hash, Rollback: e.Rollback, Strategy: strategy, RequestedBy: e.RequestedBy,
	}
	switch {
	case err != nil: // settings this service cannot read: refused below, as retrying reads them the same
	case e.Revision <= 0:
		err = errs.Invalid("revision", "must be 1 or more, got %d", e.Revision)
	default:
		_, err = a.Start(ctx, c)
	}
	if err == nil || retryable(ctx, err) {
		return err
	}
	return a.refuseStart(ctx, c, err)
}

// retryable reports whether trying again may get past err: a dependency
// that did not answer or asked to slow down, or ctx ending (this service
// stopping). Anything else (the request breaks a rule, something it names
// does not exist, a conflict, a bug) fails again the same way.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	switch errs.KindOf(err) {
	case errs.KindUnavailable, errs.KindRateLimited:
		return true
	}
	return false
}

// refuseStart records that rollout c cannot start because of cause. A
// rollout already under that id (a redelivery, a concurrent delivery)
// stays as it is. An id that cannot name a rollout leaves nowhere to
// record it: that error is returned, for the poison queue.
func (a *App) refuseStart(ctx context.Context, c StartRollout, cause error) error {
	cmd := rollout.RefuseStart{ID: c.ID, Pool: c.Pool, Cluster: c.Cluster, Revision: c.Revision, RequestedBy: c.RequestedBy,
		Reason: "cannot start: " + cause.Error()}
	evs, err := rollout.Decide(rollout.State{}, cmd, a.now())
	if err != nil {
		a.Log.ErrorContext(ctx, "rollout cannot start, and its refusal cannot be recorded", "org", c.Org, "rollout", c.ID,
			"pool", c.Pool, "revision", c.Revision, "reason", cause.Error(), "err", err)
		return err
	}
	ds, err := drafts(evs)
	if err != nil {
		return err
	}
	_, err = a.Store.Append(ctx, ref(c.Org, c.ID), 0, ds...)
	var conflict *events.ConflictError
	if errors.As(err, &conflict) {
		return nil // the rollout exists already: started or refused by another delivery
	}
	if err != nil {
		return errs.Unavailable("recording that rollout %s cannot start: %v", c.ID, err)
	}
	a.Log.WarnContext(ctx, "rollout refused", "org", c.Org, "rollout", c.ID, "pool", c.Pool, "revision", c.Revision,
		"reason", cause.Error())
	return nil
}

// StartRequested starts a rollout that a user asked for directly (one
// machine, or a pool after another rollout). Revision 0 is the pool's
// latest.
func (a *App) StartRequested(ctx context.Context, org, poolName string, revision int, machineUUID, after, id, by string) (string, uint64, error) {
	var f errs.Fields
	if revision < 0 {
		f.Add("revision", "must be 0 (the latest) or a revision number")
	}
	if poolName == "" {
		f.Add("pool", "is required")
	}
	if err := f.Err(); err != nil {
		return "", 0, err
	}
	// "The latest revision" is the latest in the log now, not the latest
	// the revisions service's read model has applied: a rollout started
	// right after a pool was saved takes the revision just saved.
	head, err := a.Store.Head(ctx)
	if err != nil {
		return "", 0, errs.Unavailable("reading the event log's head: %v", err)
	}
	p, err := a.Revisions.PoolAfter(ctx, org, poolName, head)
	if err != nil {
		return "", 0, err
	}
	if p.Deleted {
		return "", 0, errs.Conflict("pool %s is deleted", poolName)
	}
	if revision == 0 {
		revision = p.LatestRevision
	}
	rev, err := a.Revisions.Revision(ctx, org, poolName, revision)
	if err != nil {
		return "", 0, err
	}
	if id == "" {
		id = "ro-" + hex.EncodeToString(randomBytes(10))
	}
	strategy, err := poolStrategy(p.Spec.Rollout)
	if err != nil {
		return "", 0, err
	}
	v, err := a.Start(ctx, StartRollout{
		ID: id, Org: org, Pool: poolName, Cluster: p.Cluster, Revision: uint64(revision), Hash: rev.Hash,
		Rollback: p.AppliedRevision > revision, After: after, Machine: machineUUID, Strategy: strategy,
		RequestedBy: by,
	})
	return id, v, err
}

// waitVersion waits (briefly) until the read model applied version v.
func (a *App) waitVersion(ctx context.Context, v uint64) error {
	if v == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.Rollouts.WaitFor(ctx, v); err != nil {
		return errs.Unavailable("the rollout read model did not catch up with version %d: %v", v, err)
	}
	return nil
}

// poolStrategy reads the pool's rollout settings as the revisions API
// shows them (a pool's, or an apply request's) into the rollout's own.
// The revisions service checked them; a duration that does not read is a
// bug on one side, not the request's fault.
func poolStrategy(r revapi.Rollout) (rollout.PoolSettings, error) {
	var bad []string
	dur := func(field, s string) values.Duration {
		var d values.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			bad = append(bad, field+": "+err.Error())
		}
		return d
	}
	out := rollout.PoolSettings{
		MaxUnavailable:   values.IntOrPercent(r.MaxUnavailable),
		Pause:            dur("pause", r.Pause),
		DrainTimeout:     dur("drain_timeout", r.DrainTimeout),
		NodeReadyTimeout: dur("node_ready_timeout", r.NodeReadyTimeout),
	}
	if r.DrainGracePeriod != nil {
		g := dur("drain_grace_period", *r.DrainGracePeriod)
		out.DrainGracePeriod = &g
	}
	for _, w := range r.MaintenanceWindows {
		out.MaintenanceWindows = append(out.MaintenanceWindows, values.Window{Days: w.Days, Start: w.Start, End: w.End, TimeZone: w.TimeZone})
	}
	if r.Remediation != nil {
		out.Remediation = &values.Remediation{MaxInFlight: r.Remediation.MaxInFlight}
	}
	if len(bad) > 0 {
		return out, errs.Internal("reading the pool's rollout settings: %s", strings.Join(bad, "; "))
	}
	return out, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// nodeName is the machine's node name as the registry derives it (its
// hostname, or its UUID).
func nodeName(m regapi.Machine) string { return regapi.NodeNameOf(m.Hostname, m.UUID) }
