// Package org is the Organization aggregate: a tenant with a display name,
// API tokens (with a role) and enrollment tokens (for machine
// self-registration).
package org

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// Role is what an API token may do; each role includes the ones before it.
type Role string

const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// AtLeast reports whether r grants everything min grants.
func (r Role) AtLeast(min Role) bool { return r.Valid() && r.rank() >= min.rank() }

// Token is what the organization remembers about a token.
type Token struct {
	token.Stored
	Name     string    `json:"name,omitempty"`
	Role     Role      `json:"role,omitempty"` // API tokens only
	IssuedAt time.Time `json:"issued_at"`
	// MaxMachines caps how many machines an enrollment token may register
	// (0: no cap).
	MaxMachines int `json:"max_machines,omitempty"`
}

// TokenStatus is a token's state at a given instant.
type TokenStatus string

const (
	TokenActive  TokenStatus = "active"
	TokenExpired TokenStatus = "expired"
	TokenRevoked TokenStatus = "revoked"
)

// TokenInfo is a token as listed to users: no hash.
type TokenInfo struct {
	ID        string      `json:"id"`
	Kind      token.Kind  `json:"kind"`
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

// State is the organization as folded from its events. The zero value is an
// organization that does not exist yet.
type State struct {
	ID          string           `json:"id"`
	DisplayName string           `json:"display_name"`
	Tokens      map[string]Token `json:"tokens,omitempty"`
}

// Exists reports whether the organization was created.
func (s *State) Exists() bool { return s.ID != "" }

// Apply folds one event into the state. Unknown events are ignored.
func (s *State) Apply(event any) {
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		event = v.Elem().Interface()
	}
	switch e := event.(type) {
	case Created:
		*s = State{ID: e.ID, DisplayName: e.DisplayName}
	case Renamed:
		s.DisplayName = e.DisplayName
	case APITokenIssued:
		s.putToken(Token{
			Stored:   token.Stored{ID: e.TokenID, Kind: token.KindAPI, Hash: e.Hash, ExpiresAt: utc(e.ExpiresAt)},
			Name:     e.Name,
			Role:     e.Role,
			IssuedAt: utc(e.IssuedAt),
		})
	case EnrollmentTokenIssued:
		s.putToken(Token{
			Stored:      token.Stored{ID: e.TokenID, Kind: token.KindEnrollment, Hash: e.Hash, ExpiresAt: utc(e.ExpiresAt)},
			Name:        e.Name,
			IssuedAt:    utc(e.IssuedAt),
			MaxMachines: e.MaxMachines,
		})
	case APITokenRevoked:
		s.revoke(e.TokenID, e.RevokedAt)
	case EnrollmentTokenRevoked:
		s.revoke(e.TokenID, e.RevokedAt)
	}
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func (s *State) putToken(t Token) {
	// Copy on write: a State value handed to Decide may share this map.
	m := make(map[string]Token, len(s.Tokens)+1)
	for k, v := range s.Tokens {
		m[k] = v
	}
	m[t.ID] = t
	s.Tokens = m
}

func (s *State) revoke(id string, at time.Time) {
	t, ok := s.Tokens[id]
	if !ok {
		return
	}
	t.RevokedAt = utc(at)
	s.putToken(t)
}

// Token returns the stored token for verification.
func (s *State) Token(id string) (token.Stored, bool) {
	t, ok := s.Tokens[id]
	return t.Stored, ok
}

// ListTokens lists tokens of one kind, oldest first, as of now.
func (s *State) ListTokens(kind token.Kind, now time.Time) []TokenInfo {
	var out []TokenInfo
	for _, t := range s.Tokens {
		if t.Kind != kind {
			continue
		}
		st := TokenActive
		switch {
		case !t.RevokedAt.IsZero():
			st = TokenRevoked
		case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
			st = TokenExpired
		}
		out = append(out, TokenInfo{
			ID: t.ID, Kind: t.Kind, Name: t.Name, Role: t.Role,
			IssuedAt: t.IssuedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, Status: st, MaxMachines: t.MaxMachines,
		})
	}
	slices.SortFunc(out, func(a, b TokenInfo) int {
		return cmp.Or(a.IssuedAt.Compare(b.IssuedAt), strings.Compare(a.ID, b.ID))
	})
	return out
}

// ValidateID checks an organization id with the rule every service shares
// (fields.OrgID), so that the registry never creates an organization
// another service would refuse.
func ValidateID(id string) error {
	var f errs.Fields
	validateID(&f, "id", id)
	return f.Err()
}

func validateID(f *errs.Fields, field, id string) {
	if err := fields.OrgID(id); err != nil {
		f.Add(field, "%v", err)
	}
}

const maxNameLen = 100

// validateText checks a name shown to people with the rule every service
// shares (fields.DisplayName: no control, invisible or direction-changing
// characters), and no surrounding whitespace.
func validateText(f *errs.Fields, field, v string, required bool) {
	switch {
	case v == "":
		if required {
			f.Add(field, "is required")
		}
	case strings.TrimSpace(v) != v:
		f.Add(field, "must not start or end with whitespace")
	default:
		if err := fields.DisplayName(v); err != nil {
			f.Add(field, "%v", err)
		}
	}
}
