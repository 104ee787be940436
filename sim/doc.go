// Package sim simulates a fleet of bare-metal machines against a running
// anvil control plane. Each simulated machine does what a real one does,
// over the real endpoints of the boot service:
//
//  1. Firmware: GET <BootURL>/boot.ipxe?token=<enrollment token>, then
//     follow the scripts as iPXE would (chain, sleep, goto, "|| goto"),
//     with ${uuid} and ${net0/mac:hexhyp} filled in. A wait or refusal
//     script sleeps and chains to /ipxe again; MaxWait caps the sleeps.
//  2. A boot script's `kernel … ignition.config.url=<url>`: the Flatcar
//     kernel and initrd are not downloaded; the Ignition config is fetched
//     (retried as Ignition does) and read: /etc/hostname, /etc/anvil/revision,
//     /etc/anvil/agent.env (ANVIL_URL, ANVIL_AGENT_CREDENTIAL) and the kubeadm
//     join configuration (node name, --node-labels, taints).
//  3. The Node (when Config.Kube is set) is updated (one patch; created
//     only when missing) with the kubelet's standard labels and the labels
//     and taints from Ignition, and labelled for kwok, which keeps it Ready.
//  4. The real agent (package agent) runs with this boot's revision, a new
//     boot id, the machine's own state file, the shared HTTP client and a
//     simulated Rebooter. It heartbeats, reports and long-polls instructions.
//  5. When the agent reboots: that agent stops, the Node goes NotReady (its
//     Ready condition False with RebootingReason, in one patch of the
//     status, which kwok as libs/kubeharness runs it leaves alone; set
//     back to True in one more patch when the machine is back; a reboot
//     that hangs takes the Node from kwok instead, as
//     kubeharness.SetNodeNotReady does, so that its lease runs out),
//     the machine stays down RebootTime ± RebootJitter (or hangs, see
//     FailRate and Machine.Hang), then starts again at step 1 and boots its
//     current target revision. The new agent settles the instruction
//     ("done").
//
// # Use
//
//	fleet, err := sim.New(sim.Config{
//		BootURL:         "http://127.0.0.1:8081",
//		EnrollmentToken: token,
//		Kube:            cp.Client, // nil: no nodes
//		RebootTime:      300 * time.Millisecond,
//		MaxWait:         200 * time.Millisecond, // tests: do not sleep 5 s per iPXE retry
//		AgentIntervals:  sim.TestIntervals(),
//	})
//	machines := fleet.AddN(20, "5a5a") // 5a5a0000-0000-0000-0000-000000000001 …
//	pre := fleet.Add("4c4c4544-0035-4b10-8056-b7c04f4e3532", "52:54:00:12:34:56")
//	if err := fleet.Start(ctx); err != nil { … }
//	defer fleet.Stop()
//	…
//	m.Phase()          // off, waiting, booting, running, rebooting, hung
//	m.BootedRevision() // "mr-…" of the last boot
//	m.Reboots()        // []Reboot{InstructionID, Kind, Revision, From, At}
//	m.Hang(true)       // the next reboot does not come back until Hang(false)
//	m.NeverJoin(true)  // boots, but its Node never becomes Ready
//
// API summary:
//
//	func New(cfg Config) (*Fleet, error)
//	func (f *Fleet) Add(uuid, mac string) *Machine      // before or after Start
//	func (f *Fleet) AddN(n int, prefix string) []*Machine // deterministic UUIDs and MACs
//	func (f *Fleet) Start(ctx context.Context) error     // each machine in its own goroutine
//	func (f *Fleet) Stop()                               // stops everything, waits
//	func (f *Fleet) Machines() []*Machine
//	func (f *Fleet) Machine(uuid string) *Machine
//	func (f *Fleet) Counts() map[Phase]int
//	func (f *Fleet) TotalReboots() int64
//	func (m *Machine) UUID() string; MAC() string; Hostname() string
//	func (m *Machine) Phase() Phase; BootedRevision() string; Boots() int
//	func (m *Machine) Reboots() []Reboot
//	func (m *Machine) Status() Status                     // all of the above at once, plus the console
//	func (m *Machine) Hang(on bool); NeverJoin(on bool)
//	func ParseIgnition(data []byte) (*BootConfig, error)
//
// Config.OnEvent receives an Event for every phase change, boot, reboot,
// node transition and error, from the machines' goroutines.
//
// # Scale
//
// A fleet of 1,000 machines runs in one process: every machine shares one
// http.Client (one transport, up to 4,096 idle connections per host), and
// a machine only ever blocks on timers, HTTP calls and channels (the
// agent's loops are timer driven too), so an idle fleet costs heartbeats
// and long polls, not CPU. Give Config.Kube a client with a high
// client-side rate limit (the anvil-sim binary uses QPS 200, burst 400).
//
// The command anvil-sim (sim/cmd/anvil-sim) runs a fleet as its own
// process; docs/simulator.md lists its flags.
package sim
