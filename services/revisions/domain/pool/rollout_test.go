package pool

import (
	"encoding/json"
	"testing"
	"time"
)

func TestMaintenanceWindows(t *testing.T) {
	zurich, _ := time.LoadLocation("Europe/Zurich")
	nyc, _ := time.LoadLocation("America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	overnight := Window{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"}
	weekday := Window{Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "09:30", End: "11:00", TimeZone: "America/New_York"}

	tests := []struct {
		name    string
		windows []Window
		t       time.Time
		in      bool
	}{
		{"no windows means always", nil, at(time.UTC, 2025, 6, 4, 12, 0), true},
		// 2025-06-07 is a Saturday.
		{"saturday evening inside", []Window{overnight}, at(zurich, 2025, 6, 7, 23, 0), true},
		{"start is inclusive", []Window{overnight}, at(zurich, 2025, 6, 7, 22, 0), true},
		{"just before start", []Window{overnight}, at(zurich, 2025, 6, 7, 21, 59), false},
		{"sunday morning belongs to saturday's window", []Window{overnight}, at(zurich, 2025, 6, 8, 3, 59), true},
		{"end is exclusive", []Window{overnight}, at(zurich, 2025, 6, 8, 4, 0), false},
		{"friday night is not saturday", []Window{overnight}, at(zurich, 2025, 6, 6, 23, 0), false},
		{"saturday morning is friday's window", []Window{overnight}, at(zurich, 2025, 6, 7, 2, 0), false},
		{"same instant in UTC", []Window{overnight}, at(time.UTC, 2025, 6, 7, 21, 30), true}, // 23:30 in Zurich (CEST)
		{"UTC instant outside", []Window{overnight}, at(time.UTC, 2025, 6, 7, 19, 30), false},
		{"winter offset", []Window{overnight}, at(time.UTC, 2025, 1, 4, 21, 30), true}, // 22:30 CET
		{"weekday window", []Window{weekday}, at(nyc, 2025, 6, 4, 10, 0), true},
		{"weekday window on saturday", []Window{weekday}, at(nyc, 2025, 6, 7, 10, 0), false},
		{"any of several", []Window{overnight, weekday}, at(nyc, 2025, 6, 4, 10, 59), true},
		{"none of several", []Window{overnight, weekday}, at(nyc, 2025, 6, 4, 11, 0), false},
		{"invalid zone contains nothing", []Window{{Days: []string{"sat"}, Start: "00:00", End: "23:59", TimeZone: "Nope/Nope"}}, at(time.UTC, 2025, 6, 7, 12, 0), false},
		// DST: on 2025-03-30 Zurich skips 02:00-03:00.
		{"dst gap", []Window{{Days: []string{"sun"}, Start: "02:00", End: "03:00", TimeZone: "Europe/Zurich"}}, at(time.UTC, 2025, 3, 30, 1, 30), false},
		{"dst after gap", []Window{{Days: []string{"sun"}, Start: "02:00", End: "04:00", TimeZone: "Europe/Zurich"}}, at(time.UTC, 2025, 3, 30, 1, 30), true}, // 03:30 CEST
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InMaintenanceWindow(tt.windows, tt.t); got != tt.in {
				t.Fatalf("InMaintenanceWindow(%s) = %v, want %v", tt.t, got, tt.in)
			}
		})
	}
}

func TestIntOrPercent(t *testing.T) {
	tests := []struct {
		v     IntOrPercent
		total int
		want  int
	}{
		{"1", 10, 1}, {"3", 10, 3}, {"30", 10, 10}, {"25%", 10, 2}, {"25%", 3, 1},
		{"0", 10, 1}, {"0%", 10, 1}, {"100%", 7, 7}, {"50%", 0, 0}, {"junk", 5, 1},
	}
	for _, tt := range tests {
		if got := tt.v.Resolve(tt.total); got != tt.want {
			t.Errorf("%q.Resolve(%d) = %d, want %d", tt.v, tt.total, got, tt.want)
		}
	}
	var r Rollout
	if err := json.Unmarshal([]byte(`{"max_unavailable": 2, "pause": "90s", "drain_grace_period": "30s"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.MaxUnavailable != "2" || r.Pause.Std() != 90*time.Second || r.DrainGracePeriod.Std() != 30*time.Second {
		t.Fatalf("decoded %+v", r)
	}
	if err := json.Unmarshal([]byte(`{"max_unavailable": "25%"}`), &r); err != nil || r.MaxUnavailable != "25%" {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`{"pause": "soon"}`), &r); err == nil {
		t.Fatal("bad duration accepted")
	}
	b, _ := json.Marshal(Rollout{MaxUnavailable: "2", DrainTimeout: Duration(15 * time.Minute)}.WithDefaults())
	if string(b) != `{"max_unavailable":2,"drain_timeout":"15m0s","node_ready_timeout":"2h0m0s"}` {
		t.Fatalf("encoded %s", b)
	}
}
