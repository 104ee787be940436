package api

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// SubjectReportIPXEBoots carries many machines' iPXE boots at once: the
// boots a boot service answered from memory and reports afterwards.
const SubjectReportIPXEBoots = "cmd.registry.machine.report_ipxe_boots"

// MaxIPXEBootReports bounds the boots of one ReportIPXEBoots.
const MaxIPXEBootReports = 1000

// ReportIPXEBoots reports iPXE boots of many machines: each is handled as
// its own SelfRegister would be (the enrollment token verified, the boot
// recorded), and answered on its own.
type ReportIPXEBoots struct {
	Boots []ReportedIPXEBoot `json:"boots"`
}

// ReportedIPXEBoot is one machine's boot, as its SelfRegister would have
// carried it, and the machine's version the boot service answered it
// from.
type ReportedIPXEBoot struct {
	SelfRegister
	// Version is the machine's version the boot service knows (0: none):
	// the answer leaves the machine out while it still is that version.
	Version uint64 `json:"version,omitempty"`
}

// IPXEBootReports answers ReportIPXEBoots: one result per boot, in order.
type IPXEBootReports struct {
	Results []IPXEBootResult `json:"results"`
}

// IPXEBootResult is what became of one reported boot: the machine's
// version after it, and the machine unless that version is the one the
// report named; or why it was refused (the error SelfRegister would
// return).
type IPXEBootResult struct {
	Version uint64      `json:"version,omitempty"`
	Machine *Machine    `json:"machine,omitempty"`
	Error   *errs.Error `json:"error,omitempty"`
}

// ReportIPXEBoots sends boots of many machines in one request.
func (c Client) ReportIPXEBoots(ctx context.Context, r ReportIPXEBoots) (IPXEBootReports, error) {
	return command.Call[ReportIPXEBoots, IPXEBootReports](ctx, c.NC, SubjectReportIPXEBoots, r)
}
