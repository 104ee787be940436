// Package token generates, parses and verifies anvil's bearer tokens: API
// tokens for people and tools, and enrollment tokens that machines present
// when they self-register.
//
// A token reads anvil_<kind>_<id>_<secret>. The id is public and is how a
// token is looked up; the secret is shown once at creation and only its
// SHA-256 is stored. Both are lowercase base32 so that the token survives
// copy and paste, URLs and kernel command lines without quoting.
package token

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Kind says what a token is for.
type Kind string

const (
	KindAPI        Kind = "api"    // an operator's or a tool's API credential
	KindEnrollment Kind = "enroll" // lets machines self-register into an organization
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindAPI || k == KindEnrollment }

const (
	prefix      = "anvil"
	idBytes     = 10 // 80 bits: unique without coordination, short enough to show in a list
	secretBytes = 32 // 256 bits of entropy
)

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

var (
	idLen     = enc.EncodedLen(idBytes)
	secretLen = enc.EncodedLen(secretBytes)
)

// Hash is the SHA-256 of a token's secret. Plain SHA-256 without salt or a
// slow KDF is appropriate here because secrets are 256-bit random values:
// there is no dictionary to attack, and salting adds nothing when every input
// is already unique. It is what events and state store; never the secret.
type Hash [32]byte

// HashSecret hashes a decoded secret.
func HashSecret(secret []byte) Hash { return sha256.Sum256(secret) }

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h was never set.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText writes the hash as hex so events stay readable JSON.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText reads the hex form written by MarshalText.
func (h *Hash) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(h) {
		return fmt.Errorf("token hash must be %d hex characters, got %d", 2*len(h), len(b))
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// Generate makes a new token of the given kind from rand (crypto/rand.Reader
// in production). It returns the plaintext to show once, the public id and
// the hash to store.
func Generate(kind Kind, rand io.Reader) (plaintext, id string, hash Hash, err error) {
	if !kind.Valid() {
		return "", "", Hash{}, errs.Invalid("kind", "must be %q or %q", KindAPI, KindEnrollment)
	}
	var buf [idBytes + secretBytes]byte
	if _, err := io.ReadFull(rand, buf[:]); err != nil {
		return "", "", Hash{}, errs.Internal("reading randomness for a token: %v", err)
	}
	id = enc.EncodeToString(buf[:idBytes])
	secret := buf[idBytes:]
	plaintext = prefix + "_" + string(kind) + "_" + id + "_" + enc.EncodeToString(secret)
	return plaintext, id, HashSecret(secret), nil
}

// ValidID checks the form of a token id (as found in commands and URLs).
func ValidID(id string) error {
	if _, err := decode(id, idLen, idBytes); err != nil {
		return fmt.Errorf("token id %w", err)
	}
	return nil
}

// Parse splits a presented token into its parts. Errors never quote the
// token, because it may be a real secret with a typo in it.
func Parse(plaintext string) (kind Kind, id string, secret []byte, err error) {
	invalid := func(format string, args ...any) error { return errs.Invalid("token", format, args...) }
	parts := strings.Split(plaintext, "_")
	if len(parts) != 4 {
		return "", "", nil, invalid("must have the form anvil_<kind>_<id>_<secret> (4 parts separated by '_', got %d)", len(parts))
	}
	if parts[0] != prefix {
		return "", "", nil, invalid("must start with %q", prefix+"_")
	}
	kind = Kind(parts[1])
	if !kind.Valid() {
		return "", "", nil, invalid("kind must be %q or %q", KindAPI, KindEnrollment)
	}
	if _, err := decode(parts[2], idLen, idBytes); err != nil {
		return "", "", nil, invalid("id %v", err)
	}
	secret, err = decode(parts[3], secretLen, secretBytes)
	if err != nil {
		return "", "", nil, invalid("secret %v", err)
	}
	return kind, parts[2], secret, nil
}

// decode insists on the one canonical encoding, so a token has exactly one
// spelling.
func decode(s string, wantLen, wantBytes int) ([]byte, error) {
	if len(s) != wantLen {
		return nil, fmt.Errorf("must be %d characters, got %d", wantLen, len(s))
	}
	b, err := enc.DecodeString(s)
	if err != nil || len(b) != wantBytes || enc.EncodeToString(b) != s {
		return nil, errors.New("must be lowercase base32 (a-z, 2-7)")
	}
	return b, nil
}

// Stored is what the organization keeps about a token.
type Stored struct {
	ID        string    `json:"id"`
	Kind      Kind      `json:"kind"`
	Hash      Hash      `json:"hash"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // zero: never
	RevokedAt time.Time `json:"revoked_at,omitzero"` // zero: not revoked
}

// Reason says why Verify refused a token, for logs and metrics; the caller
// should not tell a client more than "unauthorized".
type Reason string

const (
	ReasonMalformed Reason = "malformed"
	ReasonWrongKind Reason = "wrong_kind"
	ReasonMismatch  Reason = "mismatch" // wrong id or wrong secret
	ReasonRevoked   Reason = "revoked"
	ReasonExpired   Reason = "expired"
)

// Rejected is the error Verify returns. It unwraps to an errs.Error of kind
// unauthorized, so errs.KindOf works on it.
type Rejected struct {
	Reason Reason
	Err    *errs.Error
}

func (r *Rejected) Error() string { return r.Err.Error() }
func (r *Rejected) Unwrap() error { return r.Err }

// ReasonOf returns the reason of a Verify error, or "" for anything else.
func ReasonOf(err error) Reason {
	var r *Rejected
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func reject(reason Reason, format string, args ...any) error {
	return &Rejected{Reason: reason, Err: errs.Unauthorized(format, args...)}
}

// Verify checks a presented token against the stored one. The secret is
// checked before revocation and expiry so that only the holder of the
// secret learns that a token id was revoked or has expired.
func Verify(stored Stored, presented string, now time.Time) error {
	kind, id, secret, err := Parse(presented)
	if err != nil {
		return reject(ReasonMalformed, "malformed token: %s", errs.As(err).Fields[0].Reason)
	}
	if kind != stored.Kind {
		return reject(ReasonWrongKind, "a %s token was presented where a %s token is required", kind, stored.Kind)
	}
	h := HashSecret(secret)
	// Compare ids in constant time too, so timing says nothing about which
	// part was wrong.
	idOK := subtle.ConstantTimeCompare([]byte(id), []byte(stored.ID))
	hashOK := subtle.ConstantTimeCompare(h[:], stored.Hash[:])
	if idOK&hashOK != 1 || stored.Hash.IsZero() {
		return reject(ReasonMismatch, "token does not match")
	}
	if !stored.RevokedAt.IsZero() {
		return reject(ReasonRevoked, "token %s was revoked at %s", id, stored.RevokedAt.UTC().Format(time.RFC3339))
	}
	if !stored.ExpiresAt.IsZero() && !now.Before(stored.ExpiresAt) {
		return reject(ReasonExpired, "token %s expired at %s", id, stored.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}
