// Package api is the rollout service's contract on NATS: subjects,
// requests, replies and typed clients for rollouts and operations. The
// gateway and the CLI import it. Its types are plain: it depends only on
// libs/events' command client, libs/fields/values and nats.go, never on
// the service's domain, which ports translates into these types.
package api

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
)

// QueueGroup is the NATS queue group the rollout service's replicas share.
const QueueGroup = "rollout"

// Subjects (request/reply).
const (
	SubjectStart  = "cmd.rollout.start"  // StartRequest → Rollout
	SubjectGet    = "cmd.rollout.get"    // GetRequest → Rollout
	SubjectList   = "cmd.rollout.list"   // ListRequest → RolloutList
	SubjectPause  = "cmd.rollout.pause"  // ControlRequest → Rollout
	SubjectResume = "cmd.rollout.resume" // ControlRequest → Rollout
	SubjectAbort  = "cmd.rollout.abort"  // ControlRequest → Rollout
	SubjectRetry  = "cmd.rollout.retry"  // ControlRequest → Rollout

	SubjectOperationGet  = "cmd.operation.get"  // GetRequest → Operation
	SubjectOperationList = "cmd.operation.list" // ListRequest → OperationList
	SubjectOperationLog  = "cmd.operation.log"  // LogRequest → LogPage
)

// Subjects lists every subject, for NATS permissions and tests.
var Subjects = []string{
	SubjectStart, SubjectGet, SubjectList, SubjectPause, SubjectResume, SubjectAbort, SubjectRetry,
	SubjectOperationGet, SubjectOperationList, SubjectOperationLog,
}

// Operation kinds. A rollout is an operation of kind "rollout" whose id is
// the rollout's; maintenance and graceful deletion are operations of their
// own (aggregate type "operation").
const (
	KindRollout          = "rollout"
	KindMaintenanceEnter = "maintenance_enter"
	KindMaintenanceExit  = "maintenance_exit"
	KindDeletion         = "deletion"
	KindDeletionAbort    = "deletion_abort"
	KindDeletionFinish   = "deletion_finish" // an unsafe deletion: only the node is removed
	KindUnassign         = "unassign"
	// After a force-unassign or a forced deletion only the Node is left to
	// remove (best effort).
	KindForceUnassignCleanup  = "force_unassign_cleanup"
	KindForcedDeletionCleanup = "forced_deletion_cleanup"
	// KindMachine, as a list filter, selects every one-machine operation.
	KindMachine = "machine"
)

// OperationCancelled is the status of a machine operation called off
// before it finished; the other statuses of an operation are a rollout's
// (Status).
const OperationCancelled = "cancelled"

// StartRequest starts a rollout by hand: one machine of a pool (Machine
// set), or the whole pool, optionally after another rollout (After).
// Applying a pool revision through the revisions service
// (pool.apply_requested) starts a pool rollout without this request.
type StartRequest struct {
	Org string `json:"org"`
	// Pool and Revision: the pool revision to roll out. Revision 0 means
	// the pool's latest revision.
	Pool     string `json:"pool"`
	Revision int    `json:"revision,omitempty"`
	// Machine, if set, rolls out only this machine (its UUID).
	Machine string `json:"machine,omitempty"`
	// After is a rollout that must succeed before this one moves (ordering
	// across pools).
	After       string `json:"after,omitempty"`
	RequestedBy string `json:"requested_by,omitempty"`
	// ID, if set, is the new rollout's id (an idempotency handle);
	// otherwise one is made.
	ID string `json:"id,omitempty"`
}

