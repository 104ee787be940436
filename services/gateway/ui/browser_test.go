package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// EnvChromium names the browser binary; otherwise it is looked up on PATH
// (chromium, chromium-browser, google-chrome) and, when missing, installed
// from Debian's packages if this is root.
const EnvChromium = "ANVIL_CHROMIUM"

// EnvShots is where the browser test saves its screenshots; otherwise a
// new temporary directory that is kept (its path is logged).
const EnvShots = "ANVIL_CONSOLE_SHOTS"

var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

// chromium finds a headless-capable Chromium, installing Debian's package
// when it is missing and we are root (as on CI); otherwise the test skips.
func chromium(t *testing.T) string {
	t.Helper()
	chromiumOnce.Do(func() {
		if p := os.Getenv(EnvChromium); p != "" {
			chromiumPath = p
			return
		}
		look := func() string {
			for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
				if p, err := exec.LookPath(name); err == nil {
					return p
				}
			}
			return ""
		}
		if chromiumPath = look(); chromiumPath != "" {
			return
		}
		if os.Geteuid() != 0 {
			chromiumErr = errors.New("chromium is not installed and this is not root: apt-get install chromium (or set " + EnvChromium + ")")
			return
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			chromiumErr = errors.New("chromium is not installed and there is no apt-get to install it (set " + EnvChromium + ")")
			return
		}
		start := time.Now()
		install := func() ([]byte, error) {
			cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", "chromium")
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.CombinedOutput()
		}
		out, err := install()
		if err != nil { // stale package lists: refresh once
			if upd, uerr := exec.Command("apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
				out = append(out, upd...)
			} else {
				out, err = install()
			}
		}
		if chromiumPath = look(); chromiumPath == "" {
			chromiumErr = fmt.Errorf("installing chromium from Debian failed (%v): %s", err, tail(string(out), 800))
			return
		}
		t.Logf("installed chromium from Debian's packages in %s", time.Since(start).Round(time.Second))
	})
	if chromiumErr != nil {
		t.Skip("no browser: ", chromiumErr)
	}
	return chromiumPath
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// browser drives one headless Chromium tab against the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string

	mu       sync.Mutex
	problems []string // script exceptions, CSP violations, requests to other hosts
}

// newBrowser starts Chromium with a 1280 px wide window. Each browser has
// its own profile, so its cookies are its own.
func newBrowser(t *testing.T, base, shots string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root in a container
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, shots: shots}
	u, _ := url.Parse(base)
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.problem("script exception: " + e.ExceptionDetails.Text + " " + exceptionText(e.ExceptionDetails))
		case *log.EventEntryAdded:
			if strings.Contains(e.Entry.Text, "Content Security Policy") {
				b.problem("CSP violation: " + e.Entry.Text)
			}
		case *network.EventRequestWillBeSent:
			r, err := url.Parse(e.Request.URL)
			if err == nil && (r.Scheme == "http" || r.Scheme == "https") && r.Host != u.Host {
				b.problem("a request to another host (an air-gapped cluster could not render this): " + e.Request.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil && d.Exception.Description != "" {
		return d.Exception.Description
	}
	return ""
}

func (b *browser) problem(p string) {
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// checkClean fails the test for any script exception, CSP violation or
// request to another host seen so far.
func (b *browser) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		b.t.Fatalf("the browser saw problems:\n%s", strings.Join(b.problems, "\n"))
	}
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage:\n%s", what, err, b.mainText())
	}
}

// js evaluates an expression; errors (a page that is navigating) give "".
func (b *browser) js(expr string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return ""
	}
	return out
}

// fetch runs fetch() in the page and returns the status and the body.
func (b *browser) fetch(method, path string, form url.Values) (int, string) {
	b.t.Helper()
	body := "null"
	if form != nil {
		bs, _ := json.Marshal(form.Encode())
		body = string(bs)
	}
	expr := fmt.Sprintf(`fetch(%q, {method: %q, credentials: 'same-origin', redirect: 'manual',
		headers: %s, body: %s}).then(async r => JSON.stringify({status: r.status, body: await r.text()}))`,
		path, method, map[bool]string{true: `{'Content-Type': 'application/x-www-form-urlencoded'}`, false: `{}`}[form != nil], body)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("fetch %s %s: %v", method, path, err)
	}
	var res struct {
		Status int
		Body   string
	}
	_ = json.Unmarshal([]byte(raw), &res)
	return res.Status, res.Body
}

