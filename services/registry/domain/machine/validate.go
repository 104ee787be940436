package machine

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
)

// Limits that keep one machine's record small and bounded.
const (
	MaxLabels      = 64
	MaxHostnameLen = fields.MaxHostname // it names the node and is its kubernetes.io/hostname label
	MaxReasonLen   = fields.MaxReason
	MaxDisks       = 256
	MaxNICs        = 256
)

// ValidateHostname checks a hostname with the rule every service shares
// (fields.Hostname): lowercase RFC 1123, at most 63 characters.
func ValidateHostname(h string) error {
	var f errs.Fields
	validateHostname(&f, "hostname", h)
	return f.Err()
}

func validateHostname(f *errs.Fields, field, h string) {
	if h == "" {
		f.Add(field, "is required")
		return
	}
	if err := fields.Hostname(h); err != nil {
		f.Add(field, "%v", err)
	}
}

// dnsLabelProblem returns why s is not a lowercase RFC 1123 label, or "".
func dnsLabelProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > 63 {
		return "is longer than 63 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			continue
		}
		if c == '-' && i > 0 && i < len(s)-1 {
			continue
		}
		if c >= 'A' && c <= 'Z' {
			return "must be lowercase"
		}
		return "must consist of lowercase letters, digits and '-', and start and end with a letter or digit"
	}
	return ""
}

// ValidatePool checks a pool name: a DNS label, like every anvil resource
// name that appears in subjects and node labels.
func ValidatePool(p string) error {
	var f errs.Fields
	validatePool(&f, "pool", p)
	return f.Err()
}

func validatePool(f *errs.Fields, field, p string) {
	if p == "" {
		f.Add(field, "is required")
		return
	}
	if err := fields.PoolName(p); err != nil {
		f.Add(field, "%v", err)
	}
}

// ValidateLabels checks labels against Kubernetes' label key and value rules,
// naming each offending entry as labels["key"].
func ValidateLabels(labels map[string]string) error {
	var f errs.Fields
	validateLabels(&f, "labels", labels)
	return f.Err()
}

func validateLabels(f *errs.Fields, field string, labels map[string]string) {
	if len(labels) > MaxLabels {
		f.Add(field, "must have at most %d labels, got %d", MaxLabels, len(labels))
		return
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report in a stable order
	for _, k := range keys {
		name := field + "[" + strconv.Quote(k) + "]"
		if err := fields.LabelKey(k); err != nil {
			f.Add(name, "key: %v", err)
		}
		if err := fields.LabelValue(labels[k]); err != nil {
			f.Add(name, "value: %v", err)
		}
	}
}

// normalizeMAC returns a 48-bit MAC in lowercase colon form.
func normalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return "", fmt.Errorf("must be a MAC address such as 52:54:00:12:34:56")
	}
	if len(hw) != 6 {
		return "", fmt.Errorf("must be a 48-bit MAC address, got %d bits", 8*len(hw))
	}
	if string(hw) == "\x00\x00\x00\x00\x00\x00" {
		return "", fmt.Errorf("must not be all zeros")
	}
	return hw.String(), nil
}

// validateText checks a reason: one line of text (fields.Text), so that
// no control character or escape sequence reaches a log or a terminal.
func validateText(f *errs.Fields, field, v string, required bool, max int) {
	if v == "" {
		if required {
			f.Add(field, "is required")
		}
		return
	}
	if err := fields.Text(v, max, false); err != nil {
		f.Add(field, "%v", err)
	}
}

func validateName(f *errs.Fields, field, v string, max int) {
	switch {
	case v == "":
		f.Add(field, "is required")
	case len(v) > max:
		f.Add(field, "must be at most %d bytes", max)
	case !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		f.Add(field, "must be valid UTF-8 without spaces or control characters")
	}
}

// normalizeHardware validates an agent's report and returns it with MACs in
// canonical form, so that equal hardware compares equal.
func normalizeHardware(f *errs.Fields, field string, hw Hardware) Hardware {
	out := Hardware{CPUs: hw.CPUs, RAMBytes: hw.RAMBytes}
	if hw.CPUs < 1 || hw.CPUs > 1<<16 {
		f.Add(field+".cpus", "must be between 1 and 65536, got %d", hw.CPUs)
	}
	if hw.RAMBytes == 0 {
		f.Add(field+".ram_bytes", "must be positive")
	}
	if len(hw.Disks) > MaxDisks {
		f.Add(field+".disks", "must list at most %d disks", MaxDisks)
	} else if len(hw.Disks) > 0 {
		out.Disks = make([]Disk, len(hw.Disks))
		for i, d := range hw.Disks {
			validateName(f, fmt.Sprintf("%s.disks[%d].name", field, i), d.Name, 255)
			out.Disks[i] = d
		}
	}
	if len(hw.NICs) > MaxNICs {
		f.Add(field+".nics", "must list at most %d NICs", MaxNICs)
	} else if len(hw.NICs) > 0 {
		out.NICs = make([]NIC, len(hw.NICs))
		for i, n := range hw.NICs {
			validateName(f, fmt.Sprintf("%s.nics[%d].name", field, i), n.Name, 15) // IFNAMSIZ-1
			mac, err := normalizeMAC(n.MAC)
			if err != nil {
				f.Add(fmt.Sprintf("%s.nics[%d].mac", field, i), "%v", err)
			}
			out.NICs[i] = NIC{Name: n.Name, MAC: mac}
		}
	}
	return out
}
