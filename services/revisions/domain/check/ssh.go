package check

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode"
)

// sshKeyTypes lists the public key types OpenSSH accepts today, with the
// fields that follow the type inside the blob. ssh-dss is absent on
// purpose: OpenSSH removed it.
var sshKeyTypes = map[string]func(r *sshReader) error{
	"ssh-ed25519": func(r *sshReader) error {
		return r.fixed("ed25519 key", 32)
	},
	"sk-ssh-ed25519@openssh.com": func(r *sshReader) error {
		if err := r.fixed("ed25519 key", 32); err != nil {
			return err
		}
		return r.nonEmpty("application")
	},
	"ssh-rsa": func(r *sshReader) error {
		if _, err := r.mpint("exponent"); err != nil {
			return err
		}
		n, err := r.mpint("modulus")
		if err != nil {
			return err
		}
		if bits := n.BitLen(); bits < 2048 {
			return fmt.Errorf("RSA key has %d bits; at least 2048 are required", bits)
		}
		return nil
	},
	"ecdsa-sha2-nistp256":                ecdsa("nistp256", 65),
	"ecdsa-sha2-nistp384":                ecdsa("nistp384", 97),
	"ecdsa-sha2-nistp521":                ecdsa("nistp521", 133),
	"sk-ecdsa-sha2-nistp256@openssh.com": skECDSA,
}

func ecdsa(curve string, pointLen int) func(r *sshReader) error {
	return func(r *sshReader) error {
		c, err := r.str("curve name")
		if err != nil {
			return err
		}
		if string(c) != curve {
			return fmt.Errorf("curve %q does not match the key type (want %q)", c, curve)
		}
		p, err := r.str("public point")
		if err != nil {
			return err
		}
		if len(p) != pointLen || p[0] != 4 {
			return errors.New("public point is not an uncompressed point of the right size")
		}
		return nil
	}
}

func skECDSA(r *sshReader) error {
	if err := ecdsa("nistp256", 65)(r); err != nil {
		return err
	}
	return r.nonEmpty("application")
}

// SSHAuthorizedKey checks one public key in authorized_keys form:
// "<type> <base64 blob> [comment]". The blob is decoded and its wire
// structure checked, including that the type inside it matches the prefix,
// so that a pasted private key, a truncated key or a mixed-up line is
// refused now rather than locking the operator out later. Options before
// the type (command="...", from=...) are not accepted.
func SSHAuthorizedKey(line string) error {
	if strings.ContainsAny(line, "\r\n\x00") {
		return errors.New("must be a single line")
	}
	if len(line) > 16384 {
		return errors.New("must be at most 16384 characters")
	}
	if strings.Contains(line, "PRIVATE KEY") {
		return errors.New("looks like a private key; paste the public key (the .pub file)")
	}
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return errors.New(`must have the form "<type> <base64 key> [comment]"`)
	}
	typ, b64 := fields[0], fields[1]
	parse, ok := sshKeyTypes[typ]
	if !ok {
		return fmt.Errorf("unsupported key type %q (supported: ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com)", truncate(typ, 40))
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return errors.New("key is not valid base64")
	}
	r := &sshReader{b: blob}
	inner, err := r.str("key type")
	if err != nil {
		return err
	}
	if string(inner) != typ {
		return fmt.Errorf("key blob is of type %q but the line says %q", truncate(string(inner), 40), typ)
	}
	if err := parse(r); err != nil {
		return err
	}
	if len(r.b) != 0 {
		return errors.New("key blob has trailing data")
	}
	for _, c := range strings.Join(fields[2:], " ") {
		if c > unicode.MaxASCII || unicode.IsControl(c) {
			return errors.New("comment must be printable ASCII")
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sshReader reads the SSH wire format (RFC 4251 §5).
type sshReader struct{ b []byte }

func (r *sshReader) str(what string) ([]byte, error) {
	if len(r.b) < 4 {
		return nil, fmt.Errorf("key blob is truncated (reading %s)", what)
	}
	n := binary.BigEndian.Uint32(r.b)
	if uint64(n) > uint64(len(r.b)-4) {
		return nil, fmt.Errorf("key blob is truncated (reading %s)", what)
	}
	s := r.b[4 : 4+n]
	r.b = r.b[4+n:]
	return s, nil
}

func (r *sshReader) fixed(what string, n int) error {
	s, err := r.str(what)
	if err != nil {
		return err
	}
	if len(s) != n {
		return fmt.Errorf("%s has %d bytes, want %d", what, len(s), n)
	}
	return nil
}

func (r *sshReader) nonEmpty(what string) error {
	s, err := r.str(what)
	if err != nil {
		return err
	}
	if len(s) == 0 {
		return fmt.Errorf("%s is empty", what)
	}
	return nil
}

func (r *sshReader) mpint(what string) (*big.Int, error) {
	s, err := r.str(what)
	if err != nil {
		return nil, err
	}
	if len(s) == 0 || s[0]&0x80 != 0 {
		return nil, fmt.Errorf("%s is not a positive integer", what)
	}
	return new(big.Int).SetBytes(s), nil
}
