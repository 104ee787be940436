package values

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	type s struct {
		D Duration  `json:"d,omitempty"`
		P *Duration `json:"p,omitempty"`
	}
	var v s
	if err := json.Unmarshal([]byte(`{"d":"90s","p":"0s"}`), &v); err != nil || v.D.Std() != 90*time.Second || v.P == nil || *v.P != 0 {
		t.Fatalf("decoded %+v, %v", v, err)
	}
	if b, _ := json.Marshal(v); string(b) != `{"d":"1m30s","p":"0s"}` {
		t.Fatalf("encoded %s", b)
	}
	if b, _ := json.Marshal(s{}); string(b) != `{}` {
		t.Fatalf("zero encoded %s", b)
	}
	if err := json.Unmarshal([]byte(`{"d":"soon"}`), &v); err == nil || !strings.Contains(err.Error(), `"soon" is not a duration`) {
		t.Fatalf("a bad duration: %v", err)
	}
}

func TestIntOrPercent(t *testing.T) {
	for in, want := range map[string]IntOrPercent{`3`: "3", `"25%"`: "25%", `"7"`: "7", `null`: ""} {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(in), &v); err != nil || v != want {
			t.Errorf("%s → %q, %v", in, v, err)
		}
	}
	for _, in := range []string{`true`, `{}`, `[1]`} {
		var r struct {
			M IntOrPercent `json:"max_unavailable"`
		}
		err := json.Unmarshal([]byte(`{"max_unavailable":`+in+`}`), &r)
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field != "max_unavailable" {
			t.Errorf("%s: %v", in, err)
		}
	}
	for v, want := range map[IntOrPercent]string{"3": `3`, "007": `7`, "25%": `"25%"`, "": `""`, "junk": `"junk"`} {
		if b, err := json.Marshal(v); err != nil || string(b) != want {
			t.Errorf("marshal %q = %s, %v", v, b, err)
		}
	}
	for v, total := range map[IntOrPercent]int{"25%": 2, "0": 1, "30": 10, "junk": 1} {
		if got := v.Resolve(10); got != total {
			t.Errorf("%q.Resolve(10) = %d, want %d", v, got, total)
		}
	}
	if IntOrPercent("101%").Check() == nil || IntOrPercent("-1").Check() == nil || IntOrPercent("50%").Check() != nil {
		t.Error("Check accepts what Resolve cannot take, or refuses 50%")
	}
}

func TestWindow(t *testing.T) {
	w := Window{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"}
	if ps := w.Problems(); len(ps) != 0 {
		t.Fatalf("a valid window: %v", ps)
	}
	sunday3 := time.Date(2025, 6, 8, 1, 30, 0, 0, time.UTC) // 03:30 in Zurich, in Saturday's window
	if !w.Contains(sunday3) || w.Contains(sunday3.Add(time.Hour)) {
		t.Fatal("the window past midnight does not end at 04:00 on Sunday")
	}
	if !InMaintenanceWindow(nil, sunday3) || InMaintenanceWindow([]Window{w}, sunday3.Add(time.Hour)) {
		t.Fatal("InMaintenanceWindow: no windows is always; outside every window is never")
	}
	bad := Window{Days: []string{"sat", "funday", "sat"}, Start: "25:00", End: "4pm", TimeZone: "Local"}
	if got, want := fieldsOf(bad.Problems()), []string{"days[1]", "days[2]", "start", "end", "time_zone"}; !slices.Equal(got, want) {
		t.Fatalf("problems of %+v: %v, want %v", bad, got, want)
	}
	if bad.Contains(sunday3) {
		t.Fatal("an invalid window contains a time")
	}
}

func TestRolloutSettings(t *testing.T) {
	d := func(x time.Duration) *Duration { y := Duration(x); return &y }
	if got := (RolloutSettings{}).WithDefaults(); got.MaxUnavailable != "1" || got.DrainTimeout != DefaultDrainTimeout || got.NodeReadyTimeout != DefaultNodeReadyTimeout {
		t.Fatalf("defaults: %+v", got)
	}
	if ps := (RolloutSettings{}).WithDefaults().Problems(); len(ps) != 0 {
		t.Fatalf("the defaults break the rules: %v", ps)
	}
	bad := RolloutSettings{
		MaxUnavailable: "150%", Pause: Duration(25 * time.Hour), DrainTimeout: Duration(time.Millisecond),
		DrainGracePeriod: d(-time.Second), NodeReadyTimeout: Duration(time.Second), Remediation: &Remediation{MaxInFlight: 1001},
		MaintenanceWindows: []Window{{Days: []string{"mon"}, Start: "01:00", End: "01:00", TimeZone: "UTC"}},
	}
	want := []string{"max_unavailable", "pause", "drain_timeout", "drain_grace_period", "node_ready_timeout",
		"remediation.max_in_flight", "maintenance_windows[0].end"}
	ps := bad.Problems()
	if got := fieldsOf(ps); !slices.Equal(got, want) {
		t.Fatalf("problems: %v, want %v", ps, want)
	}
	if ps[2].Reason != "must be at least 1s, got 1ms" {
		t.Fatalf("drain_timeout: %q", ps[2].Reason)
	}
	if n := (RolloutSettings{}).ResolveRemediation(4); n != 4 {
		t.Fatalf("no remediation setting resolves to %d, want the fallback 4", n)
	}
	if n := (RolloutSettings{Remediation: &Remediation{}}).ResolveRemediation(4); n != 0 {
		t.Fatalf("remediation off resolves to %d", n)
	}
}

func TestKubeVersions(t *testing.T) {
	v, err := ParseKubeVersion("v1.33.4")
	if err != nil || v != (KubeVersion{Major: 1, Minor: 33, Patch: 4}) || v.String() != "1.33.4" || v.MinorOf().String() != "1.33" {
		t.Fatalf("ParseKubeVersion: %v %v", v, err)
	}
	for _, s := range []string{"1.33", "1.033.1", "1.33.+1", ""} {
		if _, err := ParseKubeVersion(s); err == nil {
			t.Errorf("ParseKubeVersion(%q) accepted", s)
		}
	}
	if m, err := ParseKubeMinor("1.33"); err != nil || m != (KubeMinor{Major: 1, Minor: 33}) {
		t.Fatalf("ParseKubeMinor: %v %v", m, err)
	}
	cp := KubeVersion{Major: 1, Minor: 33, Patch: 2}
	for kubelet, ok := range map[KubeVersion]bool{
		{Major: 1, Minor: 33, Patch: 2}: true, {Major: 1, Minor: 30}: true, {Major: 1, Minor: 29, Patch: 9}: false,
		{Major: 1, Minor: 33, Patch: 3}: false, {Major: 2, Minor: 33}: false,
	} {
		if err := CheckKubeletSkew(cp, kubelet); (err == nil) != ok {
			t.Errorf("kubelet %s on control plane %s: %v", kubelet, cp, err)
		}
	}
}

func fieldsOf(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Field
	}
	return out
}
