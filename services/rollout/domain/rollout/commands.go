package rollout

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// Command is any rollout command; Decide runs it.
type Command interface {
	CommandType() string
	decide(s *State, now time.Time) ([]any, error)
}

// Decide validates cmd, checks it against the rollout's state and returns
// the events it causes: none when it is already done (idempotent), a
// validation error naming every bad field, NotFound for a rollout or
// machine that does not exist, or a Conflict saying why the state forbids
// it. It never mutates s.
//
// When the events leave the rollout with nothing in flight and an outcome
// decided, the finishing event (Succeeded, Failed or Aborted) is appended
// to them. Appends are not atomic; every prefix of the events is a
// consistent state, and the planner proposes Finish for a prefix that
// lacks it.
func Decide(s State, cmd Command, now time.Time) ([]any, error) {
	if cmd == nil {
		return nil, errs.Internal("nil rollout command")
	}
	_, start := cmd.(Start)
	_, refuse := cmd.(RefuseStart)
	if !start && !refuse && !s.Exists() {
		return nil, errs.NotFound("rollout does not exist")
	}
	if s.Refused && !start { // Start says itself that it exists
		if refuse {
			return nil, nil // recorded already (a redelivered request)
		}
		return nil, errs.Conflict("rollout %s is %s: it never started, and nothing changes it; apply the revision again once that is fixed", s.ID, s.describe())
	}
	evs, err := cmd.decide(&s, now)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	if _, finish := cmd.(Finish); finish || !s.mayFinishAfter(evs) {
		return evs, nil
	}
	after := s.Clone()
	for _, e := range evs {
		after.Apply(e)
	}
	return append(evs, finishEvents(&after, now)...), nil
}

// CommandTypes returns a zero value of every command, for registering them
// with the command bus.
func CommandTypes() []any {
	return []any{
		Start{}, RefuseStart{}, ResolveDependency{}, RecordChecks{}, Pause{}, Resume{}, Abort{}, Retry{},
		BeginMachine{}, StartStep{}, SucceedStep{}, FailStep{}, CancelStep{}, RecordDrainBlocked{},
		CompleteMachine{}, Finish{}, Remediate{},
	}
}

// --- operator commands ---

// Start creates a rollout from a snapshot of its machines. The service
// layer builds it from a pool.apply_requested (or a one-machine request)
// and the registry's machines; Machines may come in any order.
type Start struct {
	ID          string      `json:"id"`
	Pool        string      `json:"pool"`
	Cluster     string      `json:"cluster,omitempty"`
	Revision    uint64      `json:"revision"`
	Hash        string      `json:"hash,omitempty"`
	Rollback    bool        `json:"rollback,omitempty"`
	After       string      `json:"after,omitempty"`
	PoolSize    int         `json:"pool_size,omitempty"` // 0: the number of machines
	Machines    []Machine   `json:"machines"`
	Excluded    []Exclusion `json:"excluded,omitempty"`
	Strategy    Strategy    `json:"strategy"`
	RequestedBy string      `json:"requested_by,omitempty"`
	// Provisioning marks a machine's own first rollout (it never joined):
	// a later pool rollout leaves it out, and it catches up with the
	// pool's applied revision when it finishes.
	Provisioning bool `json:"provisioning,omitempty"`
}

// RefuseStart records that a rollout asked for cannot start (see
// StartRefused): the service sends it when Start, or reading what Start
// needs, is refused for a reason that retrying does not fix. The reason is
// kept as one line (control characters escaped) of at most
// fields.MaxReason bytes, whatever error text it comes from. Pool and
// Revision are recorded as the request gave them: they may be what was
// wrong with it.
type RefuseStart struct {
	ID          string `json:"id"`
	Pool        string `json:"pool"`
	Cluster     string `json:"cluster,omitempty"`
	Revision    uint64 `json:"revision"`
	Reason      string `json:"reason"`
	RequestedBy string `json:"requested_by,omitempty"`
}

