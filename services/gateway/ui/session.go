package ui

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SessionBucket is the JetStream key-value bucket of console sessions.
// Keys are the SHA-256 of session ids; values hold the API token sealed
// under a key derived from the session id, so the bucket alone can be read
// without learning a token or a session id. Its TTL is the session
// lifetime, so JetStream forgets expired sessions by itself.
const SessionBucket = "anvil_console_sessions"

// sessionCookie is the cookie that carries the session id.
const sessionCookie = "anvil_session"

// session is a signed-in user: the token (opened for this request only),
// what the console learned about it at sign-in, and the CSRF token of
// its forms.
type session struct {
	token string
	// Org is the organization the token belongs to; empty for the
	// bootstrap admin, who may open any.
	Org string
	// Role decides which buttons exist (the API refuses writes anyway).
	Role      string
	CSRF      string
	ExpiresAt time.Time
	key       string // the bucket key
}

// stored is a session as the bucket keeps it.
type stored struct {
	Sealed    string    `json:"sealed"` // base64 nonce|ciphertext of the token
	Org       string    `json:"org,omitempty"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

type sessionStore struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

func newSessionStore(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*sessionStore, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SessionBucket, Description: "web console sessions (tokens sealed under a key only the browser's cookie holds)",
		TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ui: the session bucket %s: %w", SessionBucket, err)
	}
	return &sessionStore{kv: kv, ttl: ttl}, nil
}

// errNoSession means the cookie names no live session.
var errNoSession = errors.New("no such session")

// create stores a new session for token and returns its id (the cookie's
// value) and the session.
func (s *sessionStore) create(ctx context.Context, token, org, role string, now time.Time) (string, *session, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	sealed, err := seal(id, token)
	if err != nil {
		return "", nil, err
	}
	st := stored{Sealed: sealed, Org: org, Role: role, CreatedAt: now.UTC(), ExpiresAt: now.Add(s.ttl).UTC()}
	b, err := json.Marshal(st)
	if err != nil {
		return "", nil, err
	}
	key := bucketKey(id)
	if _, err := s.kv.Create(ctx, key, b); err != nil {
		return "", nil, fmt.Errorf("storing the session: %w", err)
	}
	return id, &session{token: token, Org: org, Role: role, CSRF: csrfToken(id), ExpiresAt: st.ExpiresAt, key: key}, nil
}

// get opens the session whose id the cookie carries.
func (s *sessionStore) get(ctx context.Context, id string, now time.Time) (*session, error) {
	if len(id) != 43 { // 32 bytes, base64url without padding
		return nil, errNoSession
	}
	key := bucketKey(id)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("reading the session: %w", err)
	}
	var st stored
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return nil, errNoSession
	}
	if !now.Before(st.ExpiresAt) {
		_ = s.kv.Delete(ctx, key)
		return nil, errNoSession
	}
	token, err := open(id, st.Sealed)
	if err != nil {
		return nil, errNoSession
	}
	return &session{token: token, Org: st.Org, Role: st.Role, CSRF: csrfToken(id), ExpiresAt: st.ExpiresAt, key: key}, nil
}

// end forgets a session: its cookie opens nothing any more.
func (s *sessionStore) end(ctx context.Context, sess *session) error {
	return s.kv.Purge(ctx, sess.key)
}

// bucketKey is the hex SHA-256 of a session id.
func bucketKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// sealKey derives the AES-256 key that seals a session's token from the
// session id (which only the browser keeps).
func sealKey(id string) ([]byte, error) {
	return hkdf.Key(sha256.New, []byte(id), nil, "anvil console session token", 32)
}

func seal(id, token string) (string, error) {
	key, err := sealKey(id)
	if err != nil {
		return "", err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(gcm.Seal(nonce, nonce, []byte(token), nil)), nil
}

func open(id, sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return "", err
	}
	key, err := sealKey(id)
	if err != nil {
		return "", err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return "", err
	}
	if len(b) < gcm.NonceSize() {
		return "", errors.New("sealed token too short")
	}
	out, err := gcm.Open(nil, b[:gcm.NonceSize()], b[gcm.NonceSize():], nil)
	return string(out), err
}

// csrfToken is the CSRF token of a session's forms: an HMAC of the session
// id, which a page of another site can neither read nor compute.
func csrfToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("anvil console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
