package secret

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func testKey(t *testing.T, id string, fill byte) Key {
	t.Helper()
	k, err := NewKey(id, bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k1, k2 := testKey(t, "k1", 1), testKey(t, "k2", 2)
	plain := []byte("apiVersion: v1\nkind: Config\n")
	s, err := Seal(k1, rand.Reader, plain, "anvil/cluster/a/kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != "k1" || len(s.Nonce) != 12 || bytes.Contains(s.Ciphertext, plain) {
		t.Fatalf("sealed = %+v", s)
	}
	got, err := Open(s, "anvil/cluster/a/kubeconfig", k2, k1)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open = %q, %v", got, err)
	}
	if _, err := Open(s, "anvil/cluster/b/kubeconfig", k1); err == nil {
		t.Fatal("opened under another purpose")
	}
	if _, err := Open(s, "anvil/cluster/a/kubeconfig", k2); err == nil {
		t.Fatal("opened without its key")
	}
	k1other := testKey(t, "k1", 9)
	if _, err := Open(s, "anvil/cluster/a/kubeconfig", k1other); err == nil {
		t.Fatal("opened with a different key under the same id")
	}
	tampered := s
	tampered.Ciphertext = bytes.Clone(s.Ciphertext)
	tampered.Ciphertext[0] ^= 1
	if _, err := Open(tampered, "anvil/cluster/a/kubeconfig", k1); err == nil {
		t.Fatal("opened tampered ciphertext")
	}
	// The nonce comes from the given source.
	fixed := bytes.NewReader(bytes.Repeat([]byte{7}, 12))
	s2, err := Seal(k1, fixed, plain, "x")
	if err != nil || !bytes.Equal(s2.Nonce, bytes.Repeat([]byte{7}, 12)) {
		t.Fatalf("nonce = %x, %v", s2.Nonce, err)
	}
	if _, err := Seal(k1, bytes.NewReader(nil), plain, "x"); err == nil {
		t.Fatal("sealed without a nonce")
	}
	if _, err := Seal(Key{}, rand.Reader, plain, "x"); err == nil {
		t.Fatal("sealed with the zero key")
	}
}

func TestKeys(t *testing.T) {
	raw := bytes.Repeat([]byte{3}, 32)
	k, err := ParseKey("2025-06:" + base64.StdEncoding.EncodeToString(raw))
	if err != nil || k.ID() != "2025-06" {
		t.Fatalf("ParseKey = %v, %v", k, err)
	}
	for _, bad := range []string{"nokey", "id:!!!", "id:" + base64.StdEncoding.EncodeToString(raw[:16]), ":" + base64.StdEncoding.EncodeToString(raw)} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v %s", k, k, k, k); strings.Contains(s, "AwMD") || strings.Contains(s, "[3 3") {
		t.Fatalf("key printed its bytes: %s", s)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("abcdef.0123456789abcdef")
	type holder struct{ Token Secret }
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "token", s, "holder", holder{s})
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v|%+v|%#v|%s|%q|%x", s, s, s, s, s, s),
		fmt.Sprintf("%v %+v", holder{s}, holder{s}), buf.String(),
	} {
		if strings.Contains(out, "0123456789") || strings.Contains(out, "abcdef.") {
			t.Fatalf("secret printed: %s", out)
		}
	}
	if s.Reveal() != "abcdef.0123456789abcdef" {
		t.Fatal("Reveal")
	}
	// Commands carry it as JSON to this service; events never hold one.
	b, _ := json.Marshal(holder{s})
	if !strings.Contains(string(b), "0123456789") {
		t.Fatal("command JSON lost the value")
	}
}
