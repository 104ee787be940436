// Package api is the registry's contract: NATS subjects, requests,
// replies, the machine commands other services send, the integration
// events they consume, and a typed client. The gateway, boot and rollout
// services import it and nothing else of the registry.
//
// Its types are plain data that import only the standard library, nats.go
// and libs/: the registry's domain stays private, and the registry
// translates between the two in its adapters (adapters/wire), whose tests
// check that every type here encodes exactly as its domain counterpart.
package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
)

// Subjects. Machine commands are served on MachineCommandPrefix + the
// command's name after "machine." (e.g. cmd.registry.machine.assign_to_pool).
const (
	QueueGroup           = "registry"
	MachineCommandPrefix = "cmd.registry.machine."
	SubjectRegister      = "cmd.registry.machine.self_register"
	SubjectHeartbeat     = "cmd.registry.machine.heartbeat"
	SubjectMachineGet    = "cmd.registry.machine.get"
	SubjectMachineList   = "cmd.registry.machine.list"
	SubjectOrgCreate     = "cmd.registry.org.create"
	SubjectOrgRename     = "cmd.registry.org.rename"
	SubjectOrgGet        = "cmd.registry.org.get"
	SubjectOrgList       = "cmd.registry.org.list"
	SubjectTokenIssue    = "cmd.registry.token.issue"
	SubjectTokenList     = "cmd.registry.token.list"
	SubjectTokenRevoke   = "cmd.registry.token.revoke"
	SubjectTokenVerify   = "cmd.registry.token.verify"
)

// MachineSubject is the subject of a machine command type such as
// "machine.assign_to_pool".
func MachineSubject(commandType string) string {
	return MachineCommandPrefix + commandType[len("machine."):]
}

// MachineRequest carries one machine command for one machine. Command is
// the command's JSON (e.g. {"pool":"workers"} for assign_to_pool).
type MachineRequest struct {
	Org  string `json:"org"`
	UUID string `json:"uuid"`
	// ExpectedVersion, when set, makes the command conditional (If-Match):
	// a machine that moved on is a precondition failure, not a retry.
	ExpectedVersion uint64          `json:"expected_version,omitempty"`
	Command         json.RawMessage `json:"command,omitempty"`
}

// MachineReply is a machine after a command or query.
type MachineReply struct {
	Machine Machine  `json:"machine"`
	Version uint64   `json:"version"`          // stream sequence of its last event
	Events  []string `json:"events,omitempty"` // types of the events the command appended
	// Deleted: the command removed the machine; Machine is the machine as
	// it last was, with its last status, and Version the deletion's.
	Deleted bool `json:"deleted,omitempty"`
}

// SelfRegister is the boot service's request when a machine iPXE-boots.
type SelfRegister struct {
	EnrollmentToken string    `json:"enrollment_token"`
	UUID            string    `json:"uuid"`
	MAC             string    `json:"mac"`
	At              time.Time `json:"at,omitzero"`
	// RetryIn is how long the boot script will make the firmware wait
	// before it asks again, if it is told to wait.
	RetryIn time.Duration `json:"retry_in,omitempty"`
}

// SelfRegisterReply says which org the token belongs to and whether the
// machine was new.
type SelfRegisterReply struct {
	MachineReply
	Created bool `json:"created"`
}

// Heartbeat records that the machine's agent is alive (not an event).
type Heartbeat struct {
	Org  string    `json:"org"`
	UUID string    `json:"uuid"`
	At   time.Time `json:"at,omitzero"`
}

// MachineGet reads one machine, now or as of At (an RFC 3339 time or a
// stream sequence).
type MachineGet struct {
	Org  string `json:"org"`
	UUID string `json:"uuid"`
	At   string `json:"at,omitempty"`
	// MinVersion is the stream sequence of a machine write the caller
	// made: the answer reflects it (the read waits, briefly, for the
	// projection, and reads the log when the projection stays behind).
	MinVersion uint64 `json:"min_version,omitempty"`
}

// MachineList lists machines of an org, a page at a time (Cursor is the
// Next of the previous page).
type MachineList struct {
	// MinVersion: as in MachineGet; the list waits (briefly) until the
	// projection applied that machine write.
	MinVersion uint64 `json:"min_version,omitempty"`
	Org        string `json:"org"`
	Pool       string `json:"pool,omitempty"`
	Status     string `json:"status,omitempty"`
	Selector   string `json:"selector,omitempty"`
	Cursor     string `json:"cursor,omitempty"`
	Limit      int    `json:"limit,omitempty"`
}

// MachinePage is one page; Next is empty on the last page. A page may hold
// fewer items than asked for while Next is set.
type MachinePage struct {
	Items []Machine `json:"items"`
	Next  string    `json:"next,omitempty"`
}

