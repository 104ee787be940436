package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestIntOrPercent(t *testing.T) {
	for in, want := range map[string]IntOrPercent{`3`: "3", `"25%"`: "25%", `"7"`: "7", `null`: ""} {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(in), &v); err != nil || v != want {
			t.Errorf("%s → %q, %v", in, v, err)
		}
	}
	for _, in := range []string{`true`, `{}`, `[1]`} {
		var r Rollout
		err := json.Unmarshal([]byte(`{"max_unavailable":`+in+`}`), &r)
		var te *json.UnmarshalTypeError
		if err == nil || !strings.Contains(err.Error(), "max_unavailable") || !asTypeErr(err, &te) {
			t.Errorf("%s: %v", in, err)
		}
	}
	for v, want := range map[IntOrPercent]string{"3": `3`, "007": `7`, "25%": `"25%"`, "": `""`} {
		b, err := json.Marshal(v)
		if err != nil || string(b) != want {
			t.Errorf("marshal %q = %s, %v", v, b, err)
		}
	}
}

func asTypeErr(err error, te **json.UnmarshalTypeError) bool {
	var ok bool
	*te, ok = err.(*json.UnmarshalTypeError)
	return ok
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("hunter2-plaintext")
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("x", "s", s, "req", RotateKubeconfigRequest{Kubeconfig: s})
	out := fmt.Sprintf("%v %s %+v %#v %q", s, s, s, s, s) + sb.String()
	if strings.Contains(out, "hunter2") {
		t.Fatalf("printed: %s", out)
	}
	if b, _ := json.Marshal(s); string(b) != `"hunter2-plaintext"` || s.Reveal() != "hunter2-plaintext" {
		t.Fatalf("json = %s", b)
	}
}

func TestParseAt(t *testing.T) {
	if seq, _, err := ParseAt("42"); err != nil || seq != 42 {
		t.Fatal(seq, err)
	}
	if _, tm, err := ParseAt("2025-06-02T09:00:00.5Z"); err != nil || !tm.Equal(time.Date(2025, 6, 2, 9, 0, 0, 5e8, time.UTC)) {
		t.Fatal(tm, err)
	}
	for _, bad := range []string{"", "0", "yesterday", "2025-06-02", "99999999999999999999999"} {
		if _, _, err := ParseAt(bad); err == nil {
			t.Errorf("ParseAt(%q) accepted", bad)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	spec := PoolSpec{DisplayName: "w", Kubernetes: Kubernetes{Minor: "1.33"}, SSHKeys: []string{"k"}, Rollout: Rollout{Pause: "1m"}}
	c := NewCreatePoolRequest("o", "p", "c", spec)
	u := NewUpdatePoolRequest("o", "p", spec)
	if fmt.Sprint(c.Spec()) != fmt.Sprint(spec) || fmt.Sprint(u.Spec()) != fmt.Sprint(spec) ||
		fmt.Sprint(SpecOf(spec.DisplayName, spec.Config(), spec.Rollout)) != fmt.Sprint(spec) {
		t.Fatal("spec does not round-trip")
	}
	// The requests' JSON is the spec's, flat, beside the request's own fields.
	b, _ := json.Marshal(c)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"org", "name", "cluster", "display_name", "kubernetes", "ssh_keys", "rollout", "apply"} {
		if _, ok := m[k]; !ok {
			t.Errorf("create request JSON lacks %q: %s", k, b)
		}
	}
}

func TestSubjects(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Subjects {
		if seen[s] || !strings.HasPrefix(s, "cmd.revisions.") || strings.Count(s, ".") != 3 {
			t.Errorf("subject %q", s)
		}
		seen[s] = true
	}
	if len(Subjects) != 22 {
		t.Errorf("%d subjects", len(Subjects))
	}
}
