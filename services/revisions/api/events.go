package api

import "time"

// The revisions service's events that other services consume. They are
// its contract like its subjects: another service decodes them with these
// types (registering them in its events.Registry), never with the
// revisions domain's, and their JSON is the domain events' byte for byte.

// EventApplyRequested is the type of ApplyRequested.
const EventApplyRequested = "pool.apply_requested"

// PlatformActor is the actor (and RequestedBy) of what the platform does
// by itself, such as applying a platform-made revision of a pool in its
// next maintenance window.
const PlatformActor = "platform"

// ApplyRequested (pool.apply_requested, on the pool's subject) asks the
// rollout service to bring the pool's machines to a revision. It carries
// the pool's rollout settings in force when asked, so that a rollout does
// not depend on reading the pool again.
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

func (ApplyRequested) EventType() string { return EventApplyRequested }
