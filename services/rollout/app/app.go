// Package app is the rollout service's application layer: starting and
// controlling rollouts, the process manager that drives each one (the
// planner's decisions appended to the log, its actions carried out), the
// executors of those actions, and the registry updates that follow a
// rollout's events.
//
// The ports call it; the adapters implement its narrow interfaces (the
// registry, the revisions and boot services, the workload clusters, the
// leases). It keeps no state of its own that the log does not hold.
package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/checks"
	"github.com/anvil-fleet/anvil/services/rollout/domain/machineop"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// AggregateType is the type of a rollout's aggregate: its events live on
// events.<org>.rollout.<id>.
const AggregateType = "rollout"

// Registry is what the service needs of the registry.
type Registry interface {
	PoolMachines(ctx context.Context, org, pool string) ([]regapi.Machine, error)
	Machine(ctx context.Context, org, uuid string) (regapi.Machine, error)
	// MachineAt reads the machine as of stream sequence seq (rebuilt from
	// the log; also a machine deleted since).
	MachineAt(ctx context.Context, org, uuid string, seq uint64) (regapi.Machine, error)
	// Command runs a machine command (idempotent in the registry).
	Command(ctx context.Context, org, uuid string, cmd any) (regapi.Machine, error)
}

// Revisions is what the service needs of the revisions service.
type Revisions interface {
	Pool(ctx context.Context, org, pool string) (revapi.Pool, error)
	// PoolAfter reads the pool once the revisions service's read model has
	// applied stream sequence minVersion (a write just made elsewhere).
	PoolAfter(ctx context.Context, org, pool string, minVersion uint64) (revapi.Pool, error)
	// PoolAt reads the pool as of stream sequence seq (rebuilt from the log).
	PoolAt(ctx context.Context, org, pool string, seq uint64) (revapi.Pool, error)
	Revision(ctx context.Context, org, pool string, n int) (revapi.Revision, error)
}

// Boot reads reboot instructions' outcomes.
type Boot interface {
	Instruction(ctx context.Context, org, uuid, id string) (bootapi.Instruction, error)
	// Follow keeps the machine's instructions at hand while a step waits
	// on them, so that Instruction need not ask; call release when done.
	Follow(org, uuid string) (release func())
}

// Clusters hands out a workload cluster's client.
type Clusters interface {
	Cluster(ctx context.Context, org, name string) (Cluster, error)
}

// NodeInfo is what the rollout reads of a node.
type NodeInfo struct {
	Found           bool
	Ready           bool
	BootID          string // the kernel boot id its kubelet reports; empty for none
	Unschedulable   bool
	CordonedByAnvil bool
}

// NodeConfig is what a revision says a node carries. The kubelet applies
// its --node-labels and registration taints only when it creates the Node,
// so a machine that rejoins under its old name would keep the old ones.
type NodeConfig struct {
	Labels map[string]string
	Taints []NodeTaint
}

// NodeTaint is one taint of a NodeConfig.
type NodeTaint struct {
	Key, Value, Effect string
}

// DrainOptions tune a drain.
type DrainOptions struct {
	GracePeriod *time.Duration // nil: each pod's own
	// Blocked is called while a PodDisruptionBudget refuses an eviction.
	Blocked func(pod, budget, message string)
}

// Cluster is one workload cluster, reached with client-go.
type Cluster interface {
	ServerVersion(ctx context.Context) (string, error)
	Node(ctx context.Context, name string) (NodeInfo, error)
	// WatchedNode is the node as the cluster's watch last saw it (one the
	// watch does not hold is read as Node reads it): for waiting on a
	// node with NodeChanged without a call per change.
	WatchedNode(ctx context.Context, name string) (NodeInfo, error)
	Nodes(ctx context.Context) (map[string]NodeInfo, error)
	// Cordon marks the node unschedulable, noting who cordoned it, and
	// returns the node as it is then.
	Cordon(ctx context.Context, name, by string) (NodeInfo, error)
	// Uncordon marks it schedulable and, with want, in the same write
	// gives it the labels and taints of the revision it now runs and
	// removes the ones anvil set earlier that the revision no longer has;
	// labels and taints set by others stay. A missing node is not an
	// error.
	Uncordon(ctx context.Context, name string, want *NodeConfig) error
	// Drain evicts the node's pods until none is left or ctx ends.
	Drain(ctx context.Context, name string, o DrainOptions) error
	// DeleteNode removes the Node object (a deleted machine).
	DeleteNode(ctx context.Context, name string) error
	// DeleteNodeOfBoot removes the Node only while it is the one a kubelet
	// of boot bootID wrote: it deletes nothing, and reports false, when
	// the Node is gone or reports another boot at the moment of the
	// delete, so that a new boot's registration is never removed.
	DeleteNodeOfBoot(ctx context.Context, name, bootID string) (bool, error)
	Budgets(ctx context.Context, nodes []string) ([]checks.Budget, error)
	// NodeChanged returns a channel closed at the node's next change.
	NodeChanged(name string) <-chan struct{}
}

