package ports

import (
	"context"
	"net/http"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// Org is an organization with its ETag version.
type Org struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	Version     uint64 `json:"version"`
}

func (o Org) ETagVersion() uint64 { return o.Version }

// OrgList is a page of the organizations the caller may see, by id.
type OrgList struct {
	Items []Org  `json:"items"`
	Next  string `json:"next,omitempty"`
}

// OrgCreate is the body of POST /api/v1/orgs.
type OrgCreate struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// OrgPatch is the body of PATCH /api/v1/orgs/{org}.
type OrgPatch struct {
	DisplayName string `json:"display_name"`
}

// TokenCreate is the body of POST …/tokens and …/enrollment-tokens.
type TokenCreate struct {
	Name      string      `json:"name,omitempty"`
	Role      regapi.Role `json:"role,omitempty"` // API tokens only
	ExpiresAt time.Time   `json:"expires_at,omitzero"`
	// MaxMachines (enrollment tokens only) caps how many machines the
	// token may register; absent or 0: no cap.
	MaxMachines int `json:"max_machines,omitempty"`
}

// TokenList is a page of tokens, oldest first, without secrets or hashes.
type TokenList struct {
	Items []regapi.TokenInfo `json:"items"`
	Next  string             `json:"next,omitempty"`
}

// Machine is a machine with its ETag version.
type Machine struct {
	regapi.Machine
	Version uint64 `json:"version"`
	// Deleted: the request removed the machine (a DELETE that needed no
	// drain, or a forced one); the rest is the machine as it last was, with
	// its last status, and Version the deletion's.
	Deleted bool `json:"deleted,omitempty"`
}

func (m Machine) ETagVersion() uint64 { return m.Version }

// MachinePage is one page of machines; follow Next until it is empty.
type MachinePage struct {
	Items []regapi.Machine `json:"items"`
	Next  string           `json:"next,omitempty"`
}

// MachinePatch is the body of PATCH …/machines/{uuid}; absent fields stay.
type MachinePatch struct {
	Hostname     *string            `json:"hostname,omitempty"`
	Labels       *map[string]string `json:"labels,omitempty"`
	UpgradeIndex *int               `json:"upgrade_index,omitempty"`
	ControlPlane *bool              `json:"control_plane,omitempty"`
}

// AssignBody is the body of POST …/machines/{uuid}/assign.
type AssignBody struct {
	Pool string `json:"pool"`
}

type tokenListReq struct {
	regapi.TokenListReq
	page pageQuery
}

type machineReq struct {
	org, uuid string
	expected  uint64
	cmds      []regapi.MachineCommand
}

