// Package domain holds the gateway's pure rules: who may do what, and how
// errors become HTTP statuses.
package domain

import (
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Role is an API token's role, as the registry issues it, plus the
// bootstrap admin's. Each includes the ones before it.
type Role = regapi.Role

const (
	RoleNone     Role = ""
	RoleViewer        = regapi.RoleViewer   // read
	RoleOperator      = regapi.RoleOperator // + machines, rollouts, operations
	RoleAdmin         = regapi.RoleAdmin    // + tokens, clusters, pools
	// RolePlatform is the bootstrap admin's: every organization, and
	// creating organizations. No token the registry issues has it.
	RolePlatform Role = "platform"
)

// rank orders the roles: each includes the ones ranked below it.
func rank(r Role) int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	case RolePlatform:
		return 4
	}
	return 0
}

// Principal is an authenticated caller.
type Principal struct {
	Org     string // empty for the bootstrap admin
	TokenID string
	Name    string
	Role    Role
}

// Actor is how events record the principal.
func (p Principal) Actor() string {
	if p.Role == RolePlatform {
		return "token:bootstrap-admin"
	}
	if p.Name == "" {
		return "token:" + p.TokenID
	}
	return "token:" + p.TokenID + " (" + p.Name + ")"
}

// Authorize decides whether p may act on org with at least role min. A
// caller from another organization learns nothing: the answer is the same
// not-found it would get for an organization that does not exist.
func Authorize(p Principal, org string, min Role) error {
	if p.Role == RolePlatform {
		return nil
	}
	if min == RolePlatform {
		return errs.Forbidden("only the bootstrap admin may do this")
	}
	if org != "" && org != p.Org {
		return errs.NotFound("organization %q does not exist", org)
	}
	if rank(p.Role) < rank(min) {
		return errs.Forbidden("this needs the %s role; the token has %s", min, p.Role)
	}
	return nil
}

// Status maps an error kind to its HTTP status.
func Status(k errs.Kind) int { return errs.HTTPStatus(k) }
