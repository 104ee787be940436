// Package ipxe builds the iPXE scripts the boot service answers firmware
// with, and parses the firmware's query parameters. It is pure: no I/O, no
// clock, no randomness of its own.
//
// Every script is a valid "#!ipxe" script, whatever the input: a refusal is
// a script that echoes the reason and retries, never an HTTP error, because
// firmware that gets a 404 drops to a menu and stays there. Text that came
// from a request is never written into a script except through Sanitize
// (echo lines) or url.QueryEscape (URLs), so nothing a client sends can
// expand iPXE settings (${...}) or add commands.
package ipxe

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits on what firmware may send.
const (
	// MaxQueryLen bounds a query string; longer ones are refused (echoed
	// as "query too long"), not parsed.
	MaxQueryLen = 4096
	// MaxTokenLen bounds an enrollment token; a longer one is refused and
	// not carried into the retry URL.
	MaxTokenLen = 256
	// MaxAttempt caps the retry counter carried in URLs.
	MaxAttempt = 1000
	// echoWidth is where echo lines are wrapped (an 80-column console).
	echoWidth = 72
	// maxMessage bounds one echoed message before wrapping.
	maxMessage = 400
)

// Names of the Flatcar PXE images under an asset base URL.
const (
	KernelName = "flatcar_production_pxe.vmlinuz"
	InitrdName = "flatcar_production_pxe_image.cpio.gz"
)

// Templates iPXE expands itself: the SMBIOS UUID and the first NIC's MAC
// (hyphen-separated, so that it needs no escaping in a URL).
const (
	UUIDTemplate = "${uuid}"
	MACTemplate  = "${net0/mac:hexhyp}"
)

// Reason is why a request was refused; it labels the refusal metric, so the
// set is fixed.
type Reason string

const (
	ReasonQueryTooLong         Reason = "query_too_long"
	ReasonBadQuery             Reason = "bad_query"
	ReasonTokenMissing         Reason = "token_missing"
	ReasonTokenMalformed       Reason = "token_malformed"
	ReasonTokenRefused         Reason = "token_refused"
	ReasonUUIDInvalid          Reason = "uuid_invalid"
	ReasonMACInvalid           Reason = "mac_invalid"
	ReasonRegistryUnavailable  Reason = "registry_unavailable"
	ReasonRevisionsUnavailable Reason = "revisions_unavailable"
	ReasonMachineRefused       Reason = "machine_refused"
	ReasonRevisionMissing      Reason = "revision_missing"
	ReasonConfigInvalid        Reason = "config_invalid"
	ReasonInternal             Reason = "internal"
)

// Reasons lists every reason, so that metrics start at zero for each.
func Reasons() []Reason {
	return []Reason{
		ReasonQueryTooLong, ReasonBadQuery, ReasonTokenMissing, ReasonTokenMalformed, ReasonTokenRefused,
		ReasonUUIDInvalid, ReasonMACInvalid, ReasonRegistryUnavailable, ReasonRevisionsUnavailable,
		ReasonMachineRefused, ReasonRevisionMissing, ReasonConfigInvalid, ReasonInternal,
	}
}

// Refusal says why a boot cannot go on. Message is for the console and the
// log; scripts pass it through Sanitize.
type Refusal struct {
	Reason  Reason
	Message string
}

func (r *Refusal) Error() string { return string(r.Reason) + ": " + r.Message }