func (h *handler) registryRoutes() []route {
	reg := h.Registry
	machineRoute := func(method, path, summary string, min domain.Role, status int, body any, build func(r *http.Request) ([]regapi.MachineCommand, error)) route {
		return route{Method: method, Path: path, Min: min, Summary: summary, Request: body, Response: Machine{}, Status: status,
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				expected, err := ifMatch(r)
				if err != nil {
					return nil, err
				}
				cmds, err := build(r)
				return machineReq{org: r.PathValue("org"), uuid: r.PathValue("uuid"), expected: expected, cmds: cmds}, err
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				m := req.(machineReq)
				var out regapi.MachineReply
				for i, c := range m.cmds {
					// With If-Match the commands after the first are pinned
					// to the version the one before made, so nothing comes
					// between them; without it, a write in between (an iPXE
					// boot, a heartbeat's offline flip) is no conflict.
					expected := m.expected
					if i > 0 && m.expected != 0 {
						expected = out.Version
					}
					var err error
					if out, err = reg.Machine(ctx, m.org, m.uuid, c, expected); err != nil {
						return nil, err
					}
				}
				if len(m.cmds) == 0 {
					got, err := reg.GetMachine(ctx, regapi.MachineGet{Org: m.org, UUID: m.uuid})
					if err != nil {
						return nil, err
					}
					out = got
				}
				h.writes.note(ctx, marksRegistry, out.Version)
				return Machine{Machine: out.Machine, Version: out.Version, Deleted: out.Deleted}, nil
			},
		}
	}
	noBody := func(c regapi.MachineCommand) func(*http.Request) ([]regapi.MachineCommand, error) {
		return func(*http.Request) ([]regapi.MachineCommand, error) { return []regapi.MachineCommand{c}, nil }
	}
	const (
		orgs     = "/api/v1/orgs"
		oneOrg   = "/api/v1/orgs/{org}"
		machines = "/api/v1/orgs/{org}/machines"
		one      = "/api/v1/orgs/{org}/machines/{uuid}"
	)
	tokenRoutes := func(path string, kind regapi.TokenKind, what string) []route {
		// The document shows each kind's body without the other's field.
		notInBody := []string{"max_machines"}
		if kind == regapi.KindEnrollment {
			notInBody = []string{"role"}
		}
		return []route{
			{Method: "GET", Path: path, Min: domain.RoleAdmin, Summary: "List " + what + ", oldest first (cursor pagination)", Response: TokenList{}, Status: 200,
				Query: []string{"cursor", "limit"}, Limit: listPage,
				Decode: func(_ context.Context, r *http.Request) (any, error) {
					q, err := readPage(r, listPage)
					return tokenListReq{TokenListReq: regapi.TokenListReq{Org: r.PathValue("org"), Kind: kind}, page: q}, err
				},
				Endpoint: func(ctx context.Context, req any) (any, error) {
					q := req.(tokenListReq)
					l, err := reg.ListTokens(ctx, q.TokenListReq)
					if err != nil {
						return nil, err
					}
					items, next, err := pageAfterItem(l.Items, q.page, func(t regapi.TokenInfo) string { return t.ID })
					return TokenList{Items: items, Next: next}, err
				}},
			{Method: "POST", Path: path, Min: domain.RoleAdmin, Summary: "Create one of the " + what + " (the token is shown once)",
				Request: TokenCreate{}, Response: regapi.TokenIssued{}, Status: 201, NotInBody: notInBody,
				Decode: func(_ context.Context, r *http.Request) (any, error) {
					var b TokenCreate
					if err := readJSON(r, h.BodyLimit, &b); err != nil {
						return nil, err
					}
					if kind == regapi.KindEnrollment && b.Role != "" {
						return nil, errs.Invalid("role", "enrollment tokens have no role")
					}
					if kind == regapi.KindAPI && b.MaxMachines != 0 {
						return nil, errs.Invalid("max_machines", "only enrollment tokens register machines")
					}
					return regapi.TokenIssue{Org: r.PathValue("org"), Kind: kind, Name: b.Name, Role: b.Role, ExpiresAt: b.ExpiresAt, MaxMachines: b.MaxMachines}, nil
				},
				Endpoint: func(ctx context.Context, req any) (any, error) { return reg.IssueToken(ctx, req.(regapi.TokenIssue)) }},
			{Method: "DELETE", Path: path + "/{id}", Min: domain.RoleAdmin, Summary: "Revoke one of the " + what + "; answers it as it is now, status revoked",
				Response: regapi.TokenInfo{}, Status: 200,
				Decode: func(_ context.Context, r *http.Request) (any, error) {
					return regapi.TokenRevoke{Org: r.PathValue("org"), TokenID: r.PathValue("id")}, nil
				},
				Endpoint: func(ctx context.Context, req any) (any, error) { return reg.RevokeToken(ctx, req.(regapi.TokenRevoke)) }},
		}
	}

	routes := []route{
		{Method: "GET", Path: orgs, Min: domain.RoleViewer, Summary: "List the organizations the token may see, by id (cursor pagination)", Response: OrgList{}, Status: 200,
			Query: []string{"cursor", "limit"}, Limit: listPage,
			Decode: func(_ context.Context, r *http.Request) (any, error) { return readPage(r, listPage) },
			Endpoint: func(ctx context.Context, req any) (any, error) {
				all, err := reg.ListOrgs(ctx)
				if err != nil {
					return nil, err
				}
				p := principalOf(ctx)
				var seen []Org
				for _, o := range all.Items { // by id
					if p.Role == domain.RolePlatform || o.ID == p.Org {
						seen = append(seen, Org(o))
					}
				}
				items, next := pageByKey(seen, req.(pageQuery), func(o Org) string { return o.ID }, lessString)
				return OrgList{Items: items, Next: next}, nil
			}},
		{Method: "POST", Path: orgs, Min: domain.RolePlatform, Summary: "Create an organization (bootstrap admin)", Request: OrgCreate{}, Response: Org{}, Status: 201,
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				var b OrgCreate
				err := readJSON(r, h.BodyLimit, &b)
				return regapi.OrgCreate(b), err
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				o, err := reg.CreateOrg(ctx, req.(regapi.OrgCreate))
				return Org(o), err
			}},
		{Method: "GET", Path: oneOrg, Min: domain.RoleViewer, Summary: "Get an organization, now or ?at= a past time or sequence", Response: Org{}, Status: 200, Query: []string{"at"},
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				return regapi.OrgRef{Org: r.PathValue("org"), At: r.URL.Query().Get("at")}, nil
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				o, err := reg.GetOrg(ctx, req.(regapi.OrgRef))
				return Org(o), err
			}},
		{Method: "PATCH", Path: oneOrg, Min: domain.RoleAdmin, Summary: "Rename an organization", Request: OrgPatch{}, Response: Org{}, Status: 200,
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				var b OrgPatch
				expected, err := ifMatch(r)
				if err == nil {
					err = readJSON(r, h.BodyLimit, &b)
				}
				return regapi.OrgRename{Org: r.PathValue("org"), DisplayName: b.DisplayName, ExpectedVersion: expected}, err
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				o, err := reg.RenameOrg(ctx, req.(regapi.OrgRename))
				return Org(o), err
			}},

		{Method: "GET", Path: machines, Min: domain.RoleViewer, Summary: "List machines (filters: pool, status, selector; cursor pagination)",
			Response: MachinePage{}, Status: 200, Query: []string{"pool", "status", "selector", "cursor", "limit"}, Limit: listPage,
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				q := r.URL.Query()
				limit, err := listPage.read(r)
				return regapi.MachineList{Org: r.PathValue("org"), Pool: q.Get("pool"), Status: q.Get("status"),
					Selector: q.Get("selector"), Cursor: q.Get("cursor"), Limit: limit}, err
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				r := req.(regapi.MachineList)
				r.MinVersion = h.writes.last(ctx, marksRegistry)
				return h.listMachinesCached(ctx, r)
			}},
		machineRoute("POST", machines, "Pre-register a machine before its first boot", domain.RoleOperator, 201, regapi.PreRegister{},
			func(r *http.Request) ([]regapi.MachineCommand, error) {
				var b regapi.PreRegister
				if err := readJSON(r, h.BodyLimit, &b); err != nil {
					return nil, err
				}
				r.SetPathValue("uuid", b.UUID)
				return []regapi.MachineCommand{b}, nil
			}),
		{Method: "GET", Path: one, Min: domain.RoleViewer, Summary: "Get a machine, now or ?at= a past time or sequence", Response: Machine{}, Status: 200, Query: []string{"at"},
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				return regapi.MachineGet{Org: r.PathValue("org"), UUID: r.PathValue("uuid"), At: r.URL.Query().Get("at")}, nil
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				r := req.(regapi.MachineGet)
				r.MinVersion = h.writes.last(ctx, marksRegistry)
				return h.getMachineCached(ctx, r)
			}},
		machineRoute("PATCH", one, "Change a machine's hostname, labels, upgrade index or control-plane flag", domain.RoleOperator, 200, MachinePatch{},
			func(r *http.Request) ([]regapi.MachineCommand, error) {
				var b MachinePatch
				if err := readJSON(r, h.BodyLimit, &b); err != nil {
					return nil, err
				}
				var cmds []regapi.MachineCommand
				if b.Hostname != nil {
					cmds = append(cmds, regapi.SetHostname{Hostname: *b.Hostname})
				}
				if b.Labels != nil {
					cmds = append(cmds, regapi.SetLabels{Labels: *b.Labels})
				}
				if b.UpgradeIndex != nil {
					cmds = append(cmds, regapi.SetUpgradeIndex{UpgradeIndex: *b.UpgradeIndex})
				}
				if b.ControlPlane != nil {
					cmds = append(cmds, regapi.SetControlPlane{ControlPlane: *b.ControlPlane})
				}
				if len(cmds) == 0 {
					return nil, errs.Invalid("body", "names no field to change (hostname, labels, upgrade_index, control_plane)")
				}
				return cmds, nil
			}),
		machineRoute("DELETE", one, "Delete a machine (?policy=graceful|unsafe|forced); answers the machine in status deleting while its node is drained "+
			"and removed, or, when it is removed at once, as it last was with deleted: true", domain.RoleOperator, 200, nil,
			func(r *http.Request) ([]regapi.MachineCommand, error) {
				return []regapi.MachineCommand{regapi.Delete{Policy: regapi.DeletionPolicy(r.URL.Query().Get("policy"))}}, nil
			}),
		machineRoute("POST", one+"/assign", "Assign a machine to a pool", domain.RoleOperator, 200, AssignBody{},
			func(r *http.Request) ([]regapi.MachineCommand, error) {
				var b AssignBody
				if err := readJSON(r, h.BodyLimit, &b); err != nil {
					return nil, err
				}
				// A machine assigned to a pool that does not exist would wait
				// for it forever; pre-registration may name a pool created
				// later, an assignment may not.
				if regapi.ValidPoolName(b.Pool) == nil {
					_, err := rev.GetPool(r.Context(), h.NC, rev.GetPoolRequest{Org: r.PathValue("org"), Name: b.Pool})
					if errs.Is(err, errs.KindNotFound) {
						return nil, errs.NotFound("pool %s does not exist in organization %s; create it first", b.Pool, r.PathValue("org"))
					}
					if err != nil {
						return nil, err
					}
				}
				return []regapi.MachineCommand{regapi.AssignToPool{Pool: b.Pool}}, nil
			}),
		machineRoute("POST", one+"/unassign", "Unassign a machine (drains it first)", domain.RoleOperator, 200, nil, noBody(regapi.Unassign{})),
		machineRoute("POST", one+"/force-unassign", "Unassign a machine without waiting for a drain", domain.RoleOperator, 200, nil, noBody(regapi.ForceUnassign{})),
		machineRoute("POST", one+"/maintenance/on", "Put a machine into maintenance (cordon and drain)", domain.RoleOperator, 200, nil, noBody(regapi.SetMaintenance{Enabled: true})),
		machineRoute("POST", one+"/maintenance/off", "Take a machine out of maintenance", domain.RoleOperator, 200, nil, noBody(regapi.SetMaintenance{Enabled: false})),
		machineRoute("POST", one+"/abort-deletion", "Abort a graceful deletion while it is still preparing", domain.RoleOperator, 200, nil, noBody(regapi.AbortDeletion{})),
	}
	// The delete route documents its query parameter.
	for i := range routes {
		if routes[i].Method == "DELETE" && routes[i].Path == one {
			routes[i].Query = []string{"policy"}
		}
	}
	routes = append(routes, tokenRoutes("/api/v1/orgs/{org}/tokens", regapi.KindAPI, "API tokens")...)
	routes = append(routes, tokenRoutes("/api/v1/orgs/{org}/enrollment-tokens", regapi.KindEnrollment, "enrollment tokens")...)
	return routes
}
