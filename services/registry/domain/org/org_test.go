package org

import (
	"crypto/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

var now = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

// run decides cmd, checks that Decide left the state alone, and applies
// the events.
func run(t *testing.T, s *State, cmd Command) ([]any, error) {
	t.Helper()
	before := clone(*s)
	evs, err := Decide(*s, cmd, now)
	if !reflect.DeepEqual(before, *s) {
		t.Fatalf("%s mutated the state", cmd.CommandType())
	}
	for _, e := range evs {
		s.Apply(e)
	}
	return evs, err
}

func clone(s State) State {
	c := s
	if s.Tokens == nil {
		return c
	}
	c.Tokens = make(map[string]Token, len(s.Tokens))
	for k, v := range s.Tokens {
		c.Tokens[k] = v
	}
	return c
}

func created(t *testing.T) *State {
	s := &State{}
	if _, err := run(t, s, Create{ID: "acme", DisplayName: "ACME Corp"}); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreate(t *testing.T) {
	s := created(t)
	if s.ID != "acme" || s.DisplayName != "ACME Corp" {
		t.Fatalf("state %+v", s)
	}
	if evs, err := run(t, s, Create{ID: "acme", DisplayName: "ACME Corp"}); err != nil || len(evs) != 0 {
		t.Fatalf("re-create: %v %v", evs, err)
	}
	if _, err := run(t, s, Create{ID: "acme", DisplayName: "Other"}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("re-create with another name: %v", err)
	}
	_, err := Decide(State{}, Create{ID: "-Bad_", DisplayName: " x"}, now)
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, []string{"id", "display_name"}) {
		t.Fatalf("fields %v (%v)", got, err)
	}
	for _, id := range []string{"a", "a-1", strings.Repeat("x", 63)} {
		if err := ValidateID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "-a", "a-", "A", "a.b", "a_b", "ä", strings.Repeat("x", 64)} {
		if err := ValidateID(id); err == nil {
			t.Errorf("%q should be rejected", id)
		}
	}
}

func TestRename(t *testing.T) {
	if _, err := Decide(State{}, Rename{DisplayName: "x"}, now); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("rename missing: %v", err)
	}
	s := created(t)
	if evs, _ := run(t, s, Rename{DisplayName: "ACME Corp"}); len(evs) != 0 {
		t.Fatal("same name must be a no-op")
	}
	if _, err := run(t, s, Rename{DisplayName: "ACME\x07"}); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("control char: %v", err)
	}
	if _, err := run(t, s, Rename{DisplayName: "ACME GmbH"}); err != nil || s.DisplayName != "ACME GmbH" {
		t.Fatalf("rename: %v %q", err, s.DisplayName)
	}
}

