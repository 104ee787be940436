package org

import (
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// Command is any organization command; Decide runs it.
type Command interface {
	CommandType() string
	decide(s *State, now time.Time) ([]any, error)
}

// Decide validates cmd against s and returns the events it causes. It never
// mutates s.
func Decide(s State, cmd Command, now time.Time) ([]any, error) {
	if cmd == nil {
		return nil, errs.Internal("nil organization command")
	}
	return cmd.decide(&s, now)
}

// CommandTypes returns a zero value of every command, for registering them
// with the command bus.
func CommandTypes() []any {
	return []any{Create{}, Rename{}, IssueAPIToken{}, IssueEnrollmentToken{}, RevokeToken{}}
}

// Create makes the organization. Creating it again with the same display
// name is a no-op.
type Create struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
}

// Rename changes the display name.
type Rename struct {
	DisplayName string `json:"display_name"`
}

// IssueAPIToken records a token made with token.Generate(token.KindAPI, …).
// The caller shows the plaintext once; the command carries only the hash.
type IssueAPIToken struct {
	TokenID   string     `json:"token_id"`
	Hash      token.Hash `json:"hash"`
	Name      string     `json:"name,omitempty"`
	Role      Role       `json:"role"`
	ExpiresAt time.Time  `json:"expires_at,omitzero"`
}

// IssueEnrollmentToken records a token made with
// token.Generate(token.KindEnrollment, …).
type IssueEnrollmentToken struct {
	TokenID   string     `json:"token_id"`
	Hash      token.Hash `json:"hash"`
	Name      string     `json:"name,omitempty"`
	ExpiresAt time.Time  `json:"expires_at,omitzero"`
	// MaxMachines caps how many machines the token may register (0: no cap).
	MaxMachines int `json:"max_machines,omitempty"`
}

// MaxMachinesLimit is the largest max_machines an enrollment token may have.
const MaxMachinesLimit = 1_000_000

// RevokeToken revokes a token of either kind. Revoking twice is a no-op.
type RevokeToken struct {
	TokenID string `json:"token_id"`
}

func (Create) CommandType() string               { return "org.create" }
func (Rename) CommandType() string               { return "org.rename" }
func (IssueAPIToken) CommandType() string        { return "org.issue_api_token" }
func (IssueEnrollmentToken) CommandType() string { return "org.issue_enrollment_token" }
func (RevokeToken) CommandType() string          { return "org.revoke_token" }

func mustExist(s *State) error {
	if !s.Exists() {
		return errs.NotFound("organization does not exist")
	}
	return nil
}

func (c Create) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validateID(&f, "id", c.ID)
	validateText(&f, "display_name", c.DisplayName, true)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if s.Exists() {
		if s.ID == c.ID && s.DisplayName == c.DisplayName {
			return nil, nil
		}
		return nil, errs.Conflict("organization %s already exists (named %q)", s.ID, s.DisplayName)
	}
	return []any{Created{ID: c.ID, DisplayName: c.DisplayName}}, nil
}

func (c Rename) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validateText(&f, "display_name", c.DisplayName, true)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := mustExist(s); err != nil {
		return nil, err
	}
	if s.DisplayName == c.DisplayName {
		return nil, nil
	}
	return []any{Renamed{DisplayName: c.DisplayName}}, nil
}

func validateIssue(f *errs.Fields, id string, hash token.Hash, name string, expires, now time.Time) {
	if err := token.ValidID(id); err != nil {
		f.Add("token_id", "%v", err)
	}
	if hash.IsZero() {
		f.Add("hash", "is required")
	}
	validateText(f, "name", name, false)
	if !expires.IsZero() && !expires.After(now) {
		f.Add("expires_at", "must be in the future")
	}
}

// checkNewToken makes reissuing the same token idempotent and refuses to
// reuse an id for a different secret.
func checkNewToken(s *State, kind token.Kind, id string, hash token.Hash) (dup bool, err error) {
	t, ok := s.Tokens[id]
	if !ok {
		return false, nil
	}
	if t.Kind == kind && t.Hash == hash {
		return true, nil
	}
	return false, errs.Conflict("organization %s already has a token with id %s", s.ID, id)
}

func (c IssueAPIToken) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	validateIssue(&f, c.TokenID, c.Hash, c.Name, c.ExpiresAt, now)
	if !c.Role.Valid() {
		f.Add("role", "must be one of viewer, operator, admin")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := mustExist(s); err != nil {
		return nil, err
	}
	if dup, err := checkNewToken(s, token.KindAPI, c.TokenID, c.Hash); dup || err != nil {
		return nil, err
	}
	return []any{APITokenIssued{
		TokenID: c.TokenID, Name: c.Name, Role: c.Role, Hash: c.Hash,
		IssuedAt: now.UTC(), ExpiresAt: utc(c.ExpiresAt),
	}}, nil
}

func (c IssueEnrollmentToken) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	validateIssue(&f, c.TokenID, c.Hash, c.Name, c.ExpiresAt, now)
	if c.MaxMachines < 0 || c.MaxMachines > MaxMachinesLimit {
		f.Add("max_machines", "must be between 1 and %d, or 0 (or absent) for no cap; got %d", MaxMachinesLimit, c.MaxMachines)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := mustExist(s); err != nil {
		return nil, err
	}
	if dup, err := checkNewToken(s, token.KindEnrollment, c.TokenID, c.Hash); dup || err != nil {
		return nil, err
	}
	return []any{EnrollmentTokenIssued{
		TokenID: c.TokenID, Name: c.Name, Hash: c.Hash,
		IssuedAt: now.UTC(), ExpiresAt: utc(c.ExpiresAt), MaxMachines: c.MaxMachines,
	}}, nil
}

func (c RevokeToken) decide(s *State, now time.Time) ([]any, error) {
	if err := token.ValidID(c.TokenID); err != nil {
		return nil, errs.Invalid("token_id", "%v", err)
	}
	if err := mustExist(s); err != nil {
		return nil, err
	}
	t, ok := s.Tokens[c.TokenID]
	if !ok {
		return nil, errs.NotFound("organization %s has no token %s", s.ID, c.TokenID)
	}
	if !t.RevokedAt.IsZero() {
		return nil, nil
	}
	if t.Kind == token.KindAPI {
		return []any{APITokenRevoked{TokenID: c.TokenID, RevokedAt: now.UTC()}}, nil
	}
	return []any{EnrollmentTokenRevoked{TokenID: c.TokenID, RevokedAt: now.UTC()}}, nil
}
