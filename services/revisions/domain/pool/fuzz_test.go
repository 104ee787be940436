package pool

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzSpec feeds arbitrary JSON through decoding, validation and
// normalization: no panics, and a valid spec normalizes idempotently with
// a stable hash.
func FuzzSpec(f *testing.F) {
	seed, _ := json.Marshal(validSpec())
	f.Add(seed)
	f.Add([]byte(`{"display_name":"x","kubernetes":{"minor":"1.33"},"flatcar":{"channel":"stable","version":"1.2.3"}}`))
	f.Add([]byte(`{"network":{"vlans":[{"id":-1,"parent":""}],"bonds":[{"name":"b","members":["b"]}]}}`))
	f.Add([]byte(`{"rollout":{"max_unavailable":"99999999999%","maintenance_windows":[{"days":["mon"],"start":"2x:00","time_zone":"../../etc/passwd"}]}}`))
	f.Add([]byte(`{"network":{"interfaces":[{"name":"eno1","addresses":["fe80::1%eth0/64"],"gateways":["::ffff:1.2.3.4"]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Spec
		if json.Unmarshal(data, &s) != nil {
			return
		}
		err := s.Validate()
		_ = InMaintenanceWindow(s.Rollout.MaintenanceWindows, time.Unix(1700000000, 0))
		_ = s.Rollout.MaxUnavailable.Resolve(10)
		if err != nil {
			return
		}
		n := s.Config.Normalize()
		if n.Hash() != s.Config.Hash() || n.Normalize().Hash() != n.Hash() {
			t.Fatal("normalize is not idempotent")
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("normalized config no longer valid: %v", err)
		}
	})
}