// Pause stops new machines from beginning; machines already begun finish.
type Pause struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Resume ends a pause.
type Resume struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Abort winds the rollout down: machines that have not rebooted are
// uncordoned, machines that have finish their steps.
type Abort struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Retry goes on with a failed rollout: failed machines resume at the step
// that failed, failed sanity checks run again.
type Retry struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// --- the service's reports from outside ---

// ResolveDependency reports that the rollout this one comes after
// succeeded or was aborted.
type ResolveDependency struct {
	Rollout string `json:"rollout"`
	Outcome Status `json:"outcome"`
}

// RecordChecks records the sanity checks; every one of RequiredChecks must
// be reported.
type RecordChecks struct {
	Results []CheckResult `json:"results"`
}

// --- the process manager's own commands (proposed by the planner) ---

// BeginMachine takes the next machine in order out of service.
type BeginMachine struct {
	Machine string `json:"machine"`
}

// StartStep starts a machine's next step. Attempt must be the machine's
// next attempt of that step (MachineState.NextAttempt), so that a stale
// proposal is refused rather than reusing an instruction id; InstructionID
// is required for the reboot step and never reused (see InstructionID).
type StartStep struct {
	Machine       string `json:"machine"`
	Step          Step   `json:"step"`
	Attempt       int    `json:"attempt"`
	InstructionID string `json:"instruction_id,omitempty"`
}

// SucceedStep reports that a running step took effect.
type SucceedStep struct {
	Machine string `json:"machine"`
	Step    Step   `json:"step"`
	Attempt int    `json:"attempt"`
	Message string `json:"message,omitempty"`
	// NodeBootID (cordon only) is the boot id the node's kubelet reported
	// before the reboot; see MachineState.NodeBootIDBefore.
	NodeBootID string `json:"node_boot_id,omitempty"`
}

// FailStep reports that a running step failed or timed out. For the
// reboot step the service must first have withdrawn the instruction and
// made sure the agent had not accepted it (else it is a SucceedStep).
type FailStep struct {
	Machine  string `json:"machine"`
	Step     Step   `json:"step"`
	Attempt  int    `json:"attempt"`
	Reason   string `json:"reason"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// CancelStep stops a running cordon, drain or reboot during an abort. A
// reboot may be cancelled only once its instruction was withdrawn before
// the agent accepted it.
type CancelStep struct {
	Machine string `json:"machine"`
	Step    Step   `json:"step"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason,omitempty"`
}

// RecordDrainBlocked records that a PodDisruptionBudget refuses an
// eviction of a running drain. The same pod and budget are written at
// most every DrainBlockedEvery; in between it is a no-op.
type RecordDrainBlocked struct {
	Machine   string        `json:"machine"`
	Attempt   int           `json:"attempt"`
	Pod       string        `json:"pod"`
	Budget    string        `json:"budget"`
	WaitedFor time.Duration `json:"waited_for"`
	Message   string        `json:"message,omitempty"`
}

// CompleteMachine finishes a machine whose steps are over: done, or
// released by an abort.
type CompleteMachine struct {
	Machine string `json:"machine"`
}

// Finish records the rollout's outcome once nothing is in flight.
type Finish struct{}

// Remediate gives a machine that never came back one more reboot (see
// Strategy.RemediationMaxInFlight). The planner proposes it.
type Remediate struct {
	Machine string `json:"machine"`
}

func (RefuseStart) CommandType() string        { return "rollout.refuse_start" }
func (Start) CommandType() string              { return "rollout.start" }
func (Pause) CommandType() string              { return "rollout.pause" }
func (Resume) CommandType() string             { return "rollout.resume" }
func (Abort) CommandType() string              { return "rollout.abort" }
func (Retry) CommandType() string              { return "rollout.retry" }
func (ResolveDependency) CommandType() string  { return "rollout.resolve_dependency" }
func (RecordChecks) CommandType() string       { return "rollout.record_checks" }
func (BeginMachine) CommandType() string       { return "rollout.begin_machine" }
func (StartStep) CommandType() string          { return "rollout.start_step" }
func (SucceedStep) CommandType() string        { return "rollout.succeed_step" }
func (FailStep) CommandType() string           { return "rollout.fail_step" }
func (CancelStep) CommandType() string         { return "rollout.cancel_step" }
func (RecordDrainBlocked) CommandType() string { return "rollout.record_drain_blocked" }
func (CompleteMachine) CommandType() string    { return "rollout.complete_machine" }
func (Finish) CommandType() string             { return "rollout.finish" }
func (Remediate) CommandType() string          { return "rollout.remediate" }