// Leases keep two replicas from driving the same rollout.
type Leases interface {
	// Acquire takes the lease on key, or reports false if another holder
	// has it. The lease ends when ctx ends, when Release is called, or
	// when it could not be renewed (lost is closed then).
	Acquire(ctx context.Context, key string) (lost <-chan struct{}, release func(), ok bool, err error)
}

// Rollouts is the read model of every rollout.
type Rollouts interface {
	Get(org, id string) (Snapshot, bool)
	// Active lists the rollouts that are not finished.
	Active() []Snapshot
	// Peek calls fn with the rollout's state without copying it (false
	// when unknown); PeekActive calls fn for each rollout not finished
	// until it returns false. fn runs under the model's read lock: it
	// must neither keep nor change the state, nor block.
	Peek(org, id string, fn func(*rollout.State)) bool
	PeekActive(fn func(org string, s *rollout.State) bool)
	// WaitFor waits until the model applied seq.
	WaitFor(ctx context.Context, seq uint64) error
	// View is the rollout as the API shows it; the log only withLog.
	View(org, id string, withLog bool) (RolloutView, bool)
	// List is the organization's rollouts, newest first, without their
	// machines and logs.
	List(org string) []RolloutView
	// Log is a slice of the rollout's log from entry after.
	Log(org, id string, after, limit int) (LogSlice, bool)
}

// RolloutView is a rollout's Operation view and what the API adds.
type RolloutView struct {
	Org         string
	View        operation.View
	Cluster     string
	Strategy    rollout.Strategy
	RequestedBy string
	UpdatedAt   time.Time
	Version     uint64
	LogLength   int
}

// LogSlice is part of an operation's log.
type LogSlice struct {
	Entries []operation.Entry
	Next    int
	Status  string
	Final   bool
}

// Snapshot is one rollout as the read model holds it.
type Snapshot struct {
	Org     string
	State   rollout.State
	Version uint64
}

// App is the rollout service's application.
type App struct {
	Store     events.Store
	Events    *events.Registry // decodes the rollout's events
	Registry  Registry
	Revisions Revisions
	Boot      Boot
	Clusters  Clusters
	Leases    Leases
	Rollouts  Rollouts
	// Operations is the machine operations' read model (nil: none run).
	Operations Operations
	Notify     *Notifier
	Log        *slog.Logger
	Now        func() time.Time
	Metrics    *Metrics
	Settings   Settings
	// Retry bounds and spaces the re-decisions of a command that lost an
	// optimistic-concurrency race; zero: aggregate's defaults.
	Retry aggregate.Retry

	drivers driverSet
}

// Settings tune the service.
type Settings struct {
	// Poll is how often an executor looks again when no notification
	// came (boot instructions, machines, nodes). Default 2s.
	Poll time.Duration
	// Replan is the safety-net interval at which a driver plans again
	// without any event, and reads its rollout's log if it has not for
	// that long (a notice lost on the bus). Default 30s.
	Replan time.Duration
	// Instance names this replica (leases, logs).
	Instance string
	// RemediationMaxInFlight goes into every rollout's strategy at start
	// (see rollout.Strategy).
	RemediationMaxInFlight int
}

// Defaults fills unset settings.
func (a *App) Defaults() {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Log == nil {
		a.Log = slog.Default()
	}
	if a.Notify == nil {
		a.Notify = NewNotifier()
	}
	if a.Settings.Poll <= 0 {
		a.Settings.Poll = 2 * time.Second
	}
	if a.Settings.Replan <= 0 {
		a.Settings.Replan = 30 * time.Second
	}
}

func (a *App) now() time.Time { return a.Now().UTC() }

func ref(org, id string) events.AggregateRef {
	return events.AggregateRef{Org: org, Type: AggregateType, ID: id}
}

// rollouts runs commands on rollouts through the one executor every
// service uses (libs/events/aggregate). Every event type stored on a
// rollout's subject is in a.Events, so one that does not decode is an
// internal error, never skipped.
func (a *App) rollouts() *aggregate.Executor[rollout.State] {
	return &aggregate.Executor[rollout.State]{Store: a.Store, Registry: a.Events, Clock: a.now, Retry: a.Retry,
		Apply: func(s rollout.State, _ *events.Envelope, p any) rollout.State {
			s.Apply(p)
			return s
		}}
}

// operations runs commands on machine operations.
func (a *App) operations() *aggregate.Executor[machineop.State] {
	return &aggregate.Executor[machineop.State]{Store: a.Store, Registry: a.Events, Clock: a.now, Retry: a.Retry,
		Apply: func(s machineop.State, _ *events.Envelope, p any) machineop.State {
			s.Apply(p)
			return s
		}}
}

// drafts wraps a decision's events for an append. An event that is not a
// payload is a bug in the decision, reported rather than panicking.
func drafts(evs []any) ([]events.Draft, error) {
	out := make([]events.Draft, len(evs))
	for i, e := range evs {
		p, ok := e.(events.Payload)
		if !ok {
			return nil, errs.Internal("the decision returned %T, which is not an event payload", e)
		}
		out[i] = events.Draft{Payload: p}
	}
	return out, nil
}