func TestTokensLifecycle(t *testing.T) {
	s := created(t)
	apiPlain, apiID, apiHash, _ := token.Generate(token.KindAPI, rand.Reader)
	enPlain, enID, enHash, _ := token.Generate(token.KindEnrollment, rand.Reader)

	evs, err := run(t, s, IssueAPIToken{TokenID: apiID, Hash: apiHash, Name: "ci", Role: RoleOperator})
	if err != nil || len(evs) != 1 || evs[0].(APITokenIssued).Hash != apiHash {
		t.Fatalf("issue api: %v %v", evs, err)
	}
	if evs, err := run(t, s, IssueAPIToken{TokenID: apiID, Hash: apiHash, Name: "ci", Role: RoleOperator}); err != nil || len(evs) != 0 {
		t.Fatalf("reissue must be a no-op: %v %v", evs, err)
	}
	if _, err := run(t, s, IssueEnrollmentToken{TokenID: apiID, Hash: apiHash}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("same id as other kind: %v", err)
	}
	if _, err := run(t, s, IssueEnrollmentToken{TokenID: enID, Hash: enHash, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	st, ok := s.Token(apiID)
	if !ok || token.Verify(st, apiPlain, now) != nil {
		t.Fatalf("api token must verify: %v", token.Verify(st, apiPlain, now))
	}
	st, _ = s.Token(enID)
	if err := token.Verify(st, enPlain, now.Add(2*time.Hour)); token.ReasonOf(err) != token.ReasonExpired {
		t.Fatalf("enrollment token must expire: %v", err)
	}

	list := s.ListTokens(token.KindEnrollment, now.Add(2*time.Hour))
	if len(list) != 1 || list[0].Status != TokenExpired || list[0].ID != enID {
		t.Fatalf("list %+v", list)
	}

	evs, err = run(t, s, RevokeToken{TokenID: apiID})
	if err != nil || evs[0].(APITokenRevoked).RevokedAt != now {
		t.Fatalf("revoke: %v %v", evs, err)
	}
	if evs, _ := run(t, s, RevokeToken{TokenID: apiID}); len(evs) != 0 {
		t.Fatal("revoking twice must be a no-op")
	}
	if evs, _ := run(t, s, RevokeToken{TokenID: enID}); len(evs) != 1 || evs[0].(EnrollmentTokenRevoked).TokenID != enID {
		t.Fatalf("revoke enrollment: %v", evs)
	}
	st, _ = s.Token(apiID)
	if token.ReasonOf(token.Verify(st, apiPlain, now)) != token.ReasonRevoked {
		t.Fatal("revoked token must not verify")
	}
	if l := s.ListTokens(token.KindAPI, now); len(l) != 1 || l[0].Status != TokenRevoked || l[0].Role != RoleOperator {
		t.Fatalf("list %+v", l)
	}
	_, unknown, _, _ := token.Generate(token.KindAPI, rand.Reader)
	if _, err := run(t, s, RevokeToken{TokenID: unknown}); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
}

func TestIssueValidation(t *testing.T) {
	s := created(t)
	_, err := Decide(*s, IssueAPIToken{TokenID: "nope", Role: "root", ExpiresAt: now}, now)
	want := []string{"token_id", "hash", "expires_at", "role"}
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("fields %v, want %v (%v)", got, want, err)
	}
	_, id, h, _ := token.Generate(token.KindAPI, rand.Reader)
	if _, err := Decide(State{}, IssueAPIToken{TokenID: id, Hash: h, Role: RoleAdmin}, now); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("missing org: %v", err)
	}
}

func TestRoles(t *testing.T) {
	if !RoleAdmin.AtLeast(RoleOperator) || RoleViewer.AtLeast(RoleOperator) || Role("x").AtLeast(RoleViewer) {
		t.Fatal("role order")
	}
}

func TestApplyIsTotal(t *testing.T) {
	s := created(t)
	before := clone(*s)
	s.Apply(nil)
	s.Apply("unknown")
	s.Apply((*Renamed)(nil))
	s.Apply(APITokenRevoked{TokenID: "nosuchtoken"})
	if !reflect.DeepEqual(before, clone(*s)) {
		t.Fatal("unknown events must be ignored")
	}
	s.Apply(&Renamed{DisplayName: "ptr"})
	if s.DisplayName != "ptr" {
		t.Fatal("pointer events must apply")
	}
	for _, e := range EventTypes() {
		if e.(interface{ EventType() string }).EventType() == "" {
			t.Fatal("event without type")
		}
	}
}

func TestEnrollmentTokenMaxMachines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		field bool // refused, naming max_machines
	}{
		{"absent: no cap", 0, false},
		{"one machine", 1, false},
		{"the largest", MaxMachinesLimit, false},
		{"negative", -1, true},
		{"too large", MaxMachinesLimit + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := created(t)
			_, id, h, _ := token.Generate(token.KindEnrollment, rand.Reader)
			evs, err := run(t, s, IssueEnrollmentToken{TokenID: id, Hash: h, Name: "rack-7", MaxMachines: tc.max})
			if tc.field {
				if got := errs.FieldNames(err); !reflect.DeepEqual(got, []string{"max_machines"}) {
					t.Fatalf("fields %v (%v), want max_machines", got, err)
				}
				return
			}
			if err != nil || len(evs) != 1 || evs[0].(EnrollmentTokenIssued).MaxMachines != tc.max {
				t.Fatalf("issue: %v %v", evs, err)
			}
			if l := s.ListTokens(token.KindEnrollment, now); len(l) != 1 || l[0].MaxMachines != tc.max {
				t.Fatalf("the cap must be listed: %+v", l)
			}
		})
	}
}