// --- refusals ---

func (s *State) refuse(action, hint string) error {
	msg := fmt.Sprintf("rollout %s is %s; it cannot %s", s.ID, s.describe(), action)
	if hint != "" {
		msg += "; " + hint
	}
	return errs.Conflict("%s", msg)
}

func (s *State) describe() string {
	switch {
	case s.Refused:
		return "refused (" + s.Reason + ")"
	case s.Outcome == StatusFailed && s.Reason != "":
		return "failed (" + s.Reason + ")"
	case s.Outcome != "":
		return string(s.Outcome)
	case s.Aborting:
		return "being aborted"
	}
	return string(s.Status())
}

func (s *State) machine(uuid string) (*MachineState, error) {
	if m, ok := s.Machine(uuid); ok {
		return m, nil
	}
	return nil, errs.NotFound("machine %q is not part of rollout %s", uuid, s.ID)
}

func describeMachine(m *MachineState) string {
	switch {
	case m.Phase == PhaseActive && m.Step == "":
		return "begun"
	case m.Phase == PhaseActive:
		return fmt.Sprintf("at step %s (attempt %d, %s)", m.Step, m.Attempt, m.StepStatus)
	case m.Phase == PhaseFailed && m.Failure != nil:
		return fmt.Sprintf("failed at %s", m.Failure.Step)
	}
	return string(m.Phase)
}

// --- validation ---

var (
	tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	uuidRE  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	instrRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
)

const maxTimeout = values.Duration(24 * time.Hour)

func (c Start) validate() (Strategy, int, error) {
	var f errs.Fields
	if !tokenRE.MatchString(c.ID) {
		f.Add("id", "must be 1-128 letters, digits, '-' or '_'")
	}
	if err := fields.DNSLabel(c.Pool); err != nil {
		f.Add("pool", "%v", err)
	}
	if c.Revision == 0 {
		f.Add("revision", "must be a revision number (1 or more)")
	}
	if c.After != "" {
		if !tokenRE.MatchString(c.After) {
			f.Add("after", "must be a rollout id")
		} else if c.After == c.ID {
			f.Add("after", "a rollout cannot come after itself")
		}
	}
	seen := map[string]bool{}
	for i, m := range c.Machines {
		if !uuidRE.MatchString(m.UUID) {
			f.Add(fmt.Sprintf("machines[%d].uuid", i), "must be a lowercase canonical SMBIOS UUID")
		} else if seen[m.UUID] {
			f.Add(fmt.Sprintf("machines[%d].uuid", i), "machine %s is listed twice", m.UUID)
		}
		seen[m.UUID] = true
		if err := fields.Hostname(m.Hostname); err != nil {
			f.Add(fmt.Sprintf("machines[%d].hostname", i), "%v", err)
		}
		if m.UpgradeIndex < 0 {
			f.Add(fmt.Sprintf("machines[%d].upgrade_index", i), "must be positive (0: unset)")
		}
	}
	size := c.PoolSize
	if size == 0 {
		size = len(c.Machines)
	}
	if size < len(c.Machines) {
		f.Add("pool_size", "must be at least the number of machines (%d), got %d", len(c.Machines), c.PoolSize)
	}
	st := c.Strategy.WithDefaults()
	f.Merge("strategy", st.Validate())
	return st, size, f.Err()
}

// --- decisions ---

