package rollout

import "reflect"

// tally is what the rules would otherwise walk every machine for on every
// decision (how many are out, failed, done, being remediated; where the
// machines that have begun and not settled lie), kept by Apply as it
// changes machines. A State that was not folded from Started (decoded from
// JSON, built by hand) keeps none, and its rules walk the machines.
type tally struct {
	kept bool
	// phases counts the machines by phase, control-plane ones apart.
	phases [2][len(phaseOrder)]int
	// remediating counts the machines with Remediating set.
	remediating int
	// Every machine before firstWaiting has begun; every machine before
	// firstLive is done or released (both final); none from endLive on
	// has begun. The machines that may be out lie in [firstLive, endLive).
	firstWaiting, firstLive, endLive int
}

var phaseOrder = [...]Phase{PhaseWaiting, PhaseActive, PhaseFailed, PhaseDone, PhaseReleased}

func phaseIndex(p Phase) int {
	for i, q := range phaseOrder {
		if p == q {
			return i
		}
	}
	return 0 // unreachable: Apply sets only these phases
}

func cpIndex(m *MachineState) int {
	if m.ControlPlane {
		return 1
	}
	return 0
}

func newTally(ms []MachineState) tally {
	t := tally{kept: true}
	for i := range ms {
		m := &ms[i]
		t.phases[cpIndex(m)][phaseIndex(m.Phase)]++
		if m.Remediating {
			t.remediating++
		}
	}
	t.advance(ms)
	return t
}

// count returns how many machines are in phase p.
func (t *tally) count(p Phase) int {
	i := phaseIndex(p)
	return t.phases[0][i] + t.phases[1][i]
}

// controlPlaneNotDone returns how many control-plane machines are not done.
func (t *tally) controlPlaneNotDone() int {
	n := 0
	for i, c := range t.phases[1] {
		if phaseOrder[i] != PhaseDone {
			n += c
		}
	}
	return n
}

// advance moves the bounds past the machines that no longer belong
// inside them. Every move is forward (a machine never waits again, and
// done and released are final), so keeping them costs O(1) per event
// over a rollout.
func (t *tally) advance(ms []MachineState) {
	for t.firstWaiting < len(ms) && ms[t.firstWaiting].Phase != PhaseWaiting {
		t.firstWaiting++
	}
	for t.firstLive < len(ms) && (ms[t.firstLive].Phase == PhaseDone || ms[t.firstLive].Phase == PhaseReleased) {
		t.firstLive++
	}
}

// setPhase moves machine m of s to phase p.
func (s *State) setPhase(m *MachineState, p Phase) {
	if m.Phase == p {
		return
	}
	t := &s.tally
	if !t.kept {
		m.Phase = p
		return
	}
	cp := cpIndex(m)
	t.phases[cp][phaseIndex(m.Phase)]--
	t.phases[cp][phaseIndex(p)]++
	m.Phase = p
	if i, ok := s.index[m.UUID]; ok && p != PhaseWaiting {
		t.endLive = max(t.endLive, i+1)
	}
	t.advance(s.Machines)
}

// setRemediating sets machine m's Remediating flag.
func (s *State) setRemediating(m *MachineState, on bool) {
	if m.Remediating == on {
		return
	}
	m.Remediating = on
	if s.tally.kept {
		if on {
			s.tally.remediating++
		} else {
			s.tally.remediating--
		}
	}
}

// Live returns the bounds of the machines that have begun and are not
// done or released: every machine that is out (active or failed) lies in
// Machines[lo:hi], and most of them are, so that whoever looks for the
// machines in flight need not walk the whole pool.
func (s *State) Live() (lo, hi int) {
	if t := &s.tally; t.kept {
		return min(t.firstLive, t.endLive), t.endLive
	}
	return 0, len(s.Machines)
}

// firstWaiting is the index of the first machine that waits (from which
// to look for the next ones), len(Machines) when none does.
func (s *State) firstWaiting() int {
	if t := &s.tally; t.kept {
		return t.firstWaiting
	}
	for i := range s.Machines {
		if s.Machines[i].Phase == PhaseWaiting {
			return i
		}
	}
	return len(s.Machines)
}

