package ports

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest/golden"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// domainRollout is api.Rollout as it was when the api re-exported the
// domain's types: the answers' JSON must stay what it was.
type domainRollout struct {
	Org string `json:"org"`
	operation.View
	Cluster     string           `json:"cluster,omitempty"`
	Strategy    rollout.Strategy `json:"strategy"`
	RequestedBy string           `json:"requested_by,omitempty"`
	UpdatedAt   time.Time        `json:"updated_at"`
	Version     uint64           `json:"version"`
}

type domainLogPage struct {
	Entries []operation.Entry `json:"entries"`
	Next    int               `json:"next"`
	Status  string            `json:"status"`
	Final   bool              `json:"final"`
}

// The api's plain types encode exactly as the domain's did: every field
// set (filled from its JSON path), and lists absent, empty and filled.
func TestAPIEncodesAsTheDomain(t *testing.T) {
	filled, err := golden.Fill(reflect.TypeFor[app.RolloutView]())
	if err != nil {
		t.Fatal(err)
	}
	full := filled.Interface().(app.RolloutView)
	empty := full
	empty.View.Machines, empty.View.Log, empty.View.Checks = []operation.Machine{}, []operation.Entry{}, []rollout.CheckResult{}
	empty.Strategy.MaintenanceWindows = nil
	for name, v := range map[string]app.RolloutView{"every field": full, "empty lists": empty, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			same(t, domainRollout{Org: v.Org, View: v.View, Cluster: v.Cluster, Strategy: v.Strategy,
				RequestedBy: v.RequestedBy, UpdatedAt: v.UpdatedAt, Version: v.Version}, toAPI(v))
			same(t, domainLogPage{Entries: v.View.Log, Next: 3, Status: "running"},
				struct {
					Entries any    `json:"entries"`
					Next    int    `json:"next"`
					Status  string `json:"status"`
					Final   bool   `json:"final"`
				}{mapSlice(v.View.Log, entryToAPI), 3, "running", false})
		})
	}
	if full.View.Machines[0].Blocked == nil || full.Strategy.DrainGracePeriod == nil || full.Strategy.Remediation == nil {
		t.Fatal("the filled view leaves pointers unset: the test would not compare them")
	}
}

func same(t *testing.T, domain, api any) {
	t.Helper()
	want, err := json.Marshal(domain)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(api)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the api type encodes differently:\ndomain: %s\napi:    %s", want, got)
	}
}