func (c Start) decide(s *State, now time.Time) ([]any, error) {
	st, size, err := c.validate()
	if err != nil {
		return nil, err
	}
	if s.Exists() {
		return nil, errs.Conflict("rollout %s already exists", s.ID)
	}
	ms := slices.Clone(c.Machines)
	Order(ms)
	st.MaintenanceWindows = slices.Clone(st.MaintenanceWindows)
	return []any{Started{
		ID: c.ID, Pool: c.Pool, Cluster: c.Cluster, Revision: c.Revision, Hash: c.Hash, Rollback: c.Rollback,
		After: c.After, PoolSize: size, Machines: ms, Excluded: slices.Clone(c.Excluded), Strategy: st,
		RequestedBy: c.RequestedBy, Provisioning: c.Provisioning, At: now,
	}}, nil
}

func (c RefuseStart) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	if !tokenRE.MatchString(c.ID) {
		f.Add("id", "must be 1-128 letters, digits, '-' or '_'")
	}
	if strings.TrimSpace(c.Reason) == "" {
		f.Add("reason", "say why the rollout cannot start")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if s.Exists() { // a refused one is a no-op (Decide)
		return nil, errs.Conflict("rollout %s started already; it cannot be refused", s.ID)
	}
	return []any{StartRefused{
		ID: c.ID, Pool: oneLine(c.Pool, 253), Cluster: oneLine(c.Cluster, 253), Revision: c.Revision,
		Reason: oneLine(c.Reason, fields.MaxReason), RequestedBy: oneLine(c.RequestedBy, 256), At: now,
	}}, nil
}

// oneLine makes text from elsewhere (an error's message) fit a log line
// that a terminal shows as it is: control and direction-changing
// characters are escaped, invalid UTF-8 is replaced, and it is cut to at
// most max bytes on a character boundary.
func oneLine(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) || r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 {
			fmt.Fprintf(&b, "\\u%04X", r)
			continue
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) <= max {
		return out
	}
	const more = "…"
	cut := max - len(more)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + more
}

func (c ResolveDependency) decide(s *State, now time.Time) ([]any, error) {
	if c.Outcome != StatusSucceeded && c.Outcome != StatusAborted {
		return nil, errs.Invalid("outcome", "must be succeeded or aborted (a failed rollout may still be retried), got %q", c.Outcome)
	}
	if s.After == "" || c.Rollout != s.After {
		return nil, errs.Invalid("rollout", "rollout %s does not come after %q", s.ID, c.Rollout)
	}
	if s.AfterStatus == c.Outcome {
		return nil, nil
	}
	if s.AfterStatus != "" {
		return nil, s.refuse("record that "+c.Rollout+" "+string(c.Outcome), "it was already recorded as "+string(s.AfterStatus))
	}
	if s.Outcome != "" {
		return nil, s.refuse("record its dependency's outcome", "")
	}
	return []any{DependencyResolved{Rollout: c.Rollout, Outcome: c.Outcome, At: now}}, nil
}

func (c RecordChecks) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	reported := map[string]bool{}
	for i, r := range c.Results {
		if !slices.Contains(RequiredChecks, r.Name) {
			f.Add(fmt.Sprintf("results[%d].name", i), "unknown check %q", r.Name)
		}
		if !r.Passed && r.Reason == "" {
			f.Add(fmt.Sprintf("results[%d].reason", i), "a failed check must say why")
		}
		reported[r.Name] = true
	}
	for _, name := range RequiredChecks {
		if !reported[name] {
			f.Add("results", "check %s is missing", name)
		}
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	switch {
	case s.Outcome != "" || s.Aborting:
		return nil, s.refuse("record sanity checks", "")
	case s.After != "" && s.AfterStatus != StatusSucceeded:
		return nil, s.refuse("record sanity checks", "the checks run once rollout "+s.After+" succeeded")
	case s.Checks != nil:
		return nil, s.refuse("record sanity checks again", "they were recorded already")
	}
	return []any{ChecksRecorded{Results: slices.Clone(c.Results), At: now}}, nil
}

// checkReason refuses an operator's reason that is not one line of text:
// it is kept in the operation log and the audit log, where a control
// character or an escape sequence would rewrite what a terminal shows.
func checkReason(reason string) error {
	if err := fields.Text(reason, fields.MaxReason, false); err != nil {
		return errs.Invalid("reason", "%v", err)
	}
	return nil
}

