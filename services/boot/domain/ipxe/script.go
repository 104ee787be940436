package ipxe

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Header starts every script.
const Header = "#!ipxe"

// unreachableDelay is how long a script waits before trying again when the
// boot service itself did not answer (the script cannot compute a backoff,
// iPXE has no arithmetic).
const unreachableDelay = 30

// Sanitize makes text safe to echo on an iPXE console: letters, digits,
// spaces and a few punctuation marks stay; every other character
// (including '$', braces, quotes, '#', '|', '&' and anything non-ASCII)
// becomes '?'. Runs of whitespace become one space, and the result is cut
// at maxMessage bytes.
func Sanitize(s string) string {
	var b strings.Builder
	pendingSpace := false
	for i, r := range s {
		if b.Len() >= maxMessage {
			b.WriteString("...")
			break
		}
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				r = '?' // an invalid byte, not a literal U+FFFD
			}
		}
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
			pendingSpace = b.Len() > 0
			continue
		case pendingSpace:
			b.WriteByte(' ')
			pendingSpace = false
		}
		if r < 128 && echoSafe(byte(r)) {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

func echoSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte(".,:;()/_+=@%-?!*[]~^", c) >= 0
}

// wrap splits sanitized text into console lines of at most echoWidth.
func wrap(s string) []string {
	var lines []string
	for len(s) > echoWidth {
		cut := strings.LastIndexByte(s[:echoWidth+1], ' ')
		if cut <= 0 {
			cut = echoWidth
		}
		lines = append(lines, s[:cut])
		s = strings.TrimLeft(s[cut:], " ")
	}
	if s != "" {
		lines = append(lines, s)
	}
	return lines
}

type builder struct{ b strings.Builder }

func newBuilder() *builder {
	b := &builder{}
	b.b.WriteString(Header + "\n")
	return b
}

func (b *builder) line(s string) {
	b.b.WriteString(s)
	b.b.WriteByte('\n')
}

// echo writes a message, sanitized and wrapped, each line prefixed "anvil: "
// so that it can never start like an option or a label.
func (b *builder) echo(msg string) {
	for _, l := range wrap(Sanitize(msg)) {
		b.b.WriteString("echo anvil: ")
		b.line(l)
	}
}

// retryTail sleeps and chains to retryURL, and loops if the boot service
// does not answer at all.
func (b *builder) retryTail(delay int, retryURL string) {
	b.b.WriteString("sleep ")
	b.line(strconv.Itoa(max1(delay)))
	b.line(":retry")
	b.b.WriteString("chain --replace --autofree ")
	b.b.WriteString(retryURL)
	b.line(" || goto unreachable")
	b.b.WriteString(unreachableTail)
}

// unreachableTail ends every retry: the same lines for every script.
var unreachableTail = func() string {
	b := &builder{}
	b.line(":unreachable")
	b.echo(fmt.Sprintf("the boot service did not answer; trying again in %d seconds", unreachableDelay))
	b.line("sleep " + strconv.Itoa(unreachableDelay))
	b.line("goto retry")
	return b.b.String()
}()

// ChainScript is the answer to /boot.ipxe: it hands the machine's UUID and
// MAC to /ipxe (machineURL, see MachineURL).
func ChainScript(machineURL string) string {
	b := newBuilder()
	b.echo("asking the boot service what this machine boots")
	b.line(":retry")
	b.line("chain --replace --autofree " + machineURL + " || goto unreachable")
	b.line(":unreachable")
	b.echo(fmt.Sprintf("the boot service did not answer; trying again in %d seconds", unreachableDelay))
	b.line("sleep " + strconv.Itoa(unreachableDelay))
	b.line("goto retry")
	return b.b.String()
}

// WaitScript echoes what is happening, sleeps delay seconds and chains to
// retryURL: the answer for a machine that waits to be assigned, and the
// body of every refusal.
func WaitScript(messages []string, delay, attempt int, retryURL string) string {
	b := newBuilder()
	for _, m := range messages {
		b.echo(m)
	}
	b.echo(fmt.Sprintf("asking again in %d seconds (attempt %d)", max1(delay), clampAttempt(attempt)+1))
	b.retryTail(delay, retryURL)
	return b.b.String()
}

// RefusalScript is WaitScript for a refusal: it names the reason.
func RefusalScript(r *Refusal, delay, attempt int, retryURL string) string {
	msg := "cannot boot: " + r.Message
	if r.Message == "" {
		msg = "cannot boot: " + string(r.Reason)
	}
	return WaitScript([]string{msg}, delay, attempt, retryURL)
}

// Boot is everything a boot script needs. Every URL must have been built
// by this package (or passed CheckBaseURL), every argument CheckKernelArg.
type Boot struct {
	Messages    []string
	AssetBase   string // directory of the Flatcar PXE images (see AssetBase)
	IgnitionURL string // see IgnitionURL
	KernelArgs  []string
	RetryDelay  int    // seconds to wait when the images cannot be loaded
	Attempt     int    // of the request being answered
	RetryURL    string // see MachineURL
}

