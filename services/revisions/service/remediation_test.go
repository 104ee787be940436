package service_test

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
)

// TestRemediationThroughTheAPI: rollout.remediation is kept as sent (absent
// stays absent: the rollout service's default), a bad value is refused
// naming its JSON path, and turning it off is a settings change.
func TestRemediationThroughTheAPI(t *testing.T) {
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	plain := h.createPool("acme", "plain", "prod", testSpec(), false)
	if plain.Pool.Spec.Rollout.Remediation != nil {
		t.Fatalf("a pool that sets none got %+v", plain.Pool.Spec.Rollout.Remediation)
	}
	spec := testSpec()
	spec.Rollout.Remediation = &api.Remediation{MaxInFlight: 2}
	c := h.createPool("acme", "healing", "prod", spec, false)
	if r := c.Pool.Spec.Rollout.Remediation; r == nil || r.MaxInFlight != 2 {
		t.Fatalf("remediation not kept: %s", mustJSON(t, c.Pool.Spec.Rollout))
	}
	spec.Rollout.Remediation.MaxInFlight = -1
	_, err := api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "healing", spec))
	wantErr(t, "negative", err, errs.KindValidation, "rollout.remediation.max_in_flight")
	spec.Rollout.Remediation.MaxInFlight = 0
	ch, err := api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "healing", spec))
	if err != nil || !ch.SettingsChanged || ch.RevisionCreated != 0 || ch.Pool.Spec.Rollout.Remediation == nil || ch.Pool.Spec.Rollout.Remediation.MaxInFlight != 0 {
		t.Fatalf("turn it off: %s %v", mustJSON(t, ch), err)
	}
}