// Refuse builds a refusal.
func Refuse(reason Reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ---- query parsing ----

// ChainQuery is what GET /boot.ipxe reads.
type ChainQuery struct {
	// Token is the enrollment token as given, when it is short enough to
	// carry into a retry URL (even if malformed: the retry is "the same
	// URL"). Empty otherwise.
	Token   string
	Attempt int
}

// MachineQuery is what GET /ipxe reads.
type MachineQuery struct {
	UUID    string // lowercase canonical; empty if the query was refused
	MAC     string // lowercase, colon-separated; empty if refused
	Token   string // as given, for the retry URL (see ChainQuery.Token)
	Attempt int
}

// ParseChainQuery reads /boot.ipxe?token=…[&attempt=N]. The query is
// returned even with a refusal, holding what the retry URL may carry.
func ParseChainQuery(raw string) (ChainQuery, *Refusal) {
	v, ref := values(raw)
	q := ChainQuery{Attempt: attempt(v)}
	q.Token = carriedToken(v)
	if ref != nil {
		return q, ref
	}
	if _, ref := checkToken(v); ref != nil {
		return q, ref
	}
	return q, nil
}

// ParseMachineQuery reads /ipxe?uuid=…&mac=…&token=…[&attempt=N].
func ParseMachineQuery(raw string) (MachineQuery, *Refusal) {
	v, ref := values(raw)
	q := MachineQuery{Attempt: attempt(v), Token: carriedToken(v)}
	if ref != nil {
		return q, ref
	}
	if _, ref := checkToken(v); ref != nil {
		return q, ref
	}
	id, err := ParseUUID(v.get(pUUID))
	if err != nil {
		return q, Refuse(ReasonUUIDInvalid, "the machine UUID %s", err.Error())
	}
	mac, err := ParseMAC(v.get(pMAC))
	if err != nil {
		return q, Refuse(ReasonMACInvalid, "the MAC address %s", err.Error())
	}
	q.UUID, q.MAC = id, mac
	return q, nil
}

// params holds the parameters the iPXE endpoints read: the first value
// of each (as url.Values.Get) and how many times it was given.
type params struct {
	val [len(paramNames)]string
	n   [len(paramNames)]int
}

// paramNames are the parameters the iPXE endpoints read, indexed by the
// p* constants.
var paramNames = [...]string{"uuid", "mac", "token", "attempt"}

const (
	pUUID = iota
	pMAC
	pToken
	pAttempt
)

func (p *params) get(i int) string { return p.val[i] }

func (p *params) add(key, value string) {
	for i, name := range paramNames {
		if key == name {
			if p.n[i] == 0 {
				p.val[i] = value
			}
			p.n[i]++
			return
		}
	}
}

// values parses a query, refusing oversized ones and repeated parameters.
// What could be parsed is returned even with a refusal.
func values(raw string) (params, *Refusal) {
	var p params
	if len(raw) > MaxQueryLen {
		return p, Refuse(ReasonQueryTooLong, "the query is %d bytes long; at most %d are read", len(raw), MaxQueryLen)
	}
	// Three IndexByte scans are much cheaper than ContainsAny's loop.
	if strings.IndexByte(raw, '%') >= 0 || strings.IndexByte(raw, '+') >= 0 || strings.IndexByte(raw, ';') >= 0 {
		// Escapes, or a separator url.ParseQuery refuses: parsed by it.
		v, err := url.ParseQuery(raw)
		for i, name := range paramNames {
			if vs := v[name]; len(vs) > 0 {
				p.val[i], p.n[i] = vs[0], len(vs)
			}
		}
		if err != nil {
			return p, Refuse(ReasonBadQuery, "the query is malformed (bad %%-escape or separator)")
		}
	} else {
		// Nothing to unescape: what url.ParseQuery would read, without
		// building its map (every boot of a rack comes through here).
		for rest := raw; rest != ""; {
			var pair string
			pair, rest, _ = strings.Cut(rest, "&")
			if pair != "" {
				key, value, _ := strings.Cut(pair, "=")
				p.add(key, value)
			}
		}
	}
	for i, name := range paramNames {
		if p.n[i] > 1 {
			return p, Refuse(ReasonBadQuery, "the parameter %s is given %d times", name, p.n[i])
		}
	}
	return p, nil
}

func attempt(p params) int {
	s := p.get(pAttempt)
	if s == "" {
		return 0 // no error to allocate
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return min(n, MaxAttempt)
}

func carriedToken(p params) string {
	if t := p.get(pToken); p.n[pToken] == 1 && len(t) <= MaxTokenLen {
		return t
	}
	return ""
}

func checkToken(p params) (string, *Refusal) {
	t := p.get(pToken)
	switch {
	case t == "":
		return "", Refuse(ReasonTokenMissing, "the chain URL has no enrollment token; add token=<enrollment token> to it")
	case len(t) > MaxTokenLen:
		return "", Refuse(ReasonTokenMalformed, "the enrollment token is %d characters long; tokens are at most %d", len(t), MaxTokenLen)
	case !tokenChars(t):
		return "", Refuse(ReasonTokenMalformed, "the enrollment token holds characters no token has; copy it again from anvil")
	}
	return t, nil
}

// tokenChars accepts what anvil's tokens are made of, with some margin:
// letters, digits, '_', '-', '.' and '~' (enrollment tokens, and the
// per-boot tokens that boot scripts carry).
func tokenChars[T string | []byte](s T) bool {
	var bad byte // no branch per byte: a token is checked whole anyway
	for i := 0; i < len(s); i++ {
		bad |= notToken[s[i]]
	}
	return bad == 0
}

// notToken marks the bytes tokenChars refuses, looked up per byte: every
// /ipxe checks a token in its query and one in its answer.
var notToken = func() (t [256]byte) {
	for c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '~') {
			t[c] = 1
		}
	}
	return t
}()