// Affects says which machines event may change when applied to s: their
// indexes in Machines, or all (the whole state may change: a start, a
// retry). An event that changes only the rollout's own fields affects no
// machine.
func (s *State) Affects(event any) (machines []int, all bool) {
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, false
		}
		event = v.Elem().Interface()
	}
	var uuid string
	switch e := event.(type) {
	case Started, StartRefused, Retried:
		return nil, true
	case MachineBegun:
		uuid = e.Machine
	case StepStarted:
		uuid = e.Machine
	case StepSucceeded:
		uuid = e.Machine
	case StepFailed:
		uuid = e.Machine
	case StepCancelled:
		uuid = e.Machine
	case DrainBlocked:
		uuid = e.Machine
	case MachineDone:
		uuid = e.Machine
	case MachineReleased:
		uuid = e.Machine
	case MachineRemediated:
		uuid = e.Machine
	default:
		return nil, false
	}
	if m, ok := s.Machine(uuid); ok {
		return []int{s.indexOf(m)}, false
	}
	return nil, false
}

// indexOf returns the index of m, a pointer into s.Machines.
func (s *State) indexOf(m *MachineState) int {
	if i, ok := s.index[m.UUID]; ok {
		return i
	}
	for i := range s.Machines {
		if &s.Machines[i] == m {
			return i
		}
	}
	return -1
}

// mayFinishAfter reports whether the rollout might finish once evs are
// applied to s: Finishing needs every machine to be settled, so while one
// stays active it cannot. It counts on the tally and on copies of the few
// machines the events change, so that a decision does not copy the whole
// pool to find out.
func (s *State) mayFinishAfter(evs []any) bool {
	if !s.tally.kept {
		return true
	}
	var touched []int
	for _, e := range evs {
		idx, all := s.Affects(e)
		if all {
			return true
		}
		for _, i := range idx {
			if !containsInt(touched, i) {
				touched = append(touched, i)
			}
		}
	}
	active := s.tally.count(PhaseActive)
	if len(touched) == 0 {
		return active == 0
	}
	mini := *s
	mini.tally = tally{}
	mini.Machines = make([]MachineState, 0, len(touched))
	mini.index = make(map[string]int, len(touched))
	for _, i := range touched {
		m := s.Machines[i]
		if m.Phase == PhaseActive {
			active--
		}
		mini.index[m.UUID] = len(mini.Machines)
		mini.Machines = append(mini.Machines, m)
	}
	for _, e := range evs {
		mini.Apply(e)
	}
	for i := range mini.Machines {
		if mini.Machines[i].Phase == PhaseActive {
			active++
		}
	}
	return active == 0
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Reversal is what Revert needs to take back one event applied with
// ApplyReversibly: the rollout's own fields and the machines it changed,
// as they were.
type Reversal struct {
	top      State
	machines []savedMachine
}

type savedMachine struct {
	i int
	m MachineState
}

// ApplyReversibly folds event into s like Apply, and returns how to take
// it back. A process manager decides a batch of commands, each on what
// the previous ones left, on its own state without copying the whole pool
// for it, and reverts what it could not append.
func (s *State) ApplyReversibly(event any) Reversal {
	r := Reversal{top: *s}
	idx, all := s.Affects(event)
	if all {
		// A start replaces the machines (the old array stays as it was); a
		// retry changes the failed ones.
		for i := range s.Machines {
			if s.Machines[i].Phase == PhaseFailed {
				idx = append(idx, i)
			}
		}
	}
	for _, i := range idx {
		r.machines = append(r.machines, savedMachine{i: i, m: s.Machines[i]})
	}
	s.Apply(event)
	return r
}

// Revert takes back the event r was made for. Reversals must be reverted
// newest first.
func (s *State) Revert(r Reversal) {
	*s = r.top
	for _, sm := range r.machines {
		s.Machines[sm.i] = sm.m
	}
}
