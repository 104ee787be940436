package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/sim"
)

// The console in a real browser (headless Chromium from Debian's
// packages, driven over the DevTools protocol), against the whole control
// plane (devstack), a real Kubernetes API server (kubeharness) and
// simulated machines running the real agent over the real boot endpoints:
// an operator's night, from sign-in to sign-out, then a viewer, another
// organization and forged writes.
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, a Kubernetes control plane, the whole stack and simulated machines")
	}
	started := time.Now()
	chromium(t) // skip before starting anything when there is no browser
	cp := kubeharness.Start(t)
	s := startStack(t)
	shots := shotsDir(t)
	const seed = 1
	t.Logf("simulator seed %d", seed)

	acme := s.org("acme", "ACME Corp", "admin", "viewer")
	globex := s.org("globex", "Globex", "admin")
	const (
		w1     = "4c4c4544-0035-4b10-8056-c7c04f4e5eed" // pre-registered in the console
		w2     = "4c4c4544-0035-4b10-8056-c7c04f4e5e02" // registers itself when it boots
		theirs = "4c4c4544-0035-4b10-8056-0000000bb001" // globex's
	)
	s.mustAPI(201, "POST", "/api/v1/orgs/globex/machines", globex["admin"], map[string]any{"uuid": theirs, "hostname": "g1"}, nil)

	b := newBrowser(t, s.base, shots)
	b.open("/")
	b.waitJS("/ sends a stranger to sign in", `location.pathname === '/ui/sign-in'`, 30*time.Second)
	b.shot("signin")
	b.signIn(acme["admin"])
	b.mustSee("Machines", "No machines")

	// An enrollment token, shown once, with the iPXE chain URL to copy.
	b.open("/ui/orgs/acme/settings")
	b.fill(`form[action$="/enrollment-tokens"] input[name=name]`, "rack-1")
	b.clickAndLoad(`form[action$="/enrollment-tokens"] button[type=submit]`)
	chain := b.js(`document.querySelector('#new-chain-url') ? document.querySelector('#new-chain-url').value : ''`)
	enroll, ok := strings.CutPrefix(chain, s.boot+"/boot.ipxe?token=")
	if !ok || !strings.HasPrefix(enroll, "anvil_enroll_") {
		t.Fatalf("the chain URL %q is not %s/boot.ipxe?token=<enrollment token>", chain, s.boot)
	}
	b.shot("organization-new-token")
	b.open("/ui/orgs/acme/settings")
	if b.js(`String(document.querySelector('#new-chain-url') === null && !document.body.innerText.includes(`+strconvQuote(enroll)+`))`) != "true" {
		t.Fatal("the enrollment token is shown again after a reload")
	}

	// The cluster (the harness's API server) and the pool, through the console.
	b.open("/ui/orgs/acme/clusters")
	b.fill("#c-name", "prod")
	b.fill("#c-ep", cp.RESTConfig().Host)
	b.fill("#c-kv", "1.37.1")
	b.fill("#c-ca", "sha256:"+strings.Repeat("ab", 32))
	b.fill("#c-bt", "abcdef.0123456789abcdef")
	b.fill("#c-kc", string(cp.Kubeconfig))
	b.clickAndLoad(`form[action$="/clusters"] button[type=submit]`)
	b.waitText("Cluster prod created", 10*time.Second)
	b.open("/ui/orgs/acme/pools/new")
	b.fill("#f-name", "workers")
	b.fill("#f-display", "Workers")
	b.fill("#f-minor", "1.36")
	b.fill("#f-flatcar", "4230.2.3")
	b.fill("#f-maxu", "1")
	b.clickAndLoad(`button[name=apply][value="1"]`)
	b.waitText("Saved as revision 1. Rolling out revision 1", 10*time.Second)

	// Register Machine.
	b.open("/ui/orgs/acme/machines")
	b.clickAndLoad(`a[href$="/machines/new"]`)
	b.fill("#uuid", strings.ToUpper(w1))
	b.fill("#hostname", "w1")
	b.fill("#labels", "rack=r1\nzone=a")
	b.fill("#upgrade_index", "1")
	b.shot("register-machine")
	b.clickAndLoad(`form[action$="/machines"] button[type=submit]`)
	b.waitText("Machine "+w1+" is registered", 10*time.Second)
	b.mustSee("preregistered", "rack=r1, zone=a")

	// Boot it (and a machine nobody registered): both appear in the list
	// while it stays open.
	b.open("/ui/orgs/acme/machines")
	mark := b.marker()
	fleet, err := sim.New(sim.Config{BootURL: s.boot, EnrollmentToken: enroll, Kube: cp.Client,
		// reboots long enough that a rollout is still running when its page
		// opens, with room for a loaded 2-core machine under -race (a page
		// load or two between Save & Apply and the rollout's page)
		RebootTime: 6 * time.Second, RebootJitter: 200 * time.Millisecond, MaxWait: 200 * time.Millisecond, Seed: seed,
		AgentIntervals: sim.TestIntervals(), Logger: slog.New(slog.DiscardHandler), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	fleet.Add(w1, "52:54:00:5e:ed:01")
	fleet.Add(w2, "52:54:00:5e:ed:02")
	if err := fleet.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	b.waitJS("w1 turns ready_unassigned and w2 appears, without a reload", fmt.Sprintf(`(() => {
		const a = document.querySelector('tr[data-uuid=%q] .badge');
		return a && a.textContent === 'ready unassigned' && document.querySelector('tr[data-uuid=%q]') !== null })()`, w1, w2), 3*time.Minute)
	b.samePage(mark)
	b.shot("machines")

	// Assign it: the confirmation says what will happen; it provisions.
	b.open("/ui/orgs/acme/machines/" + w1)
	b.clickAndLoad(`a[href$="confirm?action=assign"]`)
	b.mustSee("Assign to pool?", "joins the pool you choose")
	b.shot("confirm-assign")
	b.do("choose the pool", chromedp.SetValue(chromedp.CSS("#pool"), "workers"))
	b.clickAndLoad(`form[action$="/actions/assign"] button[type=submit]`)
	b.waitText("Assigned to pool workers", 10*time.Second)
	mark = b.marker()
	machineAt := func(status, rev string) string {
		return fmt.Sprintf(`(() => { const s = document.querySelector('#machine-live .badge'), r = document.querySelector('#machine-live .rev strong');
			return s && r && s.textContent === %q && r.textContent === %q })()`, status, rev)
	}
	b.waitJS("w1 is provisioned to revision 1, live", machineAt("ready", "1"), 4*time.Minute)
	b.samePage(mark)
	b.waitJS("its hardware is shown", `document.querySelector('#hw-title') && document.querySelector('#hw-title').parentElement.innerText.includes('CPUs')`, time.Minute)
	b.shot("machine")

	// Edit the pool: a wrong value is refused next to its field; then
	// Save & Apply.
	b.open("/ui/orgs/acme/pools/workers")
	b.fill("#f-minor", "1.99")
	b.clickAndLoad(`button[name=apply][value="0"]`)
	b.waitJS("the API's error next to the field", `document.querySelector('#err-minor') !== null &&
		document.querySelector('#err-minor').parentElement.contains(document.querySelector('#f-minor')) &&
		document.querySelector('#f-minor').getAttribute('aria-invalid') === 'true'`, 10*time.Second)
	b.shot("pool-field-error")
	b.fill("#f-minor", "1.37")
	b.fill("#f-msg", "Kubernetes 1.37")
	b.clickAndLoad(`button[name=apply][value="1"]`)
	b.waitText("Saved as revision 2. Rolling out revision 2", 10*time.Second)

	// Watch the rollout to done: its log arrives over Server-Sent Events.
	change := b.findRollout("2", false)
	if !b.watchRollout(change, "rollout") {
		t.Fatalf("rollout %s had finished before its page opened: nothing was watched live", change)
	}
	b.open("/ui/orgs/acme/machines/" + w1)
	b.waitJS("w1 runs revision 2", machineAt("ready", "2"), 2*time.Minute)
	afterChange := wholeSecondAfter(time.Now())

	// The revision's diff: fields and rendered Ignition side by side.
	b.open("/ui/orgs/acme/pools/workers/revisions/2")
	b.mustSee("Fields: revision 1 → 2", "kubernetes.minor", `"1.36"`, `"1.37"`, "Rendered Ignition, side by side")
	if b.js(`String(document.querySelectorAll('table.diff tr.changed').length > 0)`) != "true" {
		t.Fatal("the Ignition diff shows no changed line")
	}
	b.shot("revision-diff")

	// Roll back from the revisions list.
	b.open("/ui/orgs/acme/pools/workers")
	b.shot("pool")
	b.clickAndLoad(`a[href$="/revisions/1/confirm"]`)
	b.mustSee("Roll back to revision 1?", "moved back from revision 2 to revision 1")
	b.shot("confirm-rollback")
	b.clickAndLoad(`form[action$="/revisions/1/apply"] button[type=submit]`)
	b.waitText("Rolling back to revision 1", 10*time.Second)
	back := b.findRollout("1", true)
	b.watchRollout(back, "")
	b.open("/ui/orgs/acme/rollouts")
	b.shot("rollouts")

	// The machine's revisions tab and its startup log.
	b.open("/ui/orgs/acme/machines/" + w1)
	b.waitJS("w1 is back at revision 1", machineAt("ready", "1"), 2*time.Minute)
	b.open("/ui/orgs/acme/machines/" + w1 + "?tab=revisions")
	b.mustSee("Revisions of pool workers", "current", "Reboot instructions")
	b.shot("machine-revisions")
	b.open("/ui/orgs/acme/machines/" + w1 + "?tab=log")
	b.waitJS("the startup log says what booted", `document.querySelector('pre.log') && document.querySelector('pre.log').innerText.includes('Ignition: applied revision mr-')`, 10*time.Second)
	b.shot("startup-log")

	// The audit log, and w1 as it was between the change and the rollback.
	b.open("/ui/orgs/acme/audit?agg_type=machine&agg_id=" + w1 +
		"&type=machine.preregistered,machine.registered,machine.assigned_to_pool,machine.target_revision_set,machine.revision_booted,machine.became_ready")
	b.mustSee("machine.preregistered", "machine.registered", "machine.assigned_to_pool", "machine.target_revision_set", "machine.revision_booted",
		"token:") // the actor of each change
	b.shot("audit")
	b.do("time travel", chromedp.SetValue(chromedp.CSS(`form[action$="/time-travel"] select[name=kind]`), "machine"),
		chromedp.SetValue(chromedp.CSS(`form[action$="/time-travel"] input[name=id]`), w1),
		chromedp.SetValue(chromedp.CSS(`form[action$="/time-travel"] input[name=at]`), datetimeLocal(afterChange)))
	b.clickAndLoad(`form[action$="/time-travel"] button[type=submit]`)
	b.waitJS("the time-travel view", `document.querySelector('.history') !== null`, 10*time.Second)
	if got := b.js(`document.querySelector('#machine-live .rev strong').textContent`); got != "2" {
		t.Fatalf("w1 as of %s runs revision %q, want 2 (it runs 1 now)", afterChange.Format(time.RFC3339), got)
	}
	if b.js(`String(document.querySelectorAll('a[href*="confirm?action="]').length)`) != "0" {
		t.Fatal("the time-travel view offers actions")
	}
	b.shot("time-travel")
	// Maintenance for w2 (in no pool, so nothing to drain), and its
	// Operations tab.
	b.open("/ui/orgs/acme/machines/" + w2)
	b.clickAndLoad(`a[href$="confirm?action=maintenance-on"]`)
	b.mustSee("Enter maintenance?", "rollouts skip it")
	b.clickAndLoad(`form[action$="/actions/maintenance-on"] button[type=submit]`)
	b.waitJS("w2 is in maintenance", `document.querySelector('#machine-live .badge') && document.querySelector('#machine-live .badge').textContent === 'maintenance'`, time.Minute)
	b.open("/ui/orgs/acme/machines/" + w2 + "?tab=operations")
	b.mustSee("Operations of this machine")
	b.open("/ui/orgs/acme/operations")
	b.mustSee(change, back)
	b.shot("operations")

	// On a phone, and in the dark.
	b.do("phone", chromedp.EmulateViewport(390, 844))
	for _, p := range []string{"/ui/orgs/acme/machines", "/ui/orgs/acme/machines/" + w1, "/ui/orgs/acme/pools/workers"} {
		b.open(p)
		if b.js(`String(document.documentElement.scrollWidth <= window.innerWidth + 1)`) != "true" {
			t.Fatalf("%s is wider than a phone (%s px): only tables may scroll sideways", p, b.js(`String(document.documentElement.scrollWidth)`))
		}
	}
	b.open("/ui/orgs/acme/machines")
	b.shot("phone-machines")
	b.open("/ui/orgs/acme/machines/" + w1)
	b.shot("phone-machine")
	b.do("desktop", chromedp.EmulateViewport(1280, 900))
	b.darkMode(true)
	b.open("/ui/orgs/acme/machines")
	// At 1280 px the machines list fits: no column is cut off behind a
	// sideways scroll.
	if fits := b.js(`(() => { const w = document.querySelector('.table-wrap'); return String(w.scrollWidth <= w.clientWidth + 1) })()`); fits != "true" {
		t.Fatalf("the machines table is wider than its box at 1280 px (%s > %s px)",
			b.js(`String(document.querySelector('.table-wrap').scrollWidth)`), b.js(`String(document.querySelector('.table-wrap').clientWidth)`))
	}
	if bg := b.js(`getComputedStyle(document.body).backgroundColor`); bg != "rgb(15, 17, 21)" {
		t.Fatalf("prefers-color-scheme: dark gives the background %s", bg)
	}
	b.shot("machines-dark")
	b.darkMode(false)

	// Sign out: the session ends on the server.
	old := b.sessionCookie()
	if old == "" {
		t.Fatal("no session cookie")
	}
	b.signOut()
	b.mustSee("You are signed out")
	b.open("/ui/orgs/acme/machines")
	b.waitJS("a signed-out browser is sent to sign in", `location.pathname === '/ui/sign-in'`, 10*time.Second)
	req, _ := http.NewRequest("GET", s.base+"/ui/orgs/acme/machines", nil)
	req.AddCookie(&http.Cookie{Name: "anvil_session", Value: old})
	res, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/sign-in") {
		t.Fatalf("the signed-out session's cookie still opens pages: %d %s", res.StatusCode, res.Header.Get("Location"))
	}

	// A viewer: no write buttons, and writes forged by hand are refused.
	b.signIn(acme["viewer"])
	b.open("/ui/orgs/acme/machines/" + w1)
	b.mustSee("w1", "ready")
	for path, sel := range map[string]string{
		"/ui/orgs/acme/machines/" + w1:                    `a[href*="confirm?action="]`,
		"/ui/orgs/acme/machines":                          `a[href$="/machines/new"]`,
		"/ui/orgs/acme/machines/" + w1 + "?tab=revisions": `a[href*="action=apply-revision"]`,
		"/ui/orgs/acme/pools/workers":                     `button[name=apply], a[href$="/confirm"], fieldset:not([disabled])`,
		"/ui/orgs/acme/rollouts/" + change:                `form[action*="/rollouts/"] button, a[href*="confirm?verb="]`,
		"/ui/orgs/acme/settings":                          `form[action$="/tokens"], form[action$="/enrollment-tokens"]`,
	} {
		b.open(path)
		if n := b.js(`String(document.querySelectorAll(` + strconvQuote(sel) + `).length)`); n != "0" {
			t.Fatalf("a viewer sees %s write controls on %s (%s)", n, path, sel)
		}
	}
	b.open("/ui/orgs/acme/machines/" + w1)
	b.shot("viewer-machine")
	csrf := b.js(`document.querySelector('input[name=csrf]').value`)
	st, body := b.fetch("POST", "/ui/orgs/acme/machines/"+w1+"/actions/maintenance-on", url.Values{"csrf": {csrf}})
	if st != http.StatusForbidden || !strings.Contains(body, "Your role may not do this") || !strings.Contains(body, "needs the operator role") {
		t.Fatalf("a viewer's forged maintenance: %d %s", st, mainOf(body))
	}
	st, body = b.fetch("POST", "/ui/orgs/acme/pools/workers", url.Values{"csrf": {csrf}, "kubernetes.minor": {"1.36"}, "apply": {"1"}})
	if st != http.StatusForbidden || !strings.Contains(body, "needs the admin role") {
		t.Fatalf("a viewer's forged Save & Apply: %d %s", st, mainOf(body))
	}
	st, body = b.fetch("POST", "/ui/orgs/acme/machines/"+w1+"/actions/maintenance-on", url.Values{"version": {"1"}})
	if st != http.StatusForbidden || !strings.Contains(body, "This form was refused") {
		t.Fatalf("a form without its CSRF token: %d %s", st, mainOf(body))
	}
	var now struct{ Status string }
	s.mustAPI(200, "GET", "/api/v1/orgs/acme/machines/"+w1, acme["admin"], nil, &now)
	if now.Status != "ready" {
		t.Fatalf("a refused write changed w1: %s", now.Status)
	}

	// Another organization's machine answers 404, as in the API.
	for _, p := range []string{"/ui/orgs/globex/machines/" + theirs, "/ui/orgs/acme/machines/" + theirs} {
		if st, body := b.fetch("GET", p, nil); st != http.StatusNotFound || showsHost(body, "g1") {
			t.Fatalf("%s: %d", p, st)
		}
	}
	b.open("/ui/orgs/globex/machines/" + theirs)
	b.mustSee("Not found", "another organization")
	b.shot("not-found")

	b.checkClean()
	t.Logf("the browser suite took %s (screenshots in %s)", time.Since(started).Round(time.Second), shots)
}

