package token

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func mustGenerate(t *testing.T, kind Kind) (string, Stored) {
	t.Helper()
	plain, id, hash, err := Generate(kind, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return plain, Stored{ID: id, Kind: kind, Hash: hash}
}

func TestGenerateParseRoundTrip(t *testing.T) {
	for _, kind := range []Kind{KindAPI, KindEnrollment} {
		plain, st := mustGenerate(t, kind)
		if !strings.HasPrefix(plain, "anvil_"+string(kind)+"_"+st.ID+"_") {
			t.Fatalf("token %q does not start with its kind and id", plain)
		}
		k, id, secret, err := Parse(plain)
		if err != nil {
			t.Fatal(err)
		}
		if k != kind || id != st.ID || len(secret) != 32 || HashSecret(secret) != st.Hash {
			t.Fatalf("parse mismatch: %v %v %d", k, id, len(secret))
		}
		if err := ValidID(id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGenerateIsDeterministicGivenRandomness(t *testing.T) {
	src := bytes.Repeat([]byte{7}, 42)
	a, ida, ha, _ := Generate(KindAPI, bytes.NewReader(src))
	b, idb, hb, _ := Generate(KindAPI, bytes.NewReader(src))
	if a != b || ida != idb || ha != hb {
		t.Fatal("same randomness must give the same token")
	}
	if _, _, _, err := Generate(KindAPI, bytes.NewReader(src[:10])); !errs.Is(err, errs.KindInternal) {
		t.Fatalf("short randomness: got %v", err)
	}
	if _, _, _, err := Generate("root", rand.Reader); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("bad kind: got %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	plain, _ := mustGenerate(t, KindAPI)
	parts := strings.Split(plain, "_")
	cases := map[string]string{
		"empty":          "",
		"three parts":    strings.Join(parts[:3], "_"),
		"five parts":     plain + "_x",
		"wrong prefix":   "anvul_" + strings.Join(parts[1:], "_"),
		"unknown kind":   "anvil_root_" + strings.Join(parts[2:], "_"),
		"short id":       "anvil_api_" + parts[2][1:] + "_" + parts[3],
		"uppercase id":   "anvil_api_" + strings.ToUpper(parts[2]) + "_" + parts[3],
		"short secret":   strings.Join(parts[:3], "_") + "_" + parts[3][2:],
		"bad alphabet":   strings.Join(parts[:3], "_") + "_" + "1" + parts[3][1:],
		"noncanonical":   strings.Join(parts[:3], "_") + "_" + parts[3][:51] + "b",
		"padded secret":  plain + "====",
		"secret with sp": plain[:len(plain)-1] + " ",
	}
	for name, in := range cases {
		_, _, _, err := Parse(in)
		e := errs.As(err)
		if e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 1 || e.Fields[0].Field != "token" {
			t.Errorf("%s: want a validation error on token, got %v", name, err)
			continue
		}
		if strings.Contains(e.Error(), parts[3]) {
			t.Errorf("%s: error leaks the secret: %v", name, err)
		}
	}
}

func TestVerify(t *testing.T) {
	plain, st := mustGenerate(t, KindEnrollment)
	other, _ := mustGenerate(t, KindEnrollment)
	api, _ := mustGenerate(t, KindAPI)
	parts := strings.Split(plain, "_")
	otherParts := strings.Split(other, "_")
	wrongSecret := strings.Join(parts[:3], "_") + "_" + otherParts[3]

	expired := st
	expired.ExpiresAt = t0
	revoked := st
	revoked.RevokedAt = t0.Add(-time.Hour)
	revokedAndExpired := expired
	revokedAndExpired.RevokedAt = t0.Add(-time.Hour)
	future := st
	future.ExpiresAt = t0.Add(time.Second)

	cases := []struct {
		name   string
		stored Stored
		in     string
		want   Reason
	}{
		{"valid", st, plain, ""},
		{"valid before expiry", future, plain, ""},
		{"malformed", st, "anvil_enroll_x_y", ReasonMalformed},
		{"wrong kind", st, api, ReasonWrongKind},
		{"other token", st, other, ReasonMismatch},
		{"wrong secret", st, wrongSecret, ReasonMismatch},
		{"expired at the instant", expired, plain, ReasonExpired},
		{"revoked", revoked, plain, ReasonRevoked},
		{"revoked wins over expired", revokedAndExpired, plain, ReasonRevoked},
		{"revoked but wrong secret", revoked, wrongSecret, ReasonMismatch},
		{"zero stored hash", Stored{ID: st.ID, Kind: st.Kind}, plain, ReasonMismatch},
	}
	for _, c := range cases {
		err := Verify(c.stored, c.in, t0)
		if got := ReasonOf(err); got != c.want {
			t.Errorf("%s: reason %q, want %q (err %v)", c.name, got, c.want, err)
		}
		if c.want != "" && !errs.Is(err, errs.KindUnauthorized) {
			t.Errorf("%s: want unauthorized kind, got %v", c.name, errs.KindOf(err))
		}
		if err != nil && strings.Contains(err.Error(), parts[3]) {
			t.Errorf("%s: error leaks the secret", c.name)
		}
	}
	if ReasonOf(errors.New("x")) != "" {
		t.Fatal("foreign errors have no reason")
	}
}

func TestHashJSON(t *testing.T) {
	_, st := mustGenerate(t, KindAPI)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"hash":"`+st.Hash.String()+`"`) {
		t.Fatalf("hash should be hex in JSON: %s", b)
	}
	var back Stored
	if err := json.Unmarshal(b, &back); err != nil || back != st {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	if err := json.Unmarshal([]byte(`{"hash":"abc"}`), &back); err == nil {
		t.Fatal("short hash must not decode")
	}
}

func FuzzParse(f *testing.F) {
	src := bytes.Repeat([]byte{0xa5}, 42)
	plain, _, _, _ := Generate(KindAPI, bytes.NewReader(src))
	for _, s := range []string{plain, "", "anvil", "anvil___", "anvil_api_" + strings.Repeat("a", 16) + "_" + strings.Repeat("a", 52), "anvil_enroll_\x00_\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kind, id, secret, err := Parse(s)
		if err != nil {
			if errs.KindOf(err) != errs.KindValidation {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		// Whatever parses must be the one canonical spelling.
		if got := "anvil_" + string(kind) + "_" + id + "_" + enc.EncodeToString(secret); got != s {
			t.Fatalf("parsed %q but re-encodes as %q", s, got)
		}
		_ = Verify(Stored{ID: id, Kind: kind, Hash: HashSecret(secret)}, s, t0)
	})
}
