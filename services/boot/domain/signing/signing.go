// Package signing makes and checks the boot service's two stateless
// secrets, both HMAC-SHA256 under keys from the configuration:
//
//   - the per-boot token, which /ipxe puts into the Ignition URL on the
//     kernel command line, and /ignition checks. It binds the
//     organization, the machine's UUID, the pool, the pool revision, an
//     expiry and the time it was issued:
//     pb2.<base64url(org|uuid|pool|revision|expiry-unix|issued-unix-ms)>.<base64url(HMAC)>
//   - the agent credential, which /ignition writes into the machine's
//     agent.env and the agent API checks. It binds the organization, the
//     UUID, the machine revision the machine was served (so it changes
//     with every new revision) and the time it was issued:
//     ac2_<org>_<machine revision id>_<issued-unix-ms, base 36>_<base64url(HMAC[:18])>
//
// The issue time is what revocation works on: when a machine is deleted,
// unassigned or registers again, everything issued to it before then is
// refused (see record.Revocation). Without it, a machine's credential for
// a machine revision would be the same string in every life of the
// machine. The versions before (pb1, ac1) carry no issue time; they still
// verify, and the caller decides (they are refused once anything was
// revoked for the machine).
//
// Both are made of characters that need no quoting in a URL, a kernel
// command line, an iPXE script, a data URL or JSON, and the credential
// matches the renderer's credential pattern [A-Za-z0-9_-]{20,128}. Each
// has its own key derived from the configured key, so neither can stand in
// for the other. Several keys may be configured: the first signs, all
// verify, which lets a key be rotated without invalidating what is out.
// The package is pure: the time is an argument.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MinKeyBytes is the least key length accepted.
const MinKeyBytes = 32

// Keys holds the signing keys; the first signs.
type Keys struct {
	boot  [][]byte // derived per-boot token keys
	agent [][]byte // derived agent credential keys
}

// NewKeys derives the keys from raw key material (each at least
// MinKeyBytes long).
func NewKeys(raw ...[]byte) (Keys, error) {
	if len(raw) == 0 {
		return Keys{}, errors.New("no signing key")
	}
	var k Keys
	for i, r := range raw {
		if len(r) < MinKeyBytes {
			return Keys{}, fmt.Errorf("signing key %d is %d bytes; at least %d are needed", i+1, len(r), MinKeyBytes)
		}
		k.boot = append(k.boot, derive(r, "anvil/boot/per-boot-token/v1"))
		k.agent = append(k.agent, derive(r, "anvil/boot/agent-credential/v1"))
	}
	return k, nil
}

// ParseKeys reads comma-separated base64 keys (standard or URL alphabet,
// padded or not). Errors name the key's position, never its material.
func ParseKeys(s string) (Keys, error) {
	var raw [][]byte
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		b, err := decodeBase64(part)
		if err != nil {
			return Keys{}, fmt.Errorf("signing key %d is not base64", i+1)
		}
		raw = append(raw, b)
	}
	return NewKeys(raw...)
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawURLEncoding.DecodeString(s)
}

func derive(key []byte, purpose string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

func mac(key []byte, parts ...string) []byte {
	pool := macPool(key)
	st := pool.Get().(*macState)
	st.buf = st.buf[:0]
	for _, p := range parts {
		st.buf = appendPart(st.buf, p)
	}
	sum := st.sum(nil)
	pool.Put(st)
	return sum
}

// appendPart appends one part to what is hashed, length-prefixed, so that
// no two different part lists collide ("<len>:<part>;").
func appendPart[T string | []byte](buf []byte, p T) []byte {
	buf = strconv.AppendInt(buf, int64(len(p)), 10)
	buf = append(buf, ':')
	buf = append(buf, p...)
	return append(buf, ';')
}

// sum appends the HMAC of what st.buf holds to dst, hashed in one write.
func (st *macState) sum(dst []byte) []byte {
	st.h.Reset()
	st.h.Write(st.buf)
	return st.h.Sum(dst)
}

// appendMAC appends mac(key, prefix, string(payload)) to dst without
// copying payload into a string.
func appendMAC(dst, key []byte, prefix string, payload []byte) []byte {
	pool := macPool(key)
	st := pool.Get().(*macState)
	st.buf = appendPart(appendPart(st.buf[:0], prefix), payload)
	// Summed into the state's buffer: dst, given to the hash, would escape.
	st.out = st.sum(st.out[:0])
	dst = append(dst, st.out...)
	pool.Put(st)
	return dst
}

// macPools keeps keyed HMAC states per key (by the address of its first
// byte: derived keys are never modified): every /ipxe signs a token, and
// keying an HMAC costs more than what it then hashes.
var macPools sync.Map // *byte -> *sync.Pool of *macState

type macState struct {
	h   hash.Hash
	buf []byte
	out []byte
}

func macPool(key []byte) *sync.Pool {
	if p, ok := macPools.Load(&key[0]); ok {
		return p.(*sync.Pool)
	}
	p, _ := macPools.LoadOrStore(&key[0], &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key)} }})
	return p.(*sync.Pool)
}