// findRollout waits on the rollouts page (which updates itself) for a
// rollout of pool workers to revision rev (a rollback when rollback), and
// returns its id.
func (b *browser) findRollout(rev string, rollback bool) string {
	b.t.Helper()
	b.open("/ui/orgs/acme/rollouts?pool=workers")
	expr := fmt.Sprintf(`[...document.querySelectorAll('#rollout-rows tr')].filter(tr => tr.cells.length > 3 &&
		tr.cells[2].textContent.trim().split(' ')[0] === %q && tr.cells[2].textContent.includes('rollback') === %t)
		.map(tr => tr.querySelector('a').textContent)[0] || ''`, rev, rollback)
	b.waitJS("a rollout to revision "+rev, expr, time.Minute)
	return b.js(expr)
}

// watchRollout opens a rollout and waits until it succeeded, without a
// reload: the page's live parts follow it and its log streams in over
// Server-Sent Events. It reports whether entries arrived over the stream
// (a rollout can finish just as its page opens).
func (b *browser) watchRollout(id, shot string) bool {
	b.t.Helper()
	b.open("/ui/orgs/acme/rollouts/" + id)
	live := b.js(`document.querySelector('#oplog') && document.querySelector('#oplog').dataset.sse ? 'yes' : 'no'`) == "yes"
	before := b.js(`String(document.querySelectorAll('#oplog li').length)`)
	mark := b.marker()
	b.waitJS("rollout "+id+" succeeds", `document.querySelector('#rollout-status') && document.querySelector('#rollout-status').innerText.includes('succeeded')`, 5*time.Minute)
	grew := false
	if live {
		b.waitJS("the live log ends", `document.querySelector('#oplog').dataset.ended === 'succeeded'`, time.Minute)
		b.samePage(mark)
		after := b.js(`String(document.querySelectorAll('#oplog li').length)`)
		grew = atoi(after) > atoi(before)
		b.t.Logf("rollout %s: the log went from %s to %s entries while its page was open", id, before, after)
	} else {
		b.t.Logf("rollout %s had finished before its page opened", id)
	}
	b.mustSee("uncordon")
	if shot != "" {
		b.shot(shot)
	}
	return grew
}

// wholeSecondAfter waits until the next whole second after t has passed
// and returns it: an instant a datetime-local field can name exactly.
// datetimeLocal is t as a datetime-local field holds it once set: the
// HTML normalized form, which leaves the seconds out when they are zero.
// chromedp.SetValue reads the value back, so "…T14:06:00" came back as
// "…T14:06" and failed the story whenever the instant was a whole minute.
func datetimeLocal(t time.Time) string {
	if t.Second() == 0 {
		return t.Format("2006-01-02T15:04")
	}
	return t.Format("2006-01-02T15:04:05")
}

func wholeSecondAfter(t time.Time) time.Time {
	at := t.Truncate(time.Second).Add(time.Second)
	// a deliberate wait for the clock: the console's ?at= time travel
	// names an instant to the second, which must have passed
	for time.Now().Before(at.Add(50 * time.Millisecond)) {
		time.Sleep(20 * time.Millisecond)
	}
	return at.UTC()
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
