package machine

import (
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// ParseUUID accepts an SMBIOS UUID in the canonical 8-4-4-4-12 hex form, in
// any letter case, and returns it in lowercase. Braces, "urn:uuid:", missing
// dashes and surrounding whitespace are refused rather than guessed at, so
// that one machine never gets two identities.
//
// The nil UUID (all zeros) and the all-F UUID are refused too: broken or
// unprogrammed firmware reports them, and every such machine would collide
// into one identity. Those machines need their firmware fixed (or a UUID set
// by the vendor tool) before they can register.
func ParseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", errs.Invalid("uuid", "must be 36 characters in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got %d characters", len(s))
	}
	var out [36]byte
	zeros, effs := 0, 0
	for i := 0; i < 36; i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return "", errs.Invalid("uuid", "must have '-' at positions 9, 14, 19 and 24 (form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
			}
			out[i] = c
			continue
		}
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", errs.Invalid("uuid", "must contain only hexadecimal digits and dashes (character %d is %q)", i+1, rune(s[i]))
		}
		switch c {
		case '0':
			zeros++
		case 'f':
			effs++
		}
		out[i] = c
	}
	if zeros == 32 {
		return "", errs.Invalid("uuid", "is the nil UUID, which broken firmware reports; set a real SMBIOS UUID on this machine")
	}
	if effs == 32 {
		return "", errs.Invalid("uuid", "is all F, which unprogrammed firmware reports; set a real SMBIOS UUID on this machine")
	}
	return string(out[:]), nil
}
