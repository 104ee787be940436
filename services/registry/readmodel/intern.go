package readmodel

import "github.com/anvil-fleet/anvil/services/registry/domain/machine"

// interner shares one copy of strings that repeat across machines (pool
// names, label keys and values, disk and NIC names, enrollment token ids):
// events decoded from JSON carry fresh copies of each. Entries are never
// dropped; the set is bounded by the distinct values ever seen, which is
// small next to the machines themselves.
type interner map[string]string

func (in interner) get(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}

// state interns the strings of st that event may have replaced.
func (in interner) state(st *machine.State, event any) {
	st.Pool = in.get(st.Pool)
	st.Status = machine.Status(in.get(string(st.Status)))
	st.MaintenanceReturn = machine.Status(in.get(string(st.MaintenanceReturn)))
	st.EnrollmentTokenID = in.get(st.EnrollmentTokenID)
	switch event.(type) {
	case machine.Preregistered, *machine.Preregistered, machine.LabelsChanged, *machine.LabelsChanged:
		if len(st.Labels) > 0 {
			m := make(map[string]string, len(st.Labels))
			for k, v := range st.Labels {
				m[in.get(k)] = in.get(v)
			}
			st.Labels = m
		}
	case machine.HardwareReported, *machine.HardwareReported:
		if hw := st.Hardware; hw != nil {
			for i := range hw.Disks {
				hw.Disks[i].Name = in.get(hw.Disks[i].Name)
			}
			for i := range hw.NICs {
				hw.NICs[i].Name = in.get(hw.NICs[i].Name)
			}
		}
	}
}

// all interns every string of st (after a restore).
func (in interner) all(st *machine.State) {
	in.state(st, machine.LabelsChanged{})
	in.state(st, machine.HardwareReported{})
}
