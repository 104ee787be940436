package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// cacheUnderTest is a read cache without a subscription: the tests hand it
// notices themselves (the first, from registry replica "a", already
// heard), and move its clock.
func cacheUnderTest(maxBytes int) (*readCache, *time.Time, *sender) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &readCache{maxAge: 2 * time.Second, maxBytes: maxBytes, now: func() time.Time { return now }, log: slog.Default()}
	c.forget("")
	reg := &sender{c: c, instance: "a"}
	reg.send(regapi.MachinesChanged{})
	return c, &now, reg
}

type sender struct {
	c        *readCache
	instance string
	counter  uint64
}

func (s *sender) send(n regapi.MachinesChanged) {
	s.counter++
	n.Version, n.Instance, n.Counter = regapi.MachinesChangedVersion, s.instance, s.counter
	b, _ := json.Marshal(n)
	s.c.notice(b)
}

// fill reads key through the cache the way a route does, answering body;
// it reports whether the registry was asked.
func fill(c *readCache, key, org string, page bool, mark uint64, body string) (answer string, asked bool, minVersion uint64) {
	a, err := c.through(context.Background(), key, org, page, mark, func(_ context.Context, mv uint64) (any, error) {
		asked, minVersion = true, mv
		return rawJSON{body: []byte(body), version: 3}, nil
	})
	if err != nil {
		panic(err)
	}
	return string(a.(rawJSON).body), asked, minVersion
}