func (c Pause) decide(s *State, now time.Time) ([]any, error) {
	if err := checkReason(c.Reason); err != nil {
		return nil, err
	}
	switch {
	case s.Outcome == StatusFailed:
		return nil, s.refuse("be paused", "nothing moves; retry or abort it")
	case s.Outcome != "":
		return nil, s.refuse("be paused", "")
	case s.Aborting:
		return nil, s.refuse("be paused", "")
	case s.Paused:
		return nil, nil
	}
	return []any{Paused{By: c.By, Reason: c.Reason, At: now}}, nil
}

func (c Resume) decide(s *State, now time.Time) ([]any, error) {
	if err := checkReason(c.Reason); err != nil {
		return nil, err
	}
	switch {
	case s.Outcome == StatusFailed:
		return nil, s.refuse("be resumed", "retry it instead")
	case s.Outcome != "":
		return nil, s.refuse("be resumed", "")
	case s.Aborting:
		return nil, s.refuse("be resumed", "")
	case !s.Paused:
		return nil, nil
	}
	return []any{Resumed{By: c.By, Reason: c.Reason, At: now}}, nil
}

func (c Abort) decide(s *State, now time.Time) ([]any, error) {
	if err := checkReason(c.Reason); err != nil {
		return nil, err
	}
	switch {
	case s.Outcome == StatusSucceeded || s.Outcome == StatusAborted:
		return nil, s.refuse("be aborted", "")
	case s.Aborting:
		return nil, nil
	}
	return []any{AbortRequested{By: c.By, Reason: c.Reason, At: now}}, nil
}

func (c Retry) decide(s *State, now time.Time) ([]any, error) {
	if err := checkReason(c.Reason); err != nil {
		return nil, err
	}
	switch {
	case s.Outcome == StatusSucceeded || s.Outcome == StatusAborted:
		return nil, s.refuse("be retried", "")
	case s.Aborting:
		return nil, s.refuse("be retried", "")
	case s.After != "" && s.AfterStatus == StatusAborted:
		return nil, s.refuse("be retried", "rollout "+s.After+", which it comes after, was aborted; start a new rollout")
	case !s.Halted() && (s.Checks == nil || s.ChecksPassed):
		return nil, s.refuse("be retried", "nothing failed")
	}
	return []any{Retried{By: c.By, Reason: c.Reason, At: now}}, nil
}

func (c BeginMachine) decide(s *State, now time.Time) ([]any, error) {
	m, err := s.machine(c.Machine)
	if err != nil {
		return nil, err
	}
	if m.Phase != PhaseWaiting {
		return nil, s.refuse("begin machine "+m.Hostname, "it is "+describeMachine(m))
	}
	ok, blk := s.BeginCandidates(now)
	if len(ok) > 0 && ok[0] == c.Machine { // strictly in order
		return []any{MachineBegun{Machine: c.Machine, At: now}}, nil
	}
	if blk != nil {
		return nil, s.refuse("begin machine "+m.Hostname, blk.Message)
	}
	next, _ := s.Machine(ok[0])
	return nil, s.refuse("begin machine "+m.Hostname, "machines begin in rollout order; the next one is "+next.Hostname)
}

func (c StartStep) decide(s *State, now time.Time) ([]any, error) {
	if !c.Step.Valid() {
		return nil, errs.Invalid("step", "unknown step %q", c.Step)
	}
	m, err := s.machine(c.Machine)
	if err != nil {
		return nil, err
	}
	if c.Step == StepReboot {
		switch {
		case !instrRE.MatchString(c.InstructionID):
			return nil, errs.Invalid("instruction_id", "the reboot step needs an instruction id of 1-128 [A-Za-z0-9._:-]")
		case slices.Contains(m.Instructions, c.InstructionID):
			return nil, errs.Invalid("instruction_id", "instruction %s was issued before; a new reboot needs a new id", c.InstructionID)
		}
	}
	mv := s.MoveFor(m)
	if mv.Start != c.Step {
		return nil, s.refuse(fmt.Sprintf("start step %s of machine %s", c.Step, m.Hostname), "the machine is "+describeMachine(m))
	}
	if c.Attempt != mv.Attempt {
		return nil, s.refuse(fmt.Sprintf("start attempt %d of step %s of machine %s", c.Attempt, c.Step, m.Hostname),
			fmt.Sprintf("the next attempt is %d (the proposal is stale)", mv.Attempt))
	}
	if blk := s.StepBlock(m, c.Step, now); blk != nil {
		return nil, s.refuse(fmt.Sprintf("start step %s of machine %s now", c.Step, m.Hostname), blk.Message)
	}
	e := StepStarted{Machine: m.UUID, Step: c.Step, Attempt: c.Attempt, Release: mv.Release,
		Deadline: s.Deadline(m, c.Step, c.Attempt, now), At: now}
	if c.Step == StepReboot {
		e.InstructionID, e.Kind = c.InstructionID, m.Kind
	}
	return []any{e}, nil
}