func (b *browser) mainText() string {
	return tail(b.js(`(document.querySelector('main') || document.body || {}).innerText || ''`), 4000)
}

// open loads a console path and waits until the page has loaded.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path))
	b.waitJS("the page "+path+" loads", `document.readyState === 'complete'`, 30*time.Second)
}

// clickAndLoad clicks and waits for the next page (a link or a form).
func (b *browser) clickAndLoad(css string) {
	b.t.Helper()
	b.js(`window.__stay = 'yes', 'yes'`)
	b.do("click "+css, chromedp.Click(chromedp.CSS(css)))
	b.waitJS("a new page after clicking "+css, `window.__stay === undefined && document.readyState === 'complete'`, 60*time.Second)
}

func (b *browser) fill(css, value string) {
	b.t.Helper()
	b.do("fill "+css, chromedp.SetValue(chromedp.CSS(css), value))
}

// waitJS polls a boolean expression until it holds.
func (b *browser) waitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if b.js(`String(!!(`+expr+`))`) == "true" {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: not within %s (%s)\npage %s:\n%s", what, d, expr, b.js(`location.href`), b.mainText())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitText waits until the page's main text contains want.
func (b *browser) waitText(want string, d time.Duration) {
	b.t.Helper()
	b.waitJS("the page shows "+strconvQuote(want), `document.querySelector('main') && document.querySelector('main').innerText.includes(`+strconvQuote(want)+`)`, d)
}

func strconvQuote(s string) string { q, _ := json.Marshal(s); return string(q) }

func (b *browser) mustSee(want ...string) {
	b.t.Helper()
	text := b.js(`(document.querySelector('main') || document.body || {}).innerText || ''`)
	for _, w := range want {
		if !strings.Contains(text, w) {
			b.t.Fatalf("the page %s lacks %q:\n%s", b.js(`location.href`), w, tail(text, 4000))
		}
	}
}

// shot saves a full-page screenshot as <shots>/<name>.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// marker sets a value that lives as long as this page: a later check that
// it is still there proves the page changed without being reloaded.
func (b *browser) marker() string {
	m := fmt.Sprintf("m%d", time.Now().UnixNano())
	b.js(`window.__marker = '` + m + `', ''`)
	return m
}

func (b *browser) samePage(m string) {
	b.t.Helper()
	if got := b.js(`window.__marker || ''`); got != m {
		b.t.Fatalf("the page was reloaded or left (marker %q, want %q): the update was not live", got, m)
	}
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	b.open("/")
	b.waitJS("the sign-in page", `location.pathname === '/ui/sign-in'`, 30*time.Second)
	b.fill("#token", token)
	b.clickAndLoad(`form[action="/ui/sign-in"] button[type=submit]`)
	b.waitJS("signed in", `document.querySelector('form[action="/ui/sign-out"]') !== null`, 30*time.Second)
}

func (b *browser) signOut() {
	b.t.Helper()
	b.clickAndLoad(`form[action="/ui/sign-out"] button`)
	b.waitJS("signed out", `location.pathname === '/ui/sign-in'`, 30*time.Second)
}

// sessionCookie reads the HttpOnly session cookie through the DevTools
// protocol (page scripts cannot).
func (b *browser) sessionCookie() string {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base + "/ui/"}})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == "anvil_session" {
			if !c.HTTPOnly || string(c.SameSite) != "Strict" {
				b.t.Fatalf("the session cookie is not HttpOnly and SameSite=Strict: %+v", c)
			}
			return c.Value
		}
	}
	return ""
}

func (b *browser) darkMode(on bool) {
	b.t.Helper()
	val := "light"
	if on {
		val = "dark"
	}
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: val}}}); err != nil {
		b.t.Fatal(err)
	}
}

func shotsDir(t *testing.T) string {
	dir := os.Getenv(EnvShots)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "anvil-console-shots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", dir)
	return dir
}

// noCookieClient is an HTTP client that follows no redirects.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