// GetRequest reads one rollout or operation, live or as of At (an RFC 3339
// time or a stream sequence). MinVersion makes a live read wait briefly
// until this replica has applied that version.
type GetRequest struct {
	Org        string `json:"org"`
	ID         string `json:"id"`
	At         string `json:"at,omitempty"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// ListRequest lists an organization's rollouts or operations, newest
// first. Cursor is the Next of the previous page.
type ListRequest struct {
	Org    string `json:"org"`
	Pool   string `json:"pool,omitempty"`
	Status string `json:"status,omitempty"` // a rollout status, or "active"
	Kind   string `json:"kind,omitempty"`   // operations only
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// ControlRequest pauses, resumes, aborts or retries a rollout.
// ExpectedVersion, when set, makes it conditional (If-Match).
type ControlRequest struct {
	Org             string `json:"org"`
	ID              string `json:"id"`
	By              string `json:"by,omitempty"`
	Reason          string `json:"reason,omitempty"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// Rollout is a rollout as the API shows it: the Operation view (status,
// progress, machines, checks, log) with its version.
type Rollout struct {
	Org string `json:"org"`
	View
	Cluster     string    `json:"cluster,omitempty"`
	Strategy    Strategy  `json:"strategy"`
	RequestedBy string    `json:"requested_by,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
	Version     uint64    `json:"version"`
}

// RolloutList is one page of rollouts, without their machines and logs.
type RolloutList struct {
	Items []Rollout `json:"items"`
	Next  string    `json:"next,omitempty"`
}

// Operation is any operation: a rollout, or a maintenance, unassignment or
// deletion of one machine. Rollout is set for a rollout.
type Operation struct {
	Org      string   `json:"org"`
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Pool     string   `json:"pool,omitempty"`
	Machine  string   `json:"machine,omitempty"` // UUID, for one-machine operations
	Node     string   `json:"node,omitempty"`
	Status   string   `json:"status"`
	Reason   string   `json:"reason,omitempty"`
	Progress Progress `json:"progress"`
	// Steps is the one-machine operation's current step and its status.
	Step       string    `json:"step,omitempty"`
	StepStatus string    `json:"step_status,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Conditions say what it waits for, if anything (see Condition);
	// LastProgressAt is when it last moved, and EstimatedDoneAt when it
	// should be done, once that can be told.
	Conditions      []Condition `json:"conditions,omitempty"`
	LastProgressAt  time.Time   `json:"last_progress_at,omitzero"`
	EstimatedDoneAt time.Time   `json:"estimated_done_at,omitzero"`
	Version         uint64      `json:"version"`
	LogLength       int         `json:"log_length"`
	Rollout         *Rollout    `json:"rollout,omitempty"`
	Log             []Entry     `json:"log,omitempty"`
}

// OperationList is one page of operations, without their logs.
type OperationList struct {
	Items []Operation `json:"items"`
	Next  string      `json:"next,omitempty"`
}

// LogRequest reads an operation's log from entry After (0: the start). With
// Wait, a request that finds no new entry waits up to Wait (at most
// MaxLogWait) for one: that is how the log is watched live.
type LogRequest struct {
	Org   string        `json:"org"`
	ID    string        `json:"id"`
	After int           `json:"after,omitempty"`
	Limit int           `json:"limit,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
}

// MaxLogWait bounds a log long poll (below NATS request timeouts).
const MaxLogWait = 20 * time.Second

// LogPage is a slice of an operation's log. Next is the After of the next
// request; Final says the operation is over and no entry will follow.
type LogPage struct {
	Entries []Entry `json:"entries"`
	Next    int     `json:"next"`
	Status  string  `json:"status"`
	Final   bool    `json:"final"`
}

// Client calls the rollout service.
type Client struct{ NC *nats.Conn }

func (c Client) Start(ctx context.Context, r StartRequest) (Rollout, error) {
	return command.Call[StartRequest, Rollout](ctx, c.NC, SubjectStart, r)
}

func (c Client) Get(ctx context.Context, r GetRequest) (Rollout, error) {
	return command.Call[GetRequest, Rollout](ctx, c.NC, SubjectGet, r)
}

func (c Client) List(ctx context.Context, r ListRequest) (RolloutList, error) {
	return command.Call[ListRequest, RolloutList](ctx, c.NC, SubjectList, r)
}

func (c Client) Pause(ctx context.Context, r ControlRequest) (Rollout, error) {
	return command.Call[ControlRequest, Rollout](ctx, c.NC, SubjectPause, r)
}

func (c Client) Resume(ctx context.Context, r ControlRequest) (Rollout, error) {
	return command.Call[ControlRequest, Rollout](ctx, c.NC, SubjectResume, r)
}

func (c Client) Abort(ctx context.Context, r ControlRequest) (Rollout, error) {
	return command.Call[ControlRequest, Rollout](ctx, c.NC, SubjectAbort, r)
}

func (c Client) Retry(ctx context.Context, r ControlRequest) (Rollout, error) {
	return command.Call[ControlRequest, Rollout](ctx, c.NC, SubjectRetry, r)
}

func (c Client) GetOperation(ctx context.Context, r GetRequest) (Operation, error) {
	return command.Call[GetRequest, Operation](ctx, c.NC, SubjectOperationGet, r)
}

func (c Client) ListOperations(ctx context.Context, r ListRequest) (OperationList, error) {
	return command.Call[ListRequest, OperationList](ctx, c.NC, SubjectOperationList, r)
}

// Log reads a page of an operation's log; with Wait it is a long poll, and
// the call's timeout is extended by Wait when ctx has no deadline.
func (c Client) Log(ctx context.Context, r LogRequest) (LogPage, error) {
	if _, ok := ctx.Deadline(); !ok && r.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, min(r.Wait, MaxLogWait)+command.DefaultTimeout)
		defer cancel()
	}
	return command.Call[LogRequest, LogPage](ctx, c.NC, SubjectOperationLog, r)
}