// outcome checks a report about a running step. It returns done=true when
// the step already has exactly this outcome (a repeated report: no-op).
func (s *State) outcome(uuid string, step Step, attempt int, status StepStatus, verb string) (*MachineState, bool, error) {
	if !step.Valid() {
		return nil, false, errs.Invalid("step", "unknown step %q", step)
	}
	m, err := s.machine(uuid)
	if err != nil {
		return nil, false, err
	}
	if m.Step == step && m.Attempt == attempt && m.StepStatus == status {
		return m, true, nil
	}
	if m.Phase != PhaseActive || m.StepStatus != StepStatusRunning || m.Step != step || m.Attempt != attempt {
		return nil, false, s.refuse(fmt.Sprintf("%s attempt %d of step %s of machine %s", verb, attempt, step, m.Hostname),
			"the machine is "+describeMachine(m)+"; the report is stale")
	}
	return m, false, nil
}

func (c SucceedStep) decide(s *State, now time.Time) ([]any, error) {
	_, done, err := s.outcome(c.Machine, c.Step, c.Attempt, StepStatusSucceeded, "succeed")
	if err != nil || done {
		return nil, err
	}
	return []any{StepSucceeded{Machine: c.Machine, Step: c.Step, Attempt: c.Attempt, Message: c.Message, NodeBootID: c.NodeBootID, At: now}}, nil
}

func (c FailStep) decide(s *State, now time.Time) ([]any, error) {
	if c.Reason == "" {
		return nil, errs.Invalid("reason", "say why the step failed")
	}
	_, done, err := s.outcome(c.Machine, c.Step, c.Attempt, StepStatusFailed, "fail")
	if err != nil || done {
		return nil, err
	}
	return []any{StepFailed{Machine: c.Machine, Step: c.Step, Attempt: c.Attempt, Reason: c.Reason, TimedOut: c.TimedOut, At: now}}, nil
}

func (c CancelStep) decide(s *State, now time.Time) ([]any, error) {
	_, done, err := s.outcome(c.Machine, c.Step, c.Attempt, StepStatusCancelled, "cancel")
	if err != nil || done {
		return nil, err
	}
	if !s.Aborting {
		return nil, s.refuse("cancel a step", "only an abort cancels steps")
	}
	if !c.Step.Disruptive() {
		return nil, s.refuse("cancel step "+string(c.Step), "only cordon, drain and an unaccepted reboot can be cancelled; the machine finishes its steps")
	}
	return []any{StepCancelled{Machine: c.Machine, Step: c.Step, Attempt: c.Attempt, Reason: c.Reason, At: now}}, nil
}

func (c RecordDrainBlocked) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	if c.Pod == "" {
		f.Add("pod", "name the pod (namespace/name)")
	}
	if c.Budget == "" {
		f.Add("budget", "name the PodDisruptionBudget (namespace/name)")
	}
	if c.WaitedFor < 0 {
		f.Add("waited_for", "must not be negative")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	m, err := s.machine(c.Machine)
	if err != nil {
		return nil, err
	}
	if s.running(c.Machine, StepDrain, c.Attempt) == nil {
		return nil, s.refuse(fmt.Sprintf("record that attempt %d of the drain of machine %s is blocked", c.Attempt, m.Hostname),
			"the machine is "+describeMachine(m)+"; the report is stale")
	}
	if b := m.Blocked; b != nil && b.Pod == c.Pod && b.Budget == c.Budget && now.Before(b.At.Add(DrainBlockedEvery)) {
		return nil, nil // the same block, written less than DrainBlockedEvery ago
	}
	return []any{DrainBlocked{Machine: c.Machine, Attempt: c.Attempt, Block: DrainBlock{
		Pod: c.Pod, Budget: c.Budget, WaitedFor: values.Duration(c.WaitedFor), Message: c.Message, At: now,
	}}}, nil
}