// ParseUUID accepts an SMBIOS UUID in canonical 8-4-4-4-12 form in any
// case and returns it lowercase. The nil and all-F UUIDs are refused:
// broken firmware reports them, and every such machine would be one.
func ParseUUID(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("is missing (the firmware sent no ${uuid})")
	}
	if len(s) != 36 {
		return "", fmt.Errorf("must be 36 characters (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), got %d", len(s))
	}
	upper := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", fmt.Errorf("must have '-' at positions 9, 14, 19 and 24")
			}
		case !hexDigit[c]:
			return "", fmt.Errorf("must hold only hexadecimal digits and dashes")
		case c <= 'F' && c >= 'A':
			upper = true
		}
	}
	if upper {
		s = strings.ToLower(s) // only ASCII is left
	}
	switch s {
	case "00000000-0000-0000-0000-000000000000":
		return "", fmt.Errorf("is the nil UUID, which broken firmware reports; set a real SMBIOS UUID on this machine")
	case "ffffffff-ffff-ffff-ffff-ffffffffffff":
		return "", fmt.Errorf("is all F, which unprogrammed firmware reports; set a real SMBIOS UUID on this machine")
	}
	return s, nil // already canonical unless it had upper case: nothing copied
}

// hexDigit marks the hexadecimal digits, either case.
var hexDigit = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	}
	return t
}()

// ParseMAC accepts a 48-bit MAC with '-' (iPXE's hexhyp) or ':' separators
// and returns it lowercase with colons.
func ParseMAC(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("is missing")
	}
	if len(s) != 17 {
		return "", fmt.Errorf("must look like 52-54-00-12-34-56")
	}
	sep := s[2]
	if sep != '-' && sep != ':' {
		return "", fmt.Errorf("must look like 52-54-00-12-34-56")
	}
	var buf [17]byte
	out := buf[:]
	copy(out, s)
	nonzero := false
	for i, c := range out {
		if i%3 == 2 {
			if c != sep {
				return "", fmt.Errorf("must look like 52-54-00-12-34-56")
			}
			out[i] = ':'
			continue
		}
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			out[i] = c + 'a' - 'A'
		default:
			return "", fmt.Errorf("must hold only hexadecimal digits")
		}
		if c != '0' {
			nonzero = true
		}
	}
	if !nonzero {
		return "", fmt.Errorf("must not be all zeros")
	}
	return string(out), nil
}

// ---- backoff ----

// Backoff returns the seconds to sleep before retry number attempt+1:
// initial doubled per attempt up to max, spread by ±20% with rnd in [0,1)
// so that a rack that failed together does not retry together. It is at
// least one second.
func Backoff(attempt int, initial, max time.Duration, rnd float64) int {
	if initial <= 0 {
		initial = time.Second
	}
	if max < initial {
		max = initial
	}
	d := max
	if attempt < 40 {
		if scaled := initial << uint(max0(attempt)); scaled > 0 && scaled < max {
			d = scaled
		}
	}
	if rnd < 0 || rnd >= 1 || math.IsNaN(rnd) {
		rnd = 0.5
	}
	secs := int(math.Round(d.Seconds() * (0.8 + 0.4*rnd)))
	return max1(secs)
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// ---- URLs ----

// CheckBaseURL accepts an absolute http(s) URL without credentials, query
// or fragment, made only of characters that are inert in an iPXE script
// and a kernel command line. Base URLs come from configuration or from a
// request's Host header, so they are checked before use.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?") {
		return fmt.Errorf("must be an absolute http(s) URL without credentials, query or fragment")
	}
	if !inert(s) {
		return fmt.Errorf("must not contain spaces, quotes, '$', braces, '#', '|', '&', '<', '>' or non-ASCII characters")
	}
	return nil
}