// OrgCreate creates an organization.
type OrgCreate struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// OrgRename changes an organization's display name.
type OrgRename struct {
	Org             string `json:"org"`
	DisplayName     string `json:"display_name"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// OrgRef names an organization.
type OrgRef struct {
	Org string `json:"org"`
	At  string `json:"at,omitempty"`
}

// Org is an organization as the API shows it.
type Org struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	Version     uint64 `json:"version"`
}

// OrgList is every organization.
type OrgList struct {
	Items []Org `json:"items"`
}

// TokenIssue creates an API token (Kind "api", with a Role) or an
// enrollment token (Kind "enroll").
type TokenIssue struct {
	Org       string    `json:"org"`
	Kind      TokenKind `json:"kind"`
	Name      string    `json:"name,omitempty"`
	Role      Role      `json:"role,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// MaxMachines caps how many machines an enrollment token may register
	// (0: no cap); API tokens have none.
	MaxMachines int `json:"max_machines,omitempty"`
}

// TokenIssued holds the plaintext token: shown once, never stored.
type TokenIssued struct {
	Token string    `json:"token"`
	Info  TokenInfo `json:"info"`
}

// TokenListReq lists an org's tokens of one kind ("" for both).
type TokenListReq struct {
	Org  string    `json:"org"`
	Kind TokenKind `json:"kind,omitempty"`
}

// TokenList is a list of token descriptions (never hashes or secrets).
type TokenList struct {
	Items []TokenInfo `json:"items"`
}

// TokenRevoke revokes one token.
type TokenRevoke struct {
	Org     string `json:"org"`
	TokenID string `json:"token_id"`
}

// TokenVerify checks a presented token of the expected kind.
type TokenVerify struct {
	Token string    `json:"token"`
	Kind  TokenKind `json:"kind"`
}

// Principal is who a verified token belongs to.
type Principal struct {
	Org     string    `json:"org"`
	TokenID string    `json:"token_id"`
	Name    string    `json:"name,omitempty"`
	Kind    TokenKind `json:"kind"`
	Role    Role      `json:"role,omitempty"`
}

// Actor is how events record this principal.
func (p Principal) Actor() string {
	if p.Name == "" {
		return "token:" + p.TokenID
	}
	return "token:" + p.TokenID + " (" + p.Name + ")"
}

// Client calls the registry over NATS.
type Client struct{ NC *nats.Conn }

// Machine runs a machine command such as AssignToPool{Pool: "p"};
// expected, when set, makes it conditional on the machine's version.
func (c Client) Machine(ctx context.Context, orgID, uuid string, cmd MachineCommand, expected uint64) (MachineReply, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return MachineReply{}, err
	}
	return command.Call[MachineRequest, MachineReply](ctx, c.NC, MachineSubject(cmd.CommandType()),
		MachineRequest{Org: orgID, UUID: uuid, ExpectedVersion: expected, Command: body})
}

func (c Client) SelfRegister(ctx context.Context, r SelfRegister) (SelfRegisterReply, error) {
	return command.Call[SelfRegister, SelfRegisterReply](ctx, c.NC, SubjectRegister, r)
}

func (c Client) Heartbeat(ctx context.Context, r Heartbeat) error {
	_, err := command.Call[Heartbeat, struct{}](ctx, c.NC, SubjectHeartbeat, r)
	return err
}

func (c Client) GetMachine(ctx context.Context, r MachineGet) (MachineReply, error) {
	return command.Call[MachineGet, MachineReply](ctx, c.NC, SubjectMachineGet, r)
}

func (c Client) ListMachines(ctx context.Context, r MachineList) (MachinePage, error) {
	return command.Call[MachineList, MachinePage](ctx, c.NC, SubjectMachineList, r)
}

func (c Client) CreateOrg(ctx context.Context, r OrgCreate) (Org, error) {
	return command.Call[OrgCreate, Org](ctx, c.NC, SubjectOrgCreate, r)
}

func (c Client) RenameOrg(ctx context.Context, r OrgRename) (Org, error) {
	return command.Call[OrgRename, Org](ctx, c.NC, SubjectOrgRename, r)
}

func (c Client) GetOrg(ctx context.Context, r OrgRef) (Org, error) {
	return command.Call[OrgRef, Org](ctx, c.NC, SubjectOrgGet, r)
}

func (c Client) ListOrgs(ctx context.Context) (OrgList, error) {
	return command.Call[struct{}, OrgList](ctx, c.NC, SubjectOrgList, struct{}{})
}

func (c Client) IssueToken(ctx context.Context, r TokenIssue) (TokenIssued, error) {
	return command.Call[TokenIssue, TokenIssued](ctx, c.NC, SubjectTokenIssue, r)
}

func (c Client) ListTokens(ctx context.Context, r TokenListReq) (TokenList, error) {
	return command.Call[TokenListReq, TokenList](ctx, c.NC, SubjectTokenList, r)
}

func (c Client) RevokeToken(ctx context.Context, r TokenRevoke) (TokenInfo, error) {
	return command.Call[TokenRevoke, TokenInfo](ctx, c.NC, SubjectTokenRevoke, r)
}

func (c Client) VerifyToken(ctx context.Context, r TokenVerify) (Principal, error) {
	return command.Call[TokenVerify, Principal](ctx, c.NC, SubjectTokenVerify, r)
}