func (c CompleteMachine) decide(s *State, now time.Time) ([]any, error) {
	m, err := s.machine(c.Machine)
	if err != nil {
		return nil, err
	}
	switch s.MoveFor(m).Finish {
	case OutcomeDone:
		return []any{MachineDone{Machine: m.UUID, At: now}}, nil
	case OutcomeReleased:
		return []any{MachineReleased{Machine: m.UUID, At: now}}, nil
	}
	if m.Phase == PhaseDone || m.Phase == PhaseReleased {
		return nil, nil
	}
	return nil, s.refuse("complete machine "+m.Hostname, "it is "+describeMachine(m))
}

func (c Finish) decide(s *State, now time.Time) ([]any, error) {
	if s.Outcome != "" {
		return nil, nil
	}
	if evs := finishEvents(s, now); len(evs) > 0 {
		return evs, nil
	}
	return nil, s.refuse("finish", "machines are still moving or waiting")
}

// finishEvents are the events that finish the rollout, if it can finish:
// the final one last, and before it, when every machine's report would not
// fit in one event, the reports that do not (MachinesReported).
func finishEvents(s *State, now time.Time) []any {
	switch outcome, reason := s.Finishing(); outcome {
	case StatusSucceeded:
		return []any{Succeeded{At: now}}
	case StatusFailed:
		evs, last := splitReport(s.Report(), now)
		return append(evs, Failed{Reason: reason, Machines: last, At: now})
	case StatusAborted:
		evs, last := splitReport(s.Report(), now)
		return append(evs, Aborted{Machines: last, At: now})
	}
	return nil
}

// maxReportBytes bounds the machine reports of one event, well under the
// server's maximum payload (1 MiB by default), which refuses the message
// whole: a failed rollout of 10,000 machines could not record its end.
const maxReportBytes = 512 << 10

// splitReport cuts rs into MachinesReported events of at most
// maxReportBytes each, the last part left for the final event. A rollout
// whose reports fit in one event gets none.
func splitReport(rs []MachineReport, now time.Time) (before []any, last []MachineReport) {
	start, size := 0, 0
	for i := range rs {
		n := reportBytes(&rs[i])
		if size+n > maxReportBytes && i > start {
			before = append(before, MachinesReported{Machines: rs[start:i:i], At: now})
			start, size = i, 0
		}
		size += n
	}
	return before, rs[start:]
}

// reportBytes is at least the JSON size of r: the field names and
// punctuation, its identifiers as they are, and its reason as if every
// byte were escaped (\u003c is six bytes for one).
func reportBytes(r *MachineReport) int {
	return 128 + len(r.UUID) + len(r.Hostname) + len(r.Outcome) + len(r.Node) + len(r.Step) + 6*len(r.Reason)
}

func (c Remediate) decide(s *State, now time.Time) ([]any, error) {
	m, err := s.machine(c.Machine)
	if err != nil {
		return nil, err
	}
	if !s.remediable(m) {
		return nil, s.refuse("remediate "+m.Hostname, "remediation is off, the machine did not time out waiting to come back, it was remediated already, or "+
			fmt.Sprintf("%d machines are being remediated (the cap)", s.Strategy.RemediationMaxInFlight))
	}
	reason := fmt.Sprintf("%s timed out; one more reboot into revision %d (remediation %d of %d)", m.Failure.Step, s.Revision, m.Remediations+1, MaxRemediations)
	return []any{MachineRemediated{Machine: m.UUID, Reason: reason, At: now}}, nil
}
