package check

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"math/big"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name  string
		fn    func(string) error
		in    string
		valid bool
	}{
		{"label ok", DNSLabel, "prod-eu-1", true},
		{"label digit start", DNSLabel, "1prod", true},
		{"label empty", DNSLabel, "", false},
		{"label upper", DNSLabel, "Prod", false},
		{"label dash end", DNSLabel, "prod-", false},
		{"label dot", DNSLabel, "a.b", false},
		{"label 63", DNSLabel, strings.Repeat("a", 63), true},
		{"label 64", DNSLabel, strings.Repeat("a", 64), false},
		{"host simple", Hostname, "node-1", true},
		{"host fqdn", Hostname, "node-1.rack12.dc1.example", true},
		{"host upper", Hostname, "Node-1", false},
		{"host underscore", Hostname, "node_1", false},
		{"host empty label", Hostname, "node..x", false},
		{"host trailing dot", Hostname, "node.", false},
		{"host 63", Hostname, strings.Repeat("a", 30) + "." + strings.Repeat("b", 32), true},
		{"host 64", Hostname, strings.Repeat("a", 31) + "." + strings.Repeat("b", 32), false},
		{"host space", Hostname, "node 1", false},
		{"host newline", Hostname, "node\n1", false},
		{"key plain", LabelKey, "rack", true},
		{"key prefixed", LabelKey, "anvil.dev/rack", true},
		{"key dots", LabelKey, "a.b_c-d", true},
		{"key empty", LabelKey, "", false},
		{"key empty name", LabelKey, "anvil.dev/", false},
		{"key bad prefix", LabelKey, "Anvil.dev/rack", false},
		{"key two slashes", LabelKey, "a/b/c", false},
		{"key long name", LabelKey, strings.Repeat("a", 64), false},
		{"key bad end", LabelKey, "rack-", false},
		{"value empty", LabelValue, "", true},
		{"value ok", LabelValue, "R12_a.b-c", true},
		{"value space", LabelValue, "r 12", false},
		{"value long", LabelValue, strings.Repeat("a", 64), false},
		{"value comma", LabelValue, "a,b", false},
		{"value equals", LabelValue, "a=b", false},
		{"node label ok", NodeLabelKey, "anvil.dev/role", true},
		{"node label node.k8s.io", NodeLabelKey, "node.kubernetes.io/pool", true},
		{"node label kubelet ns", NodeLabelKey, "kubelet.kubernetes.io/x", true},
		{"node label topology", NodeLabelKey, "topology.kubernetes.io/zone", true},
		{"node label role refused", NodeLabelKey, "node-role.kubernetes.io/worker", false},
		{"node label k8s.io refused", NodeLabelKey, "k8s.io/x", false},
		{"node label sub k8s.io refused", NodeLabelKey, "foo.k8s.io/x", false},
		{"display ok", DisplayName, "Storage nodes (rack 12) ✓", true},
		{"display blank", DisplayName, "   ", false},
		{"display control", DisplayName, "a\x07b", false},
		{"display long", DisplayName, strings.Repeat("é", 101), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fn(tt.in)
			if (err == nil) != tt.valid {
				t.Fatalf("%q: valid=%v, err=%v", tt.in, tt.valid, err)
			}
		})
	}
}

// wire builds an SSH wire-format blob from strings.
func wire(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestSSHAuthorizedKey(t *testing.T) {
	edPub := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	ed := "ssh-ed25519 " + b64(wire([]byte("ssh-ed25519"), edPub))
	p256, _ := ecdh.P256().NewPrivateKey(append(make([]byte, 31), 1))
	ec := "ecdsa-sha2-nistp256 " + b64(wire([]byte("ecdsa-sha2-nistp256"), []byte("nistp256"), p256.PublicKey().Bytes()))
	ecWrongCurve := "ecdsa-sha2-nistp256 " + b64(wire([]byte("ecdsa-sha2-nistp256"), []byte("nistp384"), p256.PublicKey().Bytes()))
	mod := new(big.Int).Lsh(big.NewInt(1), 2047)
	mod.Add(mod, big.NewInt(12345))
	rsa := "ssh-rsa " + b64(wire([]byte("ssh-rsa"), []byte{1, 0, 1}, append([]byte{0}, mod.Bytes()...)))
	small := new(big.Int).Lsh(big.NewInt(1), 1023)
	rsaSmall := "ssh-rsa " + b64(wire([]byte("ssh-rsa"), []byte{1, 0, 1}, append([]byte{0}, small.Bytes()...)))
	sk := "sk-ssh-ed25519@openssh.com " + b64(wire([]byte("sk-ssh-ed25519@openssh.com"), edPub, []byte("ssh:")))

	tests := []struct {
		name  string
		in    string
		valid bool
	}{
		{"ed25519", ed, true},
		{"ed25519 with comment", ed + " ops@example.com laptop", true},
		{"ecdsa", ec, true},
		{"rsa 2048", rsa, true},
		{"security key", sk, true},
		{"rsa 1024 refused", rsaSmall, false},
		{"ecdsa wrong curve", ecWrongCurve, false},
		{"type mismatch", "ssh-rsa " + strings.Fields(ed)[1], false},
		{"unknown type", "ssh-dss " + strings.Fields(ed)[1], false},
		{"no blob", "ssh-ed25519", false},
		{"bad base64", "ssh-ed25519 AAAA$$$", false},
		{"truncated", "ssh-ed25519 " + b64(wire([]byte("ssh-ed25519"), edPub)[:30]), false},
		{"trailing data", "ssh-ed25519 " + b64(append(wire([]byte("ssh-ed25519"), edPub), 0)), false},
		{"short ed25519", "ssh-ed25519 " + b64(wire([]byte("ssh-ed25519"), edPub[:31])), false},
		{"options prefix", `command="ls" ` + ed, false},
		{"two lines", ed + "\n" + ed, false},
		{"private key", "-----BEGIN OPENSSH PRIVATE KEY-----", false},
		{"empty", "", false},
		{"control in comment", ed + " a\x01b", false},
		{"huge length field", "ssh-ed25519 " + b64([]byte{0xff, 0xff, 0xff, 0xff}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SSHAuthorizedKey(tt.in)
			if (err == nil) != tt.valid {
				t.Fatalf("valid=%v, err=%v", tt.valid, err)
			}
		})
	}
}

func TestNoPlaceholder(t *testing.T) {
	if NoPlaceholder("x"+AgentCredentialPlaceholder) == nil {
		t.Fatal("placeholder accepted")
	}
	if NoPlaceholder("ANVIL_AGENT") != nil {
		t.Fatal("prefix refused")
	}
	for _, r := range AgentCredentialPlaceholder {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			t.Fatalf("placeholder has %q, which a data URL or JSON might escape", r)
		}
	}
}

func FuzzSSHAuthorizedKey(f *testing.F) {
	f.Add("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example.com")
	f.Add("ssh-rsa AAAAB3NzaC1yc2EAAAADAQAB")
	f.Add("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY=")
	f.Fuzz(func(t *testing.T, line string) {
		if SSHAuthorizedKey(line) == nil {
			// Anything accepted must be a single line of type, blob, comment.
			if strings.ContainsAny(line, "\n\r\x00") || len(strings.Fields(line)) < 2 {
				t.Fatalf("accepted %q", line)
			}
		}
	})
}
