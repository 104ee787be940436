package ui

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages are the parsed templates: each page is the layout plus its file.
type pages struct {
	byName map[string]*template.Template
}

func loadPages() (*pages, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("ui: templates: %w", err)
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "templates/"), ".html")
		if name == "layout" || name == "parts" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", f, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page template gets.
type view struct {
	Title   string
	Section string // the navigation entry to mark current
	S       *session
	Org     string
	OrgName string
	Flash   string
	// Fragment renders only the part a live update replaces.
	Fragment string
	Data     any
}

// Can reports whether the session's role is at least min, to decide which
// buttons exist; the API refuses what the role may not do anyway.
func (v view) Can(min string) bool {
	if v.S == nil {
		return false
	}
	return roleRank(v.S.Role) >= roleRank(min)
}

func roleRank(r string) int {
	return slices.Index([]string{"viewer", "operator", "admin", "platform"}, r) + 1
}

// render writes page name with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	t, ok := c.pages.byName[name]
	if !ok {
		c.log.Error("console: no such template", "template", name)
		http.Error(w, "the console has no page "+name, http.StatusInternalServerError)
		return
	}
	if v.Flash == "" {
		v.Flash = takeFlash(w, r)
	}
	entry := "layout"
	if v.Fragment != "" {
		entry = v.Fragment
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, entry, v); err != nil {
		c.log.Error("console: rendering", "template", name, "err", err)
		http.Error(w, "the console could not render this page; the error has been logged", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

const flashCookie = "anvil_flash"

// flash leaves a message for the next page the browser opens.
func flash(w http.ResponseWriter, r *http.Request, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/ui", MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

func takeFlash(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/ui", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	msg, _ := url.QueryUnescape(ck.Value)
	return msg
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"rfc3339": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	},
	"ago": func(t time.Time) string { return ago(t, time.Now()) },
	"bytes": func(n uint64) string {
		const unit = 1024
		if n < unit {
			return strconv.FormatUint(n, 10) + " B"
		}
		div, exp := uint64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"labels": func(m map[string]string) string { return formatMap(m, ", ") },
	"lines":  func(m map[string]string) string { return formatMap(m, "\n") },
	"join":   strings.Join,
	"human":  func(s any) string { return strings.ReplaceAll(fmt.Sprint(s), "_", " ") },
	"idem":   newIdem,
	"pct": func(done, total int) int {
		if total == 0 {
			return 0
		}
		return done * 100 / total
	},
	"rawjson":  indentJSON,
	"pathesc":  url.PathEscape,
	"queryesc": url.QueryEscape,
	"add":      func(a, b int) int { return a + b },
	"u64":      func(n int) uint64 { return uint64(n) },
	"eqs":      func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) },
	"hash": func(h string) string { // "sha256:…", shortened as git does
		if _, after, ok := strings.Cut(h, ":"); ok {
			h = after
		}
		if len(h) > 12 {
			h = h[:12]
		}
		return h
	},
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
}

func formatMap(m map[string]string, sep string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, sep)
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < 2*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// staticHandler serves the embedded CSS and JavaScript.
func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/ui/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	})
}

// indentJSON pretty-prints JSON (or returns it as it is if it is not).
func indentJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

// newIdem is a fresh Idempotency-Key for a form: a double submit of the
// same form gets the first answer from the API instead of acting twice.
func newIdem() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "console-" + base64.RawURLEncoding.EncodeToString(b)
}