var b64 = base64.RawURLEncoding.Strict()

// ---- per-boot token ----

// BootClaims is what a per-boot token binds.
type BootClaims struct {
	Org      string
	UUID     string
	Pool     string
	Revision uint64 // pool revision number
	Expires  time.Time
	// Issued is when the token was issued, to the millisecond; zero for a
	// token of the version before (pb1), which carries none.
	Issued time.Time
}

// Refusal reasons of the verifiers, for logs and metrics.
const (
	ReasonMalformed = "malformed"
	ReasonSignature = "bad_signature"
	ReasonExpired   = "expired"
	ReasonMachine   = "other_machine"
)

// Error is a refused token or credential. The reason is safe to log.
type Error struct {
	Reason string
	Detail string
}

func (e *Error) Error() string { return e.Detail }

func refuse(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the reason of a refusal, or "".
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

const (
	bootPrefix       = "pb2"
	legacyBootPrefix = "pb1" // no issue time; verified, never issued
)

// SignBoot makes a per-boot token. Org and pool are RFC 1123 labels and
// the UUID canonical, so none holds the '|' separator. Issued is kept to
// the millisecond (a zero Issued is taken as the start of 1970).
func (k Keys) SignBoot(c BootClaims) string {
	var tb [512]byte
	return string(k.AppendBoot(tb[:0], c))
}

// AppendBoot appends SignBoot(c) to dst: every /ipxe that boots signs
// one, built in place.
func (k Keys) AppendBoot(dst []byte, c BootClaims) []byte {
	var pb [256]byte
	payload := append(pb[:0], c.Org...)
	payload = append(append(payload, '|'), c.UUID...)
	payload = append(append(payload, '|'), c.Pool...)
	payload = strconv.AppendUint(append(payload, '|'), c.Revision, 10)
	payload = strconv.AppendInt(append(payload, '|'), c.Expires.Unix(), 10)
	payload = strconv.AppendInt(append(payload, '|'), max(c.Issued.UnixMilli(), 1), 10)
	var sb [sha256.Size]byte
	sig := appendMAC(sb[:0], k.boot[0], bootPrefix, payload)
	dst = append(dst, bootPrefix+"."...)
	dst = append(b64.AppendEncode(dst, payload), '.')
	return b64.AppendEncode(dst, sig)
}

// VerifyBoot checks a per-boot token presented for machine uuid at now.
func (k Keys) VerifyBoot(token, uuid string, now time.Time) (BootClaims, error) {
	if len(token) > 512 {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is too long")
	}
	// The base64 decoder skips line breaks: without this, one token would
	// have many spellings.
	if !urlSafe(token, true) {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != bootPrefix && parts[0] != legacyBootPrefix {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
	}
	fields := 6
	if parts[0] == legacyBootPrefix {
		fields = 5
	}
	payload, err1 := b64.DecodeString(parts[1])
	sig, err2 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(sig) != sha256.Size {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
	}
	ok := false
	for _, key := range k.boot {
		if hmac.Equal(sig, mac(key, parts[0], string(payload))) {
			ok = true
		}
	}
	if !ok {
		return BootClaims{}, refuse(ReasonSignature, "the per-boot token was not issued by this boot service")
	}
	f := strings.Split(string(payload), "|")
	if len(f) != fields {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
	}
	rev, err1 := strconv.ParseUint(f[3], 10, 64)
	exp, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil {
		return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
	}
	c := BootClaims{Org: f[0], UUID: f[1], Pool: f[2], Revision: rev, Expires: time.Unix(exp, 0).UTC()}
	if fields == 6 {
		ms, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil || ms <= 0 {
			return BootClaims{}, refuse(ReasonMalformed, "the per-boot token is malformed")
		}
		c.Issued = time.UnixMilli(ms).UTC()
	}
	if c.UUID != uuid {
		return BootClaims{}, refuse(ReasonMachine, "the per-boot token was issued to another machine")
	}
	if !now.Before(c.Expires) {
		return BootClaims{}, refuse(ReasonExpired, "the per-boot token expired at %s; boot the machine again to get a new one", c.Expires.Format(time.RFC3339))
	}
	return c, nil
}

// ---- agent credential ----

const (
	credPrefix       = "ac2"
	credMACLen       = 18 // bytes of HMAC kept: 144 bits, so that the issue time fits in 128 characters
	legacyCredPrefix = "ac1"
	legacyCredMACLen = 24
	// MaxCredentialLen is the longest credential: the renderer's pattern
	// allows 128 characters.
	MaxCredentialLen = 128
)

// Credential is what an agent credential binds besides the UUID.
type Credential struct {
	Org               string
	MachineRevisionID string
	// Issued is when it was issued, to the millisecond; zero for a
	// credential of the version before (ac1), which carries none.
	Issued time.Time
}

// Legacy reports whether the credential is of the version without an
// issue time.
func (c Credential) Legacy() bool { return c.Issued.IsZero() }

// SignCredential makes the agent credential of machine uuid of org booted
// with machine revision mrid at issued (kept to the millisecond). Org is
// an RFC 1123 label of at most 63 characters and mrid "mr-" and 20 hex
// digits, so the credential is at most 125 characters until the year 2059
// (the issue time grows by one character then).
func (k Keys) SignCredential(org, uuid, mrid string, issued time.Time) string {
	at := strconv.FormatInt(max(issued.UnixMilli(), 1), 36)
	sig := mac(k.agent[0], credPrefix, org, uuid, mrid, at)[:credMACLen]
	return credPrefix + "_" + org + "_" + mrid + "_" + at + "_" + b64.EncodeToString(sig)
}

// VerifyCredential checks a credential presented for machine uuid.
func (k Keys) VerifyCredential(cred, uuid string) (Credential, error) {
	p, err := ParseCredential(cred)
	if err != nil {
		return Credential{}, err
	}
	parts := []string{p.Version, p.Org, uuid, p.MachineRevisionID}
	if p.Version == credPrefix {
		parts = append(parts, p.issued)
	}
	ok := false
	for _, key := range k.agent {
		if hmac.Equal(p.Signature, mac(key, parts...)[:len(p.Signature)]) {
			ok = true
		}
	}
	if !ok {
		// A credential of another machine fails here too: the UUID is
		// part of what is signed.
		return Credential{}, refuse(ReasonSignature, "the agent credential is not valid for this machine")
	}
	return p.Credential, nil
}

// ParsedCredential is a credential split into its parts, its signature not
// checked.
type ParsedCredential struct {
	Credential
	Version   string // "ac2", or "ac1" (no issue time)
	Signature []byte
	issued    string // the issue time as written
}

// String writes the credential back; a parsed credential gives the string
// it was parsed from.
func (p ParsedCredential) String() string {
	s := p.Version + "_" + p.Org + "_" + p.MachineRevisionID + "_"
	if p.Version == credPrefix {
		s += p.issued + "_"
	}
	return s + b64.EncodeToString(p.Signature)
}

// ParseCredential splits a credential into its parts without checking the
// signature. Every part must be in its one canonical form, so that a
// credential has exactly one spelling.
func ParseCredential(cred string) (ParsedCredential, error) {
	bad := refuse(ReasonMalformed, "the agent credential is malformed")
	if len(cred) > MaxCredentialLen || !urlSafe(cred, false) {
		return ParsedCredential{}, bad
	}
	version, rest, _ := strings.Cut(cred, "_")
	n, macLen := 5, credMACLen
	switch version {
	case credPrefix:
	case legacyCredPrefix:
		n, macLen = 4, legacyCredMACLen
	default:
		return ParsedCredential{}, bad
	}
	// The signature is base64url, which may hold '_': split off the
	// fixed parts from the left and leave it whole.
	parts := strings.SplitN(rest, "_", n-1)
	if len(parts) != n-1 || !orgID(parts[0]) || !MachineRevisionID(parts[1]) {
		return ParsedCredential{}, bad
	}
	p := ParsedCredential{Version: version, Credential: Credential{Org: parts[0], MachineRevisionID: parts[1]}}
	if version == credPrefix {
		ms, err := strconv.ParseInt(parts[2], 36, 64)
		if err != nil || ms <= 0 || strconv.FormatInt(ms, 36) != parts[2] {
			return ParsedCredential{}, bad
		}
		p.issued, p.Issued = parts[2], time.UnixMilli(ms).UTC()
	}
	sig, err := b64.DecodeString(parts[n-2])
	if err != nil || len(sig) != macLen {
		return ParsedCredential{}, bad
	}
	p.Signature = sig
	return p, nil
}

// urlSafe reports whether s holds only [A-Za-z0-9_-] (and '.' if dots).
func urlSafe(s string, dots bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || dots && c == '.') {
			return false
		}
	}
	return true
}

// orgID accepts an RFC 1123 label of at most 63 characters.
func orgID(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// MachineRevisionID reports whether s is a machine revision id: "mr-" and
// 20 lowercase hex digits.
func MachineRevisionID(s string) bool {
	if len(s) != 23 || !strings.HasPrefix(s, "mr-") {
		return false
	}
	for i := 3; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