// BootScript loads Flatcar's PXE kernel and initrd with Ignition pointed at
// the boot service; if loading fails it retries through /ipxe.
func BootScript(s Boot) (string, error) {
	p, err := PrepareBoot(s)
	if err != nil {
		return "", err
	}
	return p.Script(s.IgnitionURL, s.RetryDelay, s.RetryURL)
}

// PreparedBoot is a boot script rendered up to what each request changes:
// the Ignition URL (a new per-boot token), the retry delay and the retry
// URL. A machine that boots again is answered with it, so that only those
// are rendered per request.
type PreparedBoot struct {
	head string // up to the Ignition URL in the kernel line
	tail string // after it, up to and with ":failed"
	base string
	// failed holds the echoed "could not load" lines per retry delay, in
	// the slot delay%len: the delays a machine is told are few and close
	// together (a back-off step and its jitter).
	failed [8]atomic.Pointer[failedLines]
	// ignition is head with the Ignition URL up to its token, for the
	// last Ignition base and machine (AppendBoot): a machine boots again
	// through the same listener, so it is built and checked once.
	ignition atomic.Pointer[ignitionHead]
}

type ignitionHead struct {
	base, uuid string
	text       string
}

type failedLines struct {
	delay int
	text  string
}

// PrepareBoot checks and renders what BootScript renders of s, but for
// s.IgnitionURL, s.RetryDelay and s.RetryURL.
func PrepareBoot(s Boot) (*PreparedBoot, error) {
	if err := CheckBaseURL(s.AssetBase); err != nil {
		return nil, fmt.Errorf("asset base URL %w", err)
	}
	for _, a := range s.KernelArgs {
		if err := CheckKernelArg(a); err != nil {
			return nil, err
		}
	}
	base := strings.TrimSuffix(s.AssetBase, "/")
	b := newBuilder()
	for _, m := range s.Messages {
		b.echo(m)
	}
	b.b.WriteString("kernel " + base + "/" + KernelName + " initrd=" + InitrdName + " flatcar.first_boot=1 ignition.config.url=")
	var tail strings.Builder
	for _, a := range s.KernelArgs {
		tail.WriteString(" " + a)
	}
	tail.WriteString(" || goto failed\n")
	tail.WriteString("initrd " + base + "/" + InitrdName + " || goto failed\n")
	tail.WriteString("boot || goto failed\n")
	tail.WriteString(":failed\n")
	return &PreparedBoot{head: b.b.String(), tail: tail.String(), base: base}, nil
}

// Script completes the boot script with a request's Ignition URL (built by
// IgnitionURL), retry delay and retry URL (built by MachineURL).
func (p *PreparedBoot) Script(ignitionURL string, retryDelay int, retryURL string) (string, error) {
	b, err := p.AppendScript(nil, ignitionURL, retryDelay, retryURL)
	return string(b), err
}

// AppendScript is Script appended to dst, which it allocates at the size
// of the script if it is nil: the bytes an HTTP answer writes as they are.
func (p *PreparedBoot) AppendScript(dst []byte, ignitionURL string, retryDelay int, retryURL string) ([]byte, error) {
	if !strings.Contains(ignitionURL, "/ignition?") || !urlChars(ignitionURL) {
		return dst, errIgnitionURL
	}
	dst, delay, failed := p.appendHead(dst, len(ignitionURL), retryDelay, retryURL)
	return p.appendTail(append(dst, ignitionURL...), failed, delay, retryURL), nil
}

// AppendBoot is AppendScript for the Ignition URL of machine uuid on
// ignitionBase (IgnitionURL) with the per-boot token that sign appends to
// its argument. The script up to the token is kept from the request
// before (same base and machine), so that per request only the token and
// the retry are written and checked: the token must be made of token
// characters (signing makes base64url and '.'). On an error, dst is
// returned as it was.
func (p *PreparedBoot) AppendBoot(dst []byte, ignitionBase, uuid string, sign func([]byte) []byte, retryDelay int, retryURL string) ([]byte, error) {
	head, err := p.ignitionHead(ignitionBase, uuid)
	if err != nil {
		return dst, err
	}
	delay, failed := p.failedLines(retryDelay)
	start := len(dst)
	dst = append(dst, head...)
	at := len(dst)
	if dst = sign(dst); len(dst) == at || !tokenChars(dst[at:]) {
		return dst[:start], errBootToken
	}
	return p.appendTail(dst, failed, delay, retryURL), nil
}

// ignitionHead is head and IgnitionURLPrefix(base, uuid), checked as
// AppendScript checks a whole Ignition URL.
func (p *PreparedBoot) ignitionHead(base, uuid string) (string, error) {
	if h := p.ignition.Load(); h != nil && h.base == base && h.uuid == uuid {
		return h.text, nil
	}
	prefix := IgnitionURLPrefix(base, uuid)
	if !urlChars(prefix) {
		return "", errIgnitionURL
	}
	h := &ignitionHead{base: base, uuid: uuid, text: p.head + prefix}
	p.ignition.Store(h)
	return h.text, nil
}

