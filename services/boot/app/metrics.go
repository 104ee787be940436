package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
)

// The boot service's own series (see docs/boot.md). They are process-wide,
// so several service instances in one test process add up.
var (
	ipxeRefusals = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_refusals_total",
		Help: "iPXE requests answered with a refusal script (echo the reason, sleep, retry), by reason.",
	}, []string{"reason"})
	ipxeScripts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_scripts_total",
		Help: "iPXE scripts served, by kind: chain (/boot.ipxe), wait (not assigned yet), boot (kernel and initrd), refusal.",
	}, []string{"kind"})
	ignitionServed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_served_total",
		Help: "Ignition configs served.",
	})
	ignitionRefusals = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_refusals_total",
		Help: "Ignition requests refused, by reason.",
	}, []string{"reason"})
	assetsServed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_assets_served_total",
		Help: "Asset files served (GET /assets/, /sysext/, /flatcar/), by kind: agent, sysext, flatcar.",
	}, []string{"kind"})
	recordFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_record_failures_total",
		Help: "Firmware or agent events that could not be recorded in the registry (the request was still answered), by what.",
	}, []string{"what"})
	agentAuthFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_agent_auth_failures_total",
		Help: "Agent API requests whose credential was refused, by reason.",
	}, []string{"reason"})
	agentRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_agent_requests_total",
		Help: "Agent API calls handled after authentication, by call.",
	}, []string{"call"})
	instructionEvents = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_instructions_total",
		Help: "Instruction lifecycle events: stored, duplicate, withdrawn, delivered, and acked_<status>.",
	}, []string{"event"})
	instructionWait = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "anvil_boot_instruction_wait_seconds",
		Help: "Seconds from an instruction's request (its event's time) to its stage: received by the boot service's handler, " +
			"stored on the machine's record, first delivered to the agent's poll, accepted by the agent.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"stage"})
	longPolls = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_boot_long_polls",
		Help: "Agent long polls being held.",
	})
	ipxeToIgnition = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "anvil_boot_ipxe_to_ignition_seconds",
		Help: "Seconds from a machine's iPXE boot (when /ipxe issued its per-boot token) to its Ignition config being served: " +
			"the kernel and initrd download and the early boot.",
		Buckets: []float64{5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 3600},
	})
)

// observeIPXEToIgnition records the time from the iPXE boot that issued a
// per-boot token (issued; zero for a token that carries no issue time) to
// the Ignition config it fetched, served at now.
func observeIPXEToIgnition(issued, now time.Time) {
	if !issued.IsZero() && !now.Before(issued) {
		ipxeToIgnition.Observe(now.Sub(issued).Seconds())
	}
}

func init() {
	for _, r := range ipxe.Reasons() {
		ipxeRefusals.WithLabelValues(string(r))
	}
	for _, k := range []string{"chain", "wait", "boot", "refusal"} {
		ipxeScripts.WithLabelValues(k)
	}
}

// observeInstructionWait records how long an instruction requested at
// requested took to reach stage, as of now.
func observeInstructionWait(stage string, requested, now time.Time) {
	if requested.IsZero() {
		return
	}
	instructionWait.WithLabelValues(stage).Observe(max(now.Sub(requested).Seconds(), 0))
}
