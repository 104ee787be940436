package org

import (
	"time"

	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// Created: the organization exists.
type Created struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
}

// Renamed: the display name changed.
type Renamed struct {
	DisplayName string `json:"display_name"`
}

// APITokenIssued: an API token was created. Only its hash is recorded.
type APITokenIssued struct {
	TokenID   string     `json:"token_id"`
	Name      string     `json:"name,omitempty"`
	Role      Role       `json:"role"`
	Hash      token.Hash `json:"hash"`
	IssuedAt  time.Time  `json:"issued_at"`
	ExpiresAt time.Time  `json:"expires_at,omitzero"`
}

// APITokenRevoked: the API token no longer authenticates.
type APITokenRevoked struct {
	TokenID   string    `json:"token_id"`
	RevokedAt time.Time `json:"revoked_at"`
}

// EnrollmentTokenIssued: machines presenting this token may self-register.
type EnrollmentTokenIssued struct {
	TokenID   string     `json:"token_id"`
	Name      string     `json:"name,omitempty"`
	Hash      token.Hash `json:"hash"`
	IssuedAt  time.Time  `json:"issued_at"`
	ExpiresAt time.Time  `json:"expires_at,omitzero"`
	// MaxMachines caps how many machines the token may register; 0 (and
	// events from before the cap existed) means no cap.
	MaxMachines int `json:"max_machines,omitempty"`
}

// EnrollmentTokenRevoked: the enrollment token no longer admits machines.
type EnrollmentTokenRevoked struct {
	TokenID   string    `json:"token_id"`
	RevokedAt time.Time `json:"revoked_at"`
}

func (Created) EventType() string                { return "org.created" }
func (Renamed) EventType() string                { return "org.renamed" }
func (APITokenIssued) EventType() string         { return "org.api_token_issued" }
func (APITokenRevoked) EventType() string        { return "org.api_token_revoked" }
func (EnrollmentTokenIssued) EventType() string  { return "org.enrollment_token_issued" }
func (EnrollmentTokenRevoked) EventType() string { return "org.enrollment_token_revoked" }

// EventTypes returns a zero value of every event payload, for registering
// them with the event store's codec.
func EventTypes() []any {
	return []any{
		Created{}, Renamed{},
		APITokenIssued{}, APITokenRevoked{},
		EnrollmentTokenIssued{}, EnrollmentTokenRevoked{},
	}
}
