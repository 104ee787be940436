package pool_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// The rollout service decodes pool.apply_requested with api.ApplyRequested:
// every stored event must read back into it and encode to the same bytes,
// and what the api type holds must be the domain event again.
func TestApplyRequestedContract(t *testing.T) {
	grace := pool.Duration(45 * time.Second)
	domain := pool.ApplyRequested{
		Pool: "workers", Cluster: "prod", Revision: 7, Hash: "sha256:abc", Rollback: true,
		RequestedBy: "token:t1 (ci)", RequestedAt: time.Date(2025, 6, 2, 9, 0, 0, 123000000, time.UTC),
		Rollout: pool.Rollout{
			MaxUnavailable: "25%", Pause: pool.Duration(90 * time.Second), DrainTimeout: pool.Duration(20 * time.Minute),
			DrainGracePeriod: &grace, NodeReadyTimeout: pool.Duration(3 * time.Hour),
			MaintenanceWindows: []pool.Window{{Days: []string{"sat", "sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"}},
			Remediation:        &pool.Remediation{MaxInFlight: 2},
		},
		RolloutID: "ro-0123456789abcdef0123",
	}
	if path := zeroField(reflect.ValueOf(domain), "apply_requested"); path != "" {
		t.Fatalf("%s is not set: the contract is checked with every field set", path)
	}
	if (api.ApplyRequested{}).EventType() != domain.EventType() {
		t.Fatalf("event types differ: api %q, domain %q", api.ApplyRequested{}.EventType(), domain.EventType())
	}

	stored, err := json.Marshal(domain)
	if err != nil {
		t.Fatal(err)
	}
	var contract api.ApplyRequested
	strictDecode(t, stored, &contract)
	viaAPI, err := json.Marshal(contract)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaAPI, stored) {
		t.Fatalf("the api type re-encodes the stored event differently:\nstored: %s\napi:    %s", stored, viaAPI)
	}

	var back pool.ApplyRequested
	strictDecode(t, viaAPI, &back)
	if !reflect.DeepEqual(back, domain) {
		t.Fatalf("the api type's JSON decodes into another domain event:\nwant %+v\ngot  %+v", domain, back)
	}

	// A numeric max_unavailable is a JSON number in both.
	domain.Rollout.MaxUnavailable = "3"
	domain.Rollout.DrainGracePeriod = nil
	stored, _ = json.Marshal(domain)
	contract = api.ApplyRequested{}
	strictDecode(t, stored, &contract)
	if viaAPI, _ = json.Marshal(contract); !bytes.Equal(viaAPI, stored) {
		t.Fatalf("a count re-encodes differently:\nstored: %s\napi:    %s", stored, viaAPI)
	}
}

func strictDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s into %T: %v", b, v, err)
	}
}

// zeroField returns the path of the first field (depth first) left at its
// zero value, or "".
func zeroField(v reflect.Value, path string) string {
	if v.IsZero() {
		return path
	}
	switch v.Kind() {
	case reflect.Pointer:
		return zeroField(v.Elem(), path)
	case reflect.Slice:
		for i := range v.Len() {
			if p := zeroField(v.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return ""
		}
		for i := range v.NumField() {
			if p := zeroField(v.Field(i), path+"."+v.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}
