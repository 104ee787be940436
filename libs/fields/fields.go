// Package fields holds the one rule for each field that several services
// accept: names, hostnames, Kubernetes labels, UUIDs, free text. Every
// service and the gateway check a value with the same function, so a value
// one of them accepts is never refused later by another (a 64-character
// hostname the registry took and the renderer refused blocked every
// rollout of its pool).
//
// Each rule returns an error whose message is a reason for a person
// ("must be at most 63 characters, got 64"); callers attach the field's
// name. The package uses only the standard library, so that services'
// api packages may import it.
package fields

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

var (
	dnsLabelRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	labelNameRe = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

// Limits shared by every service.
const (
	// MaxHostname: a hostname is the node's name and the value of its
	// kubernetes.io/hostname label, which holds at most 63 characters
	// (Linux keeps 64 with the terminator).
	MaxHostname = 63
	// MaxDisplayName is the longest display name, in characters.
	MaxDisplayName = 100
	// MaxReason is the longest reason or message, in bytes.
	MaxReason = 1024
)

// DNSLabel checks an RFC 1123 label: the form of every resource name and
// id (organizations, pools, clusters), which end up in NATS subjects,
// URLs, label values and file names.
func DNSLabel(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > 63:
		return fmt.Errorf("must be at most 63 characters, got %d", len(s))
	case !dnsLabelRe.MatchString(s):
		return errors.New("must consist of lowercase letters, digits and '-', and start and end with a letter or digit (RFC 1123 label)")
	}
	return nil
}

// errOrgID is the one reason every service gives for a bad organization
// id, so that a caller reads the same rule whichever service refused it.
var errOrgID = errors.New("must be an organization id: 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit (an RFC 1123 label)")

// OrgID checks an organization id. It is an RFC 1123 label because it is a
// NATS subject token (events.<org>.…) and appears in URLs and hostnames;
// that also keeps out the platform's own "_platform". The registry creates
// organizations with this rule and every other service checks the org of
// a request with it, so no service refuses an organization that exists.
func OrgID(s string) error {
	if DNSLabel(s) != nil {
		return errOrgID
	}
	return nil
}

// DNSSubdomain checks an RFC 1123 subdomain: dot-separated labels, at
// most 253 characters.
func DNSSubdomain(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > 253 {
		return fmt.Errorf("must be at most 253 characters, got %d", len(s))
	}
	for i, l := range strings.Split(s, ".") {
		if err := DNSLabel(l); err != nil {
			if l == "" {
				return fmt.Errorf("must be lowercase RFC 1123 labels separated by single dots; label %d is empty", i+1)
			}
			return fmt.Errorf("label %d (%q) %v", i+1, l, err)
		}
	}
	return nil
}

// PoolName checks a pool's name: a DNS label, as the registry (which
// assigns machines to pools) and the revisions service (which owns pools)
// both require.
func PoolName(s string) error { return DNSLabel(s) }

// NodeName is the name of a machine's Kubernetes Node: its hostname, or,
// when it has none (a machine that registered itself and was never
// named), its UUID, which is unique in the organization and a valid DNS
// label. The registry shows it, and the boot and rollout services name
// the Node with it, so that it is the same in the Ignition config, the
// Node and the API.
func NodeName(hostname, uuid string) string {
	if hostname != "" {
		return hostname
	}
	return uuid
}

// Hostname checks a machine's hostname: lowercase RFC 1123 (the kubelet
// registers the node under it, and node names are DNS subdomains), at
// most MaxHostname characters (it is also the kubernetes.io/hostname label
// value).
func Hostname(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > MaxHostname {
		return fmt.Errorf("must be at most %d characters, got %d", MaxHostname, len(s))
	}
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			return errors.New("must be lowercase")
		}
	}
	return DNSSubdomain(s)
}

