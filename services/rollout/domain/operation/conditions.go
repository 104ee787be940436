package operation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Condition says, as Cluster API's conditions do, what state an
// operation is in and why: Type names the aspect, Status is True, False or
// Unknown, Reason is a CamelCase word a script can match, Message is for a
// person, and Until is when a wait lifts by itself, if known.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Until   time.Time `json:"until,omitzero"`
}

// Condition types.
const (
	// ConditionProgressing is True while machines move, False with the
	// reason they do not (a window, the budget, a pause, a dependency, a
	// failure), and absent once the operation is over.
	ConditionProgressing = "Progressing"
	// ConditionDrainBlocked is True while a PodDisruptionBudget refuses an
	// eviction of a drain in progress.
	ConditionDrainBlocked = "DrainBlocked"
)

// reasons maps the planner's block reasons to condition reasons.
var reasons = map[rollout.BlockReason]string{
	rollout.BlockFinished:     "Finished",
	rollout.BlockAborting:     "Aborting",
	rollout.BlockPaused:       "Paused",
	rollout.BlockDependency:   "WaitingForRollout",
	rollout.BlockChecks:       "WaitingForChecks",
	rollout.BlockHalted:       "MachineFailed",
	rollout.BlockControlPlane: "ControlPlaneFirst",
	rollout.BlockBudget:       "BudgetFull",
	rollout.BlockPause:        "PausingBetweenMachines",
	rollout.BlockWindow:       "OutsideMaintenanceWindow",
}

// precedence orders the reasons a rollout waits for, the one that
// explains the most first.
var precedence = []rollout.BlockReason{
	rollout.BlockHalted, rollout.BlockPaused, rollout.BlockAborting, rollout.BlockDependency, rollout.BlockChecks,
	rollout.BlockWindow, rollout.BlockPause, rollout.BlockControlPlane, rollout.BlockBudget, rollout.BlockFinished,
}

// Explain derives a rollout's conditions, when it last made progress and
// an estimate of when it is done, from its state and what the planner says
// it waits for (plan.Next(s, now).Waiting). It is computed when the
// rollout is read, so it is never stale and costs no event.
func Explain(s rollout.State, waiting []rollout.Block, now time.Time) (conds []Condition, lastProgress, doneBy time.Time) {
	if !s.Exists() {
		return nil, time.Time{}, time.Time{}
	}
	lastProgress = s.StartedAt
	var blocked []string
	var moving, done, remaining int
	var spent time.Duration
	for _, m := range s.Machines {
		for _, t := range []time.Time{m.BegunAt, m.StepStartedAt, m.FinishedAt} {
			if t.After(lastProgress) {
				lastProgress = t
			}
		}
		switch m.Phase {
		case rollout.PhaseDone:
			done++
			if !m.BegunAt.IsZero() && m.FinishedAt.After(m.BegunAt) {
				spent += m.FinishedAt.Sub(m.BegunAt)
			}
		case rollout.PhaseActive:
			moving++
			remaining++
			if b := m.Blocked; b != nil && m.Step == rollout.StepDrain && m.StepStatus == rollout.StepStatusRunning {
				waited := now.Sub(m.StepStartedAt).Round(time.Second)
				blocked = append(blocked, fmt.Sprintf("%s: pod %s cannot be evicted: PodDisruptionBudget %s refuses it (draining for %s)", m.Hostname, b.Pod, b.Budget, waited))
			}
		case rollout.PhaseWaiting:
			remaining++
		}
	}
	if s.Over() {
		return nil, lastProgress, time.Time{}
	}
	if len(blocked) > 0 {
		conds = append(conds, Condition{Type: ConditionDrainBlocked, Status: "True", Reason: "PodDisruptionBudget",
			Message: strings.Join(blocked, "; ")})
	}
	// The wait that explains the most; a machine's block lifts for that
	// machine only, the rollout's for all.
	var why *rollout.Block
	count := map[rollout.BlockReason]int{}
	for i := range waiting {
		b := &waiting[i]
		count[b.Reason]++
		if why == nil || slices.Index(precedence, b.Reason) < slices.Index(precedence, why.Reason) {
			why = b
		}
	}
	switch {
	case why != nil && (moving == 0 || why.Reason == rollout.BlockHalted || why.Reason == rollout.BlockPaused):
		msg := why.Message
		if n := count[why.Reason]; n > 1 && why.Machine != "" {
			msg += fmt.Sprintf(" (and %d more machines wait for the same)", n-1)
		}
		if !why.Until.IsZero() {
			msg += "; until " + why.Until.UTC().Format(time.RFC3339)
		}
		reason := reasons[why.Reason]
		if reason == "" {
			reason = "Waiting"
		}
		conds = append(conds, Condition{Type: ConditionProgressing, Status: "False", Reason: reason, Message: msg, Until: why.Until})
	case moving > 0:
		msg := fmt.Sprintf("%d machines in progress, %d done, %d to go", moving, done, remaining-moving)
		conds = append(conds, Condition{Type: ConditionProgressing, Status: "True", Reason: "MachinesMoving", Message: msg})
	default:
		conds = append(conds, Condition{Type: ConditionProgressing, Status: "Unknown", Reason: "Planning",
			Message: "the rollout is being planned"})
	}
	// The estimate: the machines done so far took spent/done each, and
	// Budget of them move at once.
	if done > 0 && remaining > 0 {
		per := spent / time.Duration(done)
		parallel := max(1, s.Budget())
		rounds := (remaining + parallel - 1) / parallel
		doneBy = now.Add(per * time.Duration(rounds))
	}
	return conds, lastProgress, doneBy
}
