package ports

import "testing"

func TestActorMatches(t *testing.T) {
	cases := []struct {
		actor, want string
		ok          bool
	}{
		{"token:t1 (ci)", "token:t1 (ci)", true},
		{"token:t1 (ci)", "token:t1", true},
		{"token:t1 (ci)", "token", true},
		{"token:t1 (ci)", "token:t2", false},
		{"service:rollout", "service:rollout", true},
		{"service:rollout", "service", true},
		{"service:rollout", "service:registry", false},
		{"machine:4c4c4544-0035-4b10-8056-b7c04f4e3532", "machine", true},
		{"platform", "platform", true},
		{"", "service", false},
		{"service:rollout", "rollout", false},
	}
	for _, c := range cases {
		if got := actorMatches(c.actor, c.want); got != c.ok {
			t.Errorf("actorMatches(%q, %q) = %v, want %v", c.actor, c.want, got, c.ok)
		}
	}
}
