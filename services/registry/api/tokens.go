package api

import "time"

// TokenKind says what a token is for.
type TokenKind string

const (
	KindAPI        TokenKind = "api"    // an operator's or a tool's API credential
	KindEnrollment TokenKind = "enroll" // lets machines self-register into an organization
)

// Role is what an API token may do; each role includes the ones before it.
type Role string

const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

// TokenStatus is a token's state at a given instant.
type TokenStatus string

const (
	TokenActive  TokenStatus = "active"
	TokenExpired TokenStatus = "expired"
	TokenRevoked TokenStatus = "revoked"
)

// TokenInfo is a token as listed to users: never its hash or secret.
type TokenInfo struct {
	ID        string      `json:"id"`
	Kind      TokenKind   `json:"kind"`
	Name      string      `json:"name,omitempty"`
	Role      Role        `json:"role,omitempty"`
	IssuedAt  time.Time   `json:"issued_at"`
	ExpiresAt time.Time   `json:"expires_at,omitzero"`
	RevokedAt time.Time   `json:"revoked_at,omitzero"`
	Status    TokenStatus `json:"status"`
	// MaxMachines (enrollment tokens) is how many machines the token may
	// register in all; absent: no cap.
	MaxMachines int `json:"max_machines,omitempty"`
	// RegisteredMachines (enrollment tokens) is how many machines it has
	// registered so far, as the registry counts them against MaxMachines.
	// Absent when it is not known (API tokens).
	RegisteredMachines *int `json:"registered_machines,omitempty"`
}
