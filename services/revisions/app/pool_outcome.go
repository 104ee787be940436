package app

import "github.com/anvil-fleet/anvil/services/revisions/domain/pool"

// PoolOutcome is a pool after a command, and what the command did.
type PoolOutcome struct {
	Pool            PoolRecord
	Changed         bool   // anything was appended
	RevisionCreated int    // the new revision's number, 0 if none
	SettingsChanged bool   // display name or rollout strategy
	ApplyRequested  int    // the revision requested for rollout, 0 if none
	Rollback        bool   // that revision is older than the one applied before
	Rollout         string // the id of the rollout the apply starts
}

func outcome(rec *PoolRecord, payloads []any) PoolOutcome {
	o := PoolOutcome{Pool: *rec, Changed: len(payloads) > 0}
	for _, p := range payloads {
		switch e := p.(type) {
		case pool.RevisionCreated:
			o.RevisionCreated = e.Revision.Number
		case pool.SettingsChanged:
			o.SettingsChanged = true
		case pool.ApplyRequested:
			o.ApplyRequested, o.Rollback, o.Rollout = e.Revision, e.Rollback, e.RolloutID
		}
	}
	return o
}

// live reports whether a pool exists and is not deleted.
func live(p *pool.Pool) bool { return p.Name != "" && !p.Deleted }
