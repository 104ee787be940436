package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/api"
)

// Created records a new pool. Its first revision follows in the same
// append as a RevisionCreated.
type Created struct {
	Name                       string  `json:"name"`
	Cluster                    string  `json:"cluster"`
	DisplayName                string  `json:"display_name"`
	Rollout                    Rollout `json:"rollout"`
	AutoApplyPlatformRevisions bool    `json:"auto_apply_platform_revisions,omitempty"`
}

// RevisionCreated records a new immutable revision.
type RevisionCreated struct {
	Revision Revision `json:"revision"`
}

// SettingsChanged carries the new values of the settings that need no
// reboot (and so make no revision). An event from before a setting
// existed decodes it as its zero value, which is its default.
type SettingsChanged struct {
	DisplayName                string  `json:"display_name"`
	Rollout                    Rollout `json:"rollout"`
	AutoApplyPlatformRevisions bool    `json:"auto_apply_platform_revisions,omitempty"`
}

// ApplyRequested asks the rollout service to bring the pool's machines to
// a revision. It carries the rollout strategy in force when asked, so that
// a rollout does not depend on reading the pool again. Other services read
// it as api.ApplyRequested, which encodes alike (contract_test.go).
type ApplyRequested struct {
	Pool        string    `json:"pool"`
	Cluster     string    `json:"cluster"`
	Revision    int       `json:"revision"`
	Hash        string    `json:"hash"`
	Rollback    bool      `json:"rollback"` // older than the revision applied before
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	Rollout     Rollout   `json:"rollout"`
	// RolloutID is the id of the rollout this request starts, known when
	// the request is made so that the caller can follow it at once. Events
	// from before it existed have none; the rollout service then derives
	// one from the event's id.
	RolloutID string `json:"rollout_id,omitempty"`
}

// RolloutIDOf is the id of the rollout that applying revision of pool at
// the given time starts: the same request retried gets the same id.
func RolloutIDOf(pool string, revision int, at time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "apply\x00%s\x00%d\x00%d", pool, revision, at.UnixNano()))
	return "ro-" + hex.EncodeToString(sum[:10])
}

// Deleted records that the pool is gone; its name is not reused.
type Deleted struct {
	DeletedBy string `json:"deleted_by"`
}

func (Created) EventType() string         { return "pool.created" }
func (RevisionCreated) EventType() string { return "pool.revision_created" }
func (SettingsChanged) EventType() string { return "pool.settings_changed" }
func (ApplyRequested) EventType() string  { return api.EventApplyRequested }
func (Deleted) EventType() string         { return "pool.deleted" }

// EventTypes returns a zero value of every payload, for registration.
func EventTypes() []any {
	return []any{Created{}, RevisionCreated{}, SettingsChanged{}, ApplyRequested{}, Deleted{}}
}
