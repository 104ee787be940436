// Package secret keeps credentials out of events and logs: a Secret value
// that never prints itself, and AES-256-GCM sealing with keys from the
// service's configuration so that only ciphertext reaches the event log.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
)

const redacted = "[redacted]"

// Secret is a plaintext credential. Every way of printing it (fmt verbs,
// slog) shows "[redacted]"; Reveal returns the value. It still marshals to
// JSON as its value so that a command can carry it to this service, but
// no event type here has a Secret field.
type Secret string

func (s Secret) Reveal() string             { return string(s) }
func (s Secret) String() string             { return redacted }
func (s Secret) GoString() string           { return redacted }
func (s Secret) LogValue() slog.Value       { return slog.StringValue(redacted) }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// Key is an AES-256 key with an id, so that a sealed value names the key it
// needs and keys can be rotated (keep the old key configured for opening).
type Key struct {
	id  string
	raw [32]byte
}

var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// NewKey checks and builds a key from 32 raw bytes.
func NewKey(id string, raw []byte) (Key, error) {
	if !keyIDRe.MatchString(id) {
		return Key{}, errors.New("secret: key id must be 1-64 characters of [A-Za-z0-9_.-]")
	}
	if len(raw) != 32 {
		return Key{}, fmt.Errorf("secret: key must be 32 bytes (AES-256), got %d", len(raw))
	}
	k := Key{id: id}
	copy(k.raw[:], raw)
	return k, nil
}

// ParseKey reads a key written as "<id>:<base64 of 32 bytes>", the form the
// service configuration uses.
func ParseKey(s string) (Key, error) {
	id, b64, ok := strings.Cut(s, ":")
	if !ok {
		return Key{}, errors.New(`secret: key must have the form "<id>:<base64>"`)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return Key{}, errors.New("secret: key is not valid base64")
	}
	return NewKey(id, raw)
}

func (k Key) ID() string                 { return k.id }
func (k Key) String() string             { return "secret.Key(" + k.id + ")" }
func (k Key) GoString() string           { return k.String() }
func (k Key) LogValue() slog.Value       { return slog.StringValue(k.String()) }
func (k Key) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }
func (k Key) valid() bool                { return k.id != "" }

// Sealed is what events carry: the id of the key, the nonce and the
// AES-256-GCM ciphertext (with its tag).
type Sealed struct {
	KeyID      string `json:"key_id"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

// IsZero reports whether nothing was sealed.
func (s Sealed) IsZero() bool { return s.KeyID == "" && len(s.Ciphertext) == 0 }

// Seal encrypts plaintext with key. The 12-byte nonce is read from nonces
// (crypto/rand.Reader in production; a fixed reader in tests). aad binds the
// ciphertext to its purpose (e.g. "cluster/prod/kubeconfig"): opening it
// under any other aad fails, so ciphertext cannot be moved between fields.
func Seal(key Key, nonces io.Reader, plaintext []byte, aad string) (Sealed, error) {
	if !key.valid() {
		return Sealed{}, errors.New("secret: no key configured")
	}
	if nonces == nil {
		return Sealed{}, errors.New("secret: no nonce source")
	}
	aead, err := newGCM(key)
	if err != nil {
		return Sealed{}, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := io.ReadFull(nonces, nonce); err != nil {
		return Sealed{}, fmt.Errorf("secret: reading nonce: %w", err)
	}
	return Sealed{
		KeyID:      key.id,
		Nonce:      nonce,
		Ciphertext: aead.Seal(nil, nonce, plaintext, []byte(aad)),
	}, nil
}

// Open decrypts s with whichever of keys has its id.
func Open(s Sealed, aad string, keys ...Key) ([]byte, error) {
	for _, k := range keys {
		if k.valid() && k.id == s.KeyID {
			aead, err := newGCM(k)
			if err != nil {
				return nil, err
			}
			if len(s.Nonce) != aead.NonceSize() {
				return nil, errors.New("secret: sealed value has a bad nonce")
			}
			out, err := aead.Open(nil, s.Nonce, s.Ciphertext, []byte(aad))
			if err != nil {
				return nil, errors.New("secret: cannot open sealed value (wrong key, wrong purpose, or tampered)")
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("secret: key %q is not configured", s.KeyID)
}

func newGCM(k Key) (cipher.AEAD, error) {
	block, err := aes.NewCipher(k.raw[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