// inert reports whether s holds only characters that iPXE and the kernel
// command line take literally.
func inert(s string) bool {
	for i := 0; i < len(s); i++ {
		if !inertByte(s[i]) {
			return false
		}
	}
	return true
}

func inertByte(c byte) bool { return inertBytes[c] }

// inertBytes are the characters inert accepts, looked up per byte: every
// boot script checks its URLs with it.
var inertBytes = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("-._~:/%[]@+,;=*!()", byte(c)) >= 0
	}
	return t
}()

// ChainURL is /boot.ipxe on base with the token and attempt.
func ChainURL(base, token string, attempt int) string {
	return strings.TrimSuffix(base, "/") + "/boot.ipxe?token=" + url.QueryEscape(token) + "&attempt=" + strconv.Itoa(clampAttempt(attempt))
}

// MachineURL is /ipxe on base, with iPXE's own UUID and MAC templates, the
// token and the attempt counter.
func MachineURL(base, token string, attempt int) string {
	if attempt > 0 { // one concatenation: every script carries this URL
		return strings.TrimSuffix(base, "/") + "/ipxe?uuid=" + UUIDTemplate + "&mac=" + MACTemplate + "&token=" + url.QueryEscape(token) +
			"&attempt=" + strconv.Itoa(clampAttempt(attempt))
	}
	return strings.TrimSuffix(base, "/") + "/ipxe?uuid=" + UUIDTemplate + "&mac=" + MACTemplate + "&token=" + url.QueryEscape(token)
}

// IgnitionURL is /ignition on base for a machine and its per-boot token.
func IgnitionURL(base, uuid, bootToken string) string {
	return IgnitionURLPrefix(base, uuid) + url.QueryEscape(bootToken)
}

// IgnitionURLPrefix is IgnitionURL up to its token, which a caller
// appending a per-boot token made of unreserved characters (base64url and
// '.', as signing makes them) appends as it is.
func IgnitionURLPrefix(base, uuid string) string {
	return strings.TrimSuffix(base, "/") + "/ignition?uuid=" + url.QueryEscape(uuid) + "&token="
}

func clampAttempt(n int) int { return min(max0(n), MaxAttempt) }

// AssetBase returns the directory of a Flatcar release's PXE images. The
// template may hold {channel} and {version}
// (http://{channel}.release.flatcar-linux.net/amd64-usr/{version}); without
// either, "/<channel>/<version>" is appended (a local mirror laid out as
// <base>/<channel>/<version>/flatcar_production_pxe.vmlinuz).
func AssetBase(template, channel, version string) (string, error) {
	if err := checkRelease("channel", channel); err != nil {
		return "", err
	}
	if err := checkRelease("version", version); err != nil {
		return "", err
	}
	var out string
	if strings.Contains(template, "{channel}") || strings.Contains(template, "{version}") {
		out = strings.ReplaceAll(strings.ReplaceAll(template, "{channel}", channel), "{version}", version)
	} else {
		out = strings.TrimSuffix(template, "/") + "/" + channel + "/" + version
	}
	if err := CheckBaseURL(out); err != nil {
		return "", fmt.Errorf("asset base URL %w", err)
	}
	return strings.TrimSuffix(out, "/"), nil
}

// CheckAssetTemplate checks an asset base URL template at start.
func CheckAssetTemplate(template string) error {
	_, err := AssetBase(template, "stable", "1.2.3")
	return err
}

func checkRelease(field, s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("the Flatcar %s %q must be 1 to 64 characters", field, Sanitize(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' && i > 0) {
			return fmt.Errorf("the Flatcar %s %q must be letters, digits, '.', '_' and '-'", field, Sanitize(s))
		}
	}
	return nil
}

// CheckKernelArg accepts one extra kernel argument (console=ttyS0,115200n8).
func CheckKernelArg(s string) error {
	if s == "" || len(s) > 256 || !inert(s) || strings.HasPrefix(s, "ignition.") || strings.HasPrefix(s, "initrd=") {
		return fmt.Errorf("kernel argument %q must be 1-256 characters that need no quoting, and not set ignition.* or initrd=", Sanitize(s))
	}
	return nil
}