func TestReadCache(t *testing.T) {
	m1, m2 := machineKey("acme", "u1"), machineKey("acme", "u2")
	p := pageKey(regapi.MachineList{Org: "acme", Pool: "p", Limit: 10})
	other := pageKey(regapi.MachineList{Org: "globex", Limit: 10})

	t.Run("an answer is kept until a notice names its machine", func(t *testing.T) {
		c, _, reg := cacheUnderTest(1 << 20)
		fill(c, m1, "acme", false, 0, "one")
		fill(c, m2, "acme", false, 0, "two")
		if got, asked, _ := fill(c, m1, "acme", false, 0, "x"); asked || got != "one" {
			t.Fatalf("second read: %q, asked %v; want the kept answer", got, asked)
		}
		reg.send(regapi.MachinesChanged{Position: 9, Orgs: []regapi.OrgMachinesChanged{{Org: "acme", Changed: []string{"u1"}}}})
		if got, asked, mv := fill(c, m1, "acme", false, 0, "one'"); !asked || got != "one'" || mv != 9 {
			t.Fatalf("after the notice: %q, asked %v, min_version %d; want the registry asked for at least 9", got, asked, mv)
		}
		if _, asked, _ := fill(c, m2, "acme", false, 0, "x"); asked {
			t.Fatal("a machine the notice did not name was dropped")
		}
	})

	t.Run("a change drops the organization's pages, a heartbeat does not", func(t *testing.T) {
		c, _, reg := cacheUnderTest(1 << 20)
		fill(c, p, "acme", true, 0, "page")
		fill(c, other, "globex", true, 0, "other")
		fill(c, m1, "acme", false, 0, "one")
		reg.send(regapi.MachinesChanged{Orgs: []regapi.OrgMachinesChanged{{Org: "acme", Seen: []string{"u1"}}}})
		if _, asked, _ := fill(c, p, "acme", true, 0, "x"); asked {
			t.Fatal("a heartbeat dropped a page")
		}
		if _, asked, _ := fill(c, m1, "acme", false, 0, "one'"); !asked {
			t.Fatal("a heartbeat left the machine's own answer")
		}
		reg.send(regapi.MachinesChanged{Orgs: []regapi.OrgMachinesChanged{{Org: "acme", Changed: []string{"u9"}}}})
		if _, asked, _ := fill(c, p, "acme", true, 0, "page'"); !asked {
			t.Fatal("a change in the organization left its page")
		}
		if _, asked, _ := fill(c, other, "globex", true, 0, "x"); asked {
			t.Fatal("a change in acme dropped globex's page")
		}
	})

	t.Run("an answer fetched while a notice came is not kept", func(t *testing.T) {
		c, _, reg := cacheUnderTest(1 << 20)
		_, _ = c.through(context.Background(), m1, "acme", false, 0, func(context.Context, uint64) (any, error) {
			// the registry answered before it applied the change the
			// notice names, which arrives before the answer
			reg.send(regapi.MachinesChanged{Orgs: []regapi.OrgMachinesChanged{{Org: "acme", Seen: []string{"u2"}}}})
			return rawJSON{body: []byte("stale")}, nil
		})
		if got, asked, _ := fill(c, m1, "acme", false, 0, "fresh"); !asked || got != "fresh" {
			t.Fatalf("read %q, asked %v: the answer fetched across a notice was kept", got, asked)
		}
	})

	t.Run("a caller's own write past the notices is not served from the cache", func(t *testing.T) {
		c, _, reg := cacheUnderTest(1 << 20)
		reg.send(regapi.MachinesChanged{Position: 5})
		fill(c, m1, "acme", false, 0, "one")
		if got, asked, mv := fill(c, m1, "acme", false, 8, "one'"); !asked || got != "one'" || mv != 8 {
			t.Fatalf("mark 8 past position 5: %q, asked %v, min_version %d; want the registry asked for 8", got, asked, mv)
		}
		reg.send(regapi.MachinesChanged{Position: 8})
		if _, asked, _ := fill(c, m1, "acme", false, 8, "x"); asked {
			t.Fatal("once the notices reached the mark, the kept answer should serve")
		}
	})

	t.Run("a lost notice, a reset or an unknown version forgets everything", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			hear func(c *readCache, reg *sender)
		}{
			{"gap", func(_ *readCache, reg *sender) { reg.counter++; reg.send(regapi.MachinesChanged{}) }},
			{"reset", func(_ *readCache, reg *sender) { reg.send(regapi.MachinesChanged{Reset: true}) }},
			{"version", func(c *readCache, _ *sender) { c.notice([]byte(`{"v":2,"instance":"a","counter":2}`)) }},
			{"not JSON", func(c *readCache, _ *sender) { c.notice([]byte(`{`)) }},
			{"a sender heard from the middle of its count", func(c *readCache, _ *sender) {
				(&sender{c: c, instance: "b", counter: 40}).send(regapi.MachinesChanged{})
			}},
		} {
			c, _, reg := cacheUnderTest(1 << 20)
			fill(c, m1, "acme", false, 0, "one")
			fill(c, p, "acme", true, 0, "page")
			tc.hear(c, reg)
			if _, asked, _ := fill(c, m1, "acme", false, 0, "x"); !asked {
				t.Errorf("%s: the machine was kept", tc.name)
			}
			if _, asked, _ := fill(c, p, "acme", true, 0, "x"); !asked {
				t.Errorf("%s: the page was kept", tc.name)
			}
		}
	})

	t.Run("nothing is kept before a registry replica is heard", func(t *testing.T) {
		c := &readCache{maxAge: time.Hour, maxBytes: 1 << 20, now: time.Now, log: slog.Default()}
		c.forget("")
		fill(c, m1, "acme", false, 0, "one")
		if _, asked, _ := fill(c, m1, "acme", false, 0, "x"); !asked {
			t.Fatal("kept an answer with no notices to drop it")
		}
		(&sender{c: c, instance: "a"}).send(regapi.MachinesChanged{})
		fill(c, m1, "acme", false, 0, "one")
		if _, asked, _ := fill(c, m1, "acme", false, 0, "x"); asked {
			t.Fatal("once notices come, answers are kept")
		}
	})

	t.Run("a dropped page leaves no key behind", func(t *testing.T) {
		c, now, _ := cacheUnderTest(1 << 20)
		for i := range 50 {
			fill(c, pageKey(regapi.MachineList{Org: "acme", Selector: fmt.Sprint("rack=r", i)}), "acme", true, 0, "page")
			*now = now.Add(time.Second)
		}
		for key := range c.pages["acme"] {
			c.drop(key)
		}
		if len(c.pages) != 0 || len(c.entries) != 0 || c.bytes != 0 {
			t.Fatalf("after dropping every page: %d organizations indexed, %d answers, %d bytes", len(c.pages), len(c.entries), c.bytes)
		}
	})

	t.Run("nothing is served past maxAge", func(t *testing.T) {
		c, now, _ := cacheUnderTest(1 << 20)
		fill(c, p, "acme", true, 0, "page")
		*now = now.Add(2 * time.Second)
		if _, asked, _ := fill(c, p, "acme", true, 0, "x"); asked {
			t.Fatal("asked the registry within maxAge")
		}
		*now = now.Add(time.Millisecond)
		if got, asked, _ := fill(c, p, "acme", true, 0, "page'"); !asked || got != "page'" {
			t.Fatal("served past maxAge")
		}
	})

	t.Run("the oldest answers go when it is full", func(t *testing.T) {
		c, _, _ := cacheUnderTest(16 * 200)
		body := string(make([]byte, 100))
		for i := range 40 {
			fill(c, machineKey("acme", fmt.Sprint("u", i)), "acme", false, 0, body)
			if c.bytes > c.maxBytes {
				t.Fatalf("%d bytes kept, at most %d", c.bytes, c.maxBytes)
			}
		}
		if _, asked, _ := fill(c, machineKey("acme", "u0"), "acme", false, 0, body); !asked {
			t.Fatal("the oldest answer was kept")
		}
		if _, asked, _ := fill(c, machineKey("acme", "u39"), "acme", false, 0, body); asked {
			t.Fatal("the newest answer was dropped")
		}
		if len(c.order) > 4*len(c.entries)+1024 {
			t.Fatalf("the eviction order grew to %d for %d answers", len(c.order), len(c.entries))
		}
	})
}