// LabelKey checks a Kubernetes label (or taint) key: an optional DNS
// subdomain prefix and a '/', then a name of at most 63 characters.
func LabelKey(k string) error {
	if k == "" {
		return errors.New("must not be empty")
	}
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if err := DNSSubdomain(prefix); err != nil {
			return fmt.Errorf("prefix %q %v", prefix, err)
		}
	}
	if name == "" {
		return errors.New("name part must not be empty")
	}
	if len(name) > 63 {
		return fmt.Errorf("name part must be at most 63 characters, got %d", len(name))
	}
	if !labelNameRe.MatchString(name) {
		return errors.New("name part must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit")
	}
	return nil
}

// LabelValue checks a Kubernetes label (or taint) value; empty is allowed.
func LabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 {
		return fmt.Errorf("must be at most 63 characters, got %d", len(v))
	}
	if !labelNameRe.MatchString(v) {
		return errors.New("must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit")
	}
	return nil
}

// UUID parses a SMBIOS UUID and returns its canonical form: lowercase,
// 8-4-4-4-12 hex digits. The nil and all-F UUIDs, which firmware reports
// when it has none, are refused.
func UUID(s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("must be a UUID such as 4c4c4544-0035-4b10-8056-b7c04f4e3532 (36 characters), got %d characters", len(s))
	}
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", errors.New("must be a UUID such as 4c4c4544-0035-4b10-8056-b7c04f4e3532 (hyphens at positions 9, 14, 19 and 24)")
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return "", errors.New("must be a UUID such as 4c4c4544-0035-4b10-8056-b7c04f4e3532 (hex digits)")
			}
		}
	}
	u := string(b)
	if u == "00000000-0000-0000-0000-000000000000" || u == "ffffffff-ffff-ffff-ffff-ffffffffffff" {
		return "", errors.New("must not be the nil or all-F UUID (the firmware reports no UUID)")
	}
	return u, nil
}

// CanonicalUUID reports whether s is a UUID already in the form UUID
// returns: a key that names one machine only.
func CanonicalUUID(s string) bool {
	u, err := UUID(s)
	return err == nil && u == s
}

// invisible reports runes that change how text reads without being
// seen: bidirectional overrides and isolates (a name that displays as
// another), zero-width characters, and the BOM.
func invisible(r rune) bool {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return true // bidi embeddings, overrides, isolates and marks
	case r >= 0x200B && r <= 0x200D, r == 0x2060, r == 0xFEFF, r == 0x180E:
		return true // zero-width space, joiners, word joiner, BOM
	}
	return false
}

// DisplayName checks a name shown to people (an organization's, a pool's,
// a token's): valid UTF-8, not blank, at most MaxDisplayName characters,
// no control characters, and no character that changes how it reads
// without being seen (bidi overrides, zero-width characters).
func DisplayName(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	if !utf8.ValidString(s) {
		return errors.New("must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxDisplayName {
		return fmt.Errorf("must be at most %d characters, got %d", MaxDisplayName, n)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("must not contain control characters (found U+%04X)", r)
		}
		if invisible(r) {
			return fmt.Errorf("must not contain invisible or direction-changing characters (found U+%04X)", r)
		}
	}
	return nil
}

// Text checks free text kept in a log (a reason, a message): valid UTF-8,
// at most max bytes, and no control characters but, where multiline, a
// newline or a tab. Escape sequences and carriage returns would rewrite
// what a terminal shows of the log.
func Text(s string, max int, multiline bool) error {
	if !utf8.ValidString(s) {
		return errors.New("must be valid UTF-8")
	}
	if len(s) > max {
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(s))
	}
	for _, r := range s {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if unicode.IsControl(r) {
			if multiline {
				return fmt.Errorf("must not contain control characters other than newline and tab (found U+%04X)", r)
			}
			return fmt.Errorf("must be one line without control characters (found U+%04X)", r)
		}
		if r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 {
			return fmt.Errorf("must not contain direction-changing characters (found U+%04X)", r)
		}
	}
	return nil
}

// Token checks an identifier-like value without spaces (a token name, an
// instance name): valid UTF-8, 1 to max bytes, no spaces, control or
// invisible characters.
func Token(s string, max int) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > max:
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(s))
	case !utf8.ValidString(s):
		return errors.New("must be valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) || invisible(r) {
			return fmt.Errorf("must not contain spaces, control or invisible characters (found U+%04X)", r)
		}
	}
	return nil
}
