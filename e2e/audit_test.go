package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/demo/story"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// volatile keys are not derived from events alone: heartbeat times, and
// the latest iPXE boot of a machine waiting in its boot loop (recorded in
// the log at most once per --ipxe-record-interval), live in KV buckets, so
// they are left out of the comparison.
var volatile = map[string]bool{"last_seen": true, "last_ipxe_boot_at": true, "ipxe_retry_by": true}

func scrub(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if volatile[k] {
				delete(x, k)
				continue
			}
			x[k] = scrub(e)
		}
	case []any:
		for i := range x {
			x[i] = scrub(x[i])
		}
	}
	return v
}

// apiState reads everything the projections serve, for every
// organization, through the gateway, and returns it as canonical JSON by
// path.
func apiState(t *testing.T, env *story.Env) map[string]string {
	t.Helper()
	ctx := context.Background()
	c, err := env.Admin()
	must(t, err)
	out := map[string]string{}
	// each answer as the gateway wrote it: every field, also those the
	// client's types do not name
	get := func(path string) any {
		var v any
		var raw json.RawMessage
		if err := story.Retry(ctx, func() (err error) { raw, err = c.GetRaw(ctx, path); return err }); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		v = scrub(v)
		b, _ := json.Marshal(v) // maps marshal with sorted keys
		out[path] = string(b)
		return v
	}
	items := func(v any) []map[string]any {
		var out []map[string]any
		m, _ := v.(map[string]any)
		l, _ := m["items"].([]any)
		for _, e := range l {
			if mm, ok := e.(map[string]any); ok {
				out = append(out, mm)
			}
		}
		return out
	}
	orgs := items(get("/api/v1/orgs"))
	for _, o := range orgs {
		org := "/api/v1/orgs/" + url.PathEscape(fmt.Sprint(o["id"]))
		get(org)
		get(org + "/tokens")
		get(org + "/enrollment-tokens")
		get(org + "/clusters")
		for cursor, first := "", true; first || cursor != ""; first = false {
			v := get(org + "/machines?limit=500&cursor=" + url.QueryEscape(cursor))
			cursor, _ = v.(map[string]any)["next"].(string)
		}
		for _, p := range items(get(org + "/pools")) {
			name := fmt.Sprint(p["name"])
			get(org + "/pools/" + name)
			get(org + "/pools/" + name + "/revisions")
		}
		for _, r := range items(get(org + "/rollouts?limit=500")) {
			get(org + "/rollouts/" + fmt.Sprint(r["id"]))
		}
		for _, op := range items(get(org + "/operations?limit=500")) {
			get(org + "/operations/" + fmt.Sprint(op["id"]))
		}
	}
	return out
}

func hashState(st map[string]string) string {
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\n%d\n%s\n", k, len(st[k]), st[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func diffState(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k+":\n"+fieldDiff(v, b[k]))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k+": only after the rebuild")
		}
	}
	sort.Strings(out)
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("… %d more", len(out)-8))
	}
	return strings.Join(out, "\n")
}

// registryHash is the registry machine model's own digest (it excludes
// heartbeat times).
func registryHash(t *testing.T, env *story.Env) string {
	p, ok := env.Stack.Registry.App.Machines.(*readmodel.MachineProjection)
	if !ok {
		t.Fatalf("the registry's machine projection is a %T", env.Stack.Registry.App.Machines)
	}
	h := p.Model().Hash()
	return hex.EncodeToString(h[:])
}

// auditByReplay: after everything above, rebuilding every projection from
// zero gives the same state as the live projections, compared by hash:
// first the projections the services expose (registry machines and orgs,
// rollouts) rebuilt in place, then every projection of every service, by
// stopping the whole stack and starting it again on the same data (the
// read models live in memory, so a start replays the log from zero).
func auditByReplay(t *testing.T, env *story.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// let the live projections settle: nothing is running any more
	eventually(t, "the live state is steady", time.Minute, func() (bool, string) {
		a := hashState(apiState(t, env))
		time.Sleep(500 * time.Millisecond)
		b := hashState(apiState(t, env))
		return a == b, "still changing"
	})
	live := apiState(t, env)
	liveReg := registryHash(t, env)

	st := env.Stack
	for _, r := range []interface {
		Rebuild(context.Context) error
		WaitLive(context.Context) error
		Name() string
	}{st.Registry.Machines, st.Registry.Orgs, st.Rollout.Runner} {
		if err := r.Rebuild(ctx); err != nil {
			t.Fatalf("rebuild %s: %v", r.Name(), err)
		}
		if err := r.WaitLive(ctx); err != nil {
			t.Fatalf("rebuild %s: %v", r.Name(), err)
		}
	}
	if got := registryHash(t, env); got != liveReg {
		t.Fatalf("the registry's machine model rebuilt from zero hashes to %s, live %s", got, liveReg)
	}
	rebuilt := apiState(t, env)
	if a, b := hashState(live), hashState(rebuilt); a != b {
		t.Fatalf("after rebuilding in place: %s ≠ live %s\n%s", b, a, diffState(live, rebuilt))
	}

	must(t, env.RestartStack(ctx))
	// The services answer while their projections still replay: wait
	// until those the stack exposes are live and the answers are steady.
	st = env.Stack
	for _, r := range []interface {
		WaitLive(context.Context) error
		Name() string
	}{st.Registry.Machines, st.Registry.Orgs, st.Rollout.Runner} {
		if err := r.WaitLive(ctx); err != nil {
			t.Fatalf("replaying %s: %v", r.Name(), err)
		}
	}
	eventually(t, "the replayed state is steady", time.Minute, func() (bool, string) {
		a := hashState(apiState(t, env))
		time.Sleep(500 * time.Millisecond)
		b := hashState(apiState(t, env))
		return a == b, "still changing"
	})
	if got := registryHash(t, env); got != liveReg {
		t.Fatalf("after the restart the registry's machine model hashes to %s, live %s", got, liveReg)
	}
	replayed := apiState(t, env)
	if a, b := hashState(live), hashState(replayed); a != b {
		t.Fatalf("after replaying every projection from zero: %s ≠ live %s\n%s", b, a, diffState(live, replayed))
	}
	t.Logf("%d answers, state hash %s, registry model hash %s: identical live, rebuilt in place, and replayed after a restart",
		len(live), hashState(live)[:16], liveReg[:16])
}

// fieldDiff names the top-level fields that differ between two JSON
// objects, with both values.
func fieldDiff(a, b string) string {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return fmt.Sprintf("  live:    %.600s\n  rebuilt: %.600s", a, b)
	}
	var out []string
	for k := range x {
		if fmt.Sprint(x[k]) != fmt.Sprint(y[k]) {
			out = append(out, fmt.Sprintf("  %s: live %.300v, rebuilt %.300v", k, x[k], y[k]))
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			out = append(out, fmt.Sprintf("  %s: only rebuilt, %.300v", k, y[k]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
