// Package report turns what a machine's agent reports into what the
// registry records: the hardware inventory in the registry's shape, and the
// bounded texts. It is pure.
package report

import (
	"fmt"
	"strings"
	"unicode/utf8"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Bounds on what is kept of a report.
const (
	MaxLogLines    = 200
	MaxLogLine     = 2048
	MaxRevisionLen = 256
)

// Hardware maps the agent's inventory to the registry's. The registry keeps
// CPUs, memory, disk names and sizes, and NIC names and MACs; a disk's model
// and rotational flag and a NIC's speed are the agent's extra detail. An
// inventory the agent could not read at all (no CPUs and no memory) is
// reported as missing rather than as a machine with nothing in it.
func Hardware(h agentapi.Hardware) (regapi.Hardware, error) {
	if h.CPUs <= 0 && h.MemoryBytes == 0 {
		return regapi.Hardware{}, fmt.Errorf("the agent could not read the CPU count or the memory size")
	}
	out := regapi.Hardware{CPUs: h.CPUs, RAMBytes: h.MemoryBytes}
	for _, d := range h.Disks {
		out.Disks = append(out.Disks, regapi.Disk{Name: d.Name, SizeBytes: d.SizeBytes})
	}
	for _, n := range h.NICs {
		out.NICs = append(out.NICs, regapi.NIC{Name: n.Name, MAC: n.MAC})
	}
	return out, nil
}

// RebootReason bounds the agent's reboot reason to what the registry keeps.
func RebootReason(r agentapi.RebootRequired) string {
	if !r.Required {
		return ""
	}
	return Text(r.Reason, regapi.MaxReasonLen)
}

// StartupLog keeps the last MaxLogLines lines, each valid UTF-8 and cut at
// MaxLogLine bytes.
func StartupLog(lines []string) []string {
	if len(lines) > MaxLogLines {
		lines = lines[len(lines)-MaxLogLines:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = Text(l, MaxLogLine)
	}
	return out
}

// BootedRevision checks a reported machine revision: empty (the agent's
// revision file was missing) or printable UTF-8 of at most MaxRevisionLen
// bytes.
func BootedRevision(s string) error {
	if len(s) > MaxRevisionLen || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("booted_revision must be printable UTF-8 of at most %d bytes", MaxRevisionLen)
	}
	return nil
}

// Text makes s valid UTF-8 of at most max bytes (cut on a rune boundary,
// marked with "…").
func Text(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	n := max - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
