// Package values holds the plain values that several services store,
// send and check alike: durations in their JSON form, counts or
// percentages, maintenance windows, Kubernetes versions and their skew
// policy, and a pool's rollout settings with their rules. Each service
// declares its own stored and wire types and builds them from these, so a
// rule (what a window contains, how "25%" of a pool resolves, which
// kubelet a control plane accepts) exists once, while no service's
// history depends on another service's types.
//
// Like package fields, it uses only the standard library, so that
// services' api packages may import it. A rule that finds several
// problems returns them as Problems, field by field; callers turn them
// into their own validation errors.
package values

// Problem is what is wrong with one field of a value: Field is its JSON
// path inside the value ("days[1]", "maintenance_windows[0].start"),
// Reason says why, for a person.
type Problem struct {
	Field  string
	Reason string
}

// prefixed returns ps with each field inside prefix, as a JSON path.
func prefixed(prefix string, ps []Problem) []Problem {
	out := make([]Problem, len(ps))
	for i, p := range ps {
		out[i] = Problem{Field: prefix + "." + p.Field, Reason: p.Reason}
	}
	return out
}