var (
	errIgnitionURL = errors.New("ignition URL was not built by IgnitionURL")
	errBootToken   = errors.New("the per-boot token is empty or holds characters no token has")
)

// appendHead appends what precedes an Ignition URL of urlLen bytes, to
// a dst of the script's size when it is nil, and returns the retry delay
// and its "could not load" lines.
func (p *PreparedBoot) appendHead(dst []byte, urlLen, retryDelay int, retryURL string) ([]byte, int, string) {
	delay, failed := p.failedLines(retryDelay)
	if dst == nil {
		dst = make([]byte, 0, len(p.head)+urlLen+len(p.tail)+len(failed)+
			len("sleep \n:retry\nchain --replace --autofree  || goto unreachable\n")+len(strconv.Itoa(delay))+len(retryURL)+len(unreachableTail))
	}
	return append(dst, p.head...), delay, failed
}

// failedLines are the echoed "could not load" lines for a retry delay.
func (p *PreparedBoot) failedLines(retryDelay int) (int, string) {
	delay := max1(retryDelay)
	slot := &p.failed[delay%len(p.failed)]
	failed := slot.Load()
	if failed == nil || failed.delay != delay {
		e := &builder{}
		e.echo(fmt.Sprintf("could not load Flatcar from %s; asking the boot service again in %d seconds", p.base, delay))
		failed = &failedLines{delay: delay, text: e.b.String()}
		slot.Store(failed)
	}
	return delay, failed.text
}

// appendTail appends what follows the Ignition URL.
func (p *PreparedBoot) appendTail(dst []byte, failed string, delay int, retryURL string) []byte {
	dst = append(dst, p.tail...)
	dst = append(dst, failed...)
	// retryTail, appended
	dst = append(dst, "sleep "...)
	dst = strconv.AppendInt(dst, int64(delay), 10)
	dst = append(dst, "\n:retry\nchain --replace --autofree "...)
	dst = append(dst, retryURL...)
	dst = append(dst, " || goto unreachable\n"...)
	return append(dst, unreachableTail...)
}

// urlChars reports whether s holds only what url.QueryEscape, a checked
// base URL and the query separators produce.
func urlChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '&' && c != '?' && !inertByte(c) {
			return false
		}
	}
	return true
}

// Lint checks a script the way the tests (and the fuzzers) want every
// script to be: the header, then only echo lines of sanitized text, sleep,
// labels, goto, and chain/kernel/initrd/boot lines whose only "${" is one
// of iPXE's UUID and MAC templates. It is how "no injection through echoed
// input" is verified.
func Lint(script string) error {
	lines := strings.Split(script, "\n")
	if len(lines) < 2 || lines[0] != Header || lines[len(lines)-1] != "" {
		return errors.New("script must start with #!ipxe and end with a newline")
	}
	labels := map[string]bool{}
	var gotos []string
	for i, l := range lines[1 : len(lines)-1] {
		n := i + 2
		word, rest, _ := strings.Cut(l, " ")
		switch {
		case word == "echo":
			text, ok := strings.CutPrefix(rest, "anvil: ")
			if !ok {
				return fmt.Errorf("line %d: echo without the anvil: prefix", n)
			}
			if Sanitize(text) != text || len(text) > echoWidth {
				return fmt.Errorf("line %d: echoed text is not sanitized: %q", n, text)
			}
		case word == "sleep":
			if d, err := strconv.Atoi(rest); err != nil || d < 1 {
				return fmt.Errorf("line %d: bad sleep %q", n, rest)
			}
		case strings.HasPrefix(l, ":"):
			if !labelName(l[1:]) {
				return fmt.Errorf("line %d: bad label %q", n, l)
			}
			labels[l[1:]] = true
		case word == "goto":
			gotos = append(gotos, rest)
		case word == "chain" || word == "kernel" || word == "initrd" || word == "boot":
			cmd, target, ok := strings.Cut(l, " || goto ")
			if !ok {
				return fmt.Errorf("line %d: %s without a fallback", n, word)
			}
			gotos = append(gotos, target)
			body := strings.ReplaceAll(strings.ReplaceAll(cmd, UUIDTemplate, ""), MACTemplate, "")
			fields := strings.Fields(body)
			for _, f := range fields[1:] {
				if f == "--replace" || f == "--autofree" {
					continue
				}
				if !urlChars(f) {
					return fmt.Errorf("line %d: argument %q holds characters iPXE would interpret", n, f)
				}
			}
		default:
			return fmt.Errorf("line %d: unexpected command %q", n, word)
		}
	}
	for _, g := range gotos {
		if !labels[g] {
			return fmt.Errorf("goto %q has no label", g)
		}
	}
	return nil
}

func labelName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}
