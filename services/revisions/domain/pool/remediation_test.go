package pool

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestRemediationSetting: the pool's remediation overrides the rollout
// service's default; 0 turns it off; it is validated under its JSON path
// and changing it is a settings change, not a revision.
func TestRemediationSetting(t *testing.T) {
	for _, c := range []struct {
		r        *Remediation
		fallback int
		want     int
	}{
		{nil, 0, 0}, {nil, 3, 3}, {&Remediation{MaxInFlight: 0}, 3, 0}, {&Remediation{MaxInFlight: 2}, 0, 2},
	} {
		if got := (Rollout{Remediation: c.r}).ResolveRemediation(c.fallback); got != c.want {
			t.Errorf("%+v with fallback %d = %d, want %d", c.r, c.fallback, got, c.want)
		}
	}
	for _, n := range []int{-1, MaxRemediationInFlight + 1} {
		spec := validSpec()
		spec.Rollout.Remediation = &Remediation{MaxInFlight: n}
		if got := fieldsOf(spec.Validate()); !slices.Equal(got, []string{"rollout.remediation.max_in_flight"}) {
			t.Errorf("max_in_flight %d: fields %v", n, got)
		}
	}

	p, env := created(t)
	spec := p.Spec()
	spec.Rollout.Remediation = &Remediation{MaxInFlight: 0}
	evs, err := p.Update(Update{Spec: spec, Author: "alice", At: t0}, env)
	if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.settings_changed"}) {
		t.Fatalf("turn remediation off: %v %v", eventTypes(evs), err)
	}
	b, _ := json.Marshal(evs[0])
	var back SettingsChanged
	if err := json.Unmarshal(b, &back); err != nil || back.Rollout.Remediation == nil || back.Rollout.Remediation.MaxInFlight != 0 {
		t.Fatalf("settings_changed JSON %s: %+v %v", b, back, err)
	}
	apply(p, evs)
	if got := p.Rollout.ResolveRemediation(5); got != 0 {
		t.Fatalf("after turning it off: %d", got)
	}
}
