package machine

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// The state machine's specification is the matrix in docs/machine-states.md.
// This test parses it and checks every (state, command) cell against Decide
// and Apply, so the documentation and the code cannot disagree.

const docPath = "../../../../docs/machine-states.md"

var (
	fxUUID  = "4c4c4544-0042-3510-8052-b4c04f4e3132"
	fxToken = "aaaaaaaaaaaaaaaa"
	fxMAC   = "52:54:00:12:34:56"
	t0      = time.Date(2030, 3, 1, 9, 0, 0, 0, time.UTC)
)

func fxPreregister() PreRegister {
	return PreRegister{UUID: fxUUID, Hostname: "node-1", Labels: map[string]string{"rack": "r1"}, Pool: "p1", UpgradeIndex: 2}
}

// fixtures builds each column's state from events, so evolve is exercised
// along the way.
func fixtures() map[string][]any {
	pre := fxPreregister()
	registered := []any{Registered{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, BootedAt: t0}}
	pending := append(slices.Clone(registered), AssignedToPool{Pool: "p1"})
	provisioning := append(slices.Clone(pending), TargetRevisionSet{Revision: 1})
	ready := append(slices.Clone(provisioning), RevisionBooted{Revision: 1, At: t0}, BecameReady{Revision: 1})
	deleting := append(slices.Clone(ready), DeletionStarted{Policy: DeletionGraceful})
	return map[string][]any{
		"absent":               nil,
		"preregistered":        {Preregistered{UUID: pre.UUID, Hostname: pre.Hostname, Labels: pre.Labels, Pool: pre.Pool, UpgradeIndex: pre.UpgradeIndex}},
		"ready_unassigned":     registered,
		"pending":              pending,
		"provisioning":         provisioning,
		"ready":                ready,
		"reconfiguring":        append(slices.Clone(ready), TargetRevisionSet{Revision: 2}),
		"entering_maintenance": append(slices.Clone(ready), MaintenanceRequested{}),
		"maintenance":          append(slices.Clone(ready), MaintenanceRequested{}, MaintenanceEntered{}),
		"unassigning":          append(slices.Clone(ready), UnassignStarted{Pool: "p1"}),
		"failed":               append(slices.Clone(provisioning), Failed{Reason: "join timed out", During: StatusProvisioning}),
		"deleting:started":     deleting,
		"deleting:completed":   append(slices.Clone(deleting), DeletionPrepared{}),
		"deleting:aborting":    append(slices.Clone(deleting), DeletionAborting{}),
		"deleting:failed":      append(slices.Clone(deleting), DeletionFailed{Reason: "drain timed out"}),
	}
}

// rowCommands maps each matrix row to the command it stands for, given the
// state (mark_ready uses the state's own target revision).
var rowCommands = map[string]func(s State) Command{
	"preregister": func(State) Command { return fxPreregister() },
	"register": func(State) Command {
		return Register{UUID: strings.ToUpper(fxUUID), MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0}
	},
	"record_ipxe_boot":       func(State) Command { return RecordIPXEBoot{At: t0.Add(time.Hour)} },
	"record_ignition":        func(State) Command { return RecordIgnition{At: t0.Add(time.Hour)} },
	"set_hostname":           func(State) Command { return SetHostname{Hostname: "node-2"} },
	"set_labels":             func(State) Command { return SetLabels{Labels: map[string]string{"rack": "r2"}} },
	"set_upgrade_index":      func(State) Command { return SetUpgradeIndex{UpgradeIndex: 5} },
	"set_control_plane":      func(State) Command { return SetControlPlane{ControlPlane: true} },
	"assign_to_pool p1":      func(State) Command { return AssignToPool{Pool: "p1"} },
	"assign_to_pool p2":      func(State) Command { return AssignToPool{Pool: "p2"} },
	"unassign":               func(State) Command { return Unassign{} },
	"force_unassign":         func(State) Command { return ForceUnassign{} },
	"set_maintenance on":     func(State) Command { return SetMaintenance{Enabled: true} },
	"set_maintenance off":    func(State) Command { return SetMaintenance{Enabled: false} },
	"delete graceful":        func(State) Command { return Delete{Policy: DeletionGraceful} },
	"delete unsafe":          func(State) Command { return Delete{Policy: DeletionUnsafe} },
	"delete forced":          func(State) Command { return Delete{Policy: DeletionForced} },
	"abort_deletion":         func(State) Command { return AbortDeletion{} },
	"report_booted_revision": func(State) Command { return ReportBootedRevision{Revision: 7, At: t0.Add(time.Hour)} },
	"report_hardware":        func(State) Command { return ReportHardware{Hardware: sampleHardware(), At: t0.Add(time.Hour)} },
	"report_reboot_required": func(State) Command { return ReportRebootRequired{Required: true, Reason: "linux-image-6.6"} },
	"report_agent": func(State) Command {
		return ReportAgent{Hardware: &ReportHardware{Hardware: sampleHardware(), At: t0.Add(time.Hour)},
			RebootRequired: &ReportRebootRequired{Required: true, Reason: "linux-image-6.6"},
			BootedRevision: &ReportBootedRevision{Revision: 7, At: t0.Add(time.Hour)}}
	},
	"check_connectivity silent": func(State) Command {
		return CheckConnectivity{LastHeartbeat: matrixNow.Add(-10 * time.Minute), Silence: time.Minute}
	},
	"check_connectivity fresh": func(State) Command {
		return CheckConnectivity{LastHeartbeat: matrixNow.Add(-time.Second), Silence: time.Minute}
	},
	"set_target_revision":           func(State) Command { return SetTargetRevision{Revision: 3} },
	"mark_ready":                    func(s State) Command { return MarkReady{Revision: max(s.TargetRevision, 1)} },
	"mark_failed":                   func(State) Command { return MarkFailed{Reason: "reboot timed out"} },
	"complete_unassign":             func(State) Command { return CompleteUnassign{} },
	"complete_maintenance_entry":    func(State) Command { return CompleteMaintenanceEntry{} },
	"complete_deletion_preparation": func(State) Command { return CompleteDeletionPreparation{} },
	"fail_deletion":                 func(State) Command { return FailDeletion{Reason: "node removal failed"} },
	"complete_deletion_abort":       func(State) Command { return CompleteDeletionAbort{} },
	"complete_deletion":             func(State) Command { return CompleteDeletion{} },
}

var matrixNow = t0.Add(24 * time.Hour)

func sampleHardware() Hardware {
	return Hardware{
		CPUs: 32, RAMBytes: 128 << 30,
		Disks: []Disk{{Name: "/dev/nvme0n1", SizeBytes: 1 << 40}},
		NICs:  []NIC{{Name: "eno1", MAC: "52:54:00:AB:CD:EF"}},
	}
}

type matrixRow struct {
	command string
	cells   map[string]string
}

func readMatrix(t *testing.T) []matrixRow {
	t.Helper()
	doc, err := os.ReadFile(filepath.FromSlash(docPath))
	if err != nil {
		t.Fatalf("the state matrix lives in docs/machine-states.md: %v", err)
	}
	text := string(doc)
	begin, end := strings.Index(text, "<!-- matrix:begin -->"), strings.Index(text, "<!-- matrix:end -->")
	if begin < 0 || end < begin {
		t.Fatal("matrix markers not found in docs/machine-states.md")
	}
	lines := strings.Split(strings.TrimSpace(text[begin+len("<!-- matrix:begin -->"):end]), "\n")
	split := func(line string) []string {
		parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts
	}
	header := split(lines[0])
	var rows []matrixRow
	for _, line := range lines[2:] {
		cells := split(line)
		if len(cells) != len(header) {
			t.Fatalf("matrix row has %d cells, header has %d: %s", len(cells), len(header), line)
		}
		name := cells[0]
		name = name[strings.Index(name, "`")+1:]
		name = name[:strings.Index(name, "`")]
		row := matrixRow{command: name, cells: map[string]string{}}
		for i, c := range cells[1:] {
			row.cells[header[i+1]] = c
		}
		rows = append(rows, row)
	}
	return rows
}

func build(events []any) State {
	var s State
	for _, e := range events {
		s.Apply(e)
	}
	return s
}

// column names the state the way the matrix does.
func column(s State) string {
	switch {
	case !s.Exists():
		return "absent"
	case s.Status == StatusDeleting && s.Deletion != nil:
		return "deleting:" + string(s.Deletion.Phase)
	}
	return string(s.Status)
}

func TestStateMachineMatrix(t *testing.T) {
	rows := readMatrix(t)
	fx := fixtures()
	seenRows := map[string]bool{}
	seenEvents := map[string]bool{}
	for _, row := range rows {
		mk, ok := rowCommands[row.command]
		if !ok {
			t.Errorf("matrix row %q has no command in the test", row.command)
			continue
		}
		seenRows[row.command] = true
		if len(row.cells) != len(fx) {
			t.Errorf("row %q has %d states, want %d", row.command, len(row.cells), len(fx))
		}
		for col, want := range row.cells {
			events, ok := fx[col]
			if !ok {
				t.Fatalf("matrix column %q has no fixture", col)
			}
			starts := []State{build(events)}
			if col == "absent" {
				// A deleted machine is as absent as one never seen.
				starts = append(starts, build(append(slices.Clone(fx["ready"]), Deleted{Policy: DeletionForced})))
			}
			for _, s := range starts {
				if got := column(s); got != col {
					t.Fatalf("fixture %q is in %q", col, got)
				}
				checkCell(t, row.command, col, want, s, mk(s), seenEvents)
			}
		}
	}
	for name := range rowCommands {
		if !seenRows[name] {
			t.Errorf("command %q has no row in the matrix", name)
		}
	}
	// Every command type and every event type must appear in the matrix.
	covered := map[string]bool{}
	for name, mk := range rowCommands {
		if seenRows[name] {
			covered[mk(State{}).CommandType()] = true
		}
	}
	for _, c := range CommandTypes() {
		if n := c.(Command).CommandType(); !covered[n] {
			t.Errorf("command %s is not in the matrix", n)
		}
	}
	for _, e := range EventTypes() {
		if n := e.(Event).EventType(); !seenEvents[n] {
			t.Errorf("event %s is never emitted in the matrix", n)
		}
	}
}

func checkCell(t *testing.T, command, col, want string, s State, cmd Command, seen map[string]bool) {
	t.Helper()
	where := command + " in " + col
	before := s.Clone()
	evs, err := Decide(s, cmd, matrixNow)
	if !reflect.DeepEqual(before, s) {
		t.Errorf("%s: Decide mutated the state", where)
	}
	switch want {
	case "✗":
		if !errs.Is(err, errs.KindConflict) || len(evs) != 0 {
			t.Errorf("%s: want conflict, got %v %v", where, evs, err)
		} else if !strings.Contains(err.Error(), s.UUID) || !strings.Contains(err.Error(), "cannot") {
			t.Errorf("%s: conflict should name the machine and say what cannot happen: %v", where, err)
		}
		return
	case "404":
		if !errs.Is(err, errs.KindNotFound) || len(evs) != 0 {
			t.Errorf("%s: want not found, got %v %v", where, evs, err)
		}
		return
	case "·":
		if err != nil || len(evs) != 0 {
			t.Errorf("%s: want a no-op, got %v %v", where, evs, err)
		}
		return
	}
	wantEvent, wantCol, moves := strings.Cut(want, "→")
	wantEvent, wantCol = strings.TrimSpace(wantEvent), strings.TrimSpace(wantCol)
	if !moves {
		wantCol = col
	}
	// A command that emits several events names them joined by "+".
	wantEvents := strings.Split(wantEvent, "+")
	if err != nil || len(evs) != len(wantEvents) {
		t.Errorf("%s: want %s, got %v %v", where, want, evs, err)
		return
	}
	after := s.Clone()
	for i, e := range evs {
		ev, ok := e.(Event)
		if !ok {
			t.Errorf("%s: %T is not a machine event", where, e)
			return
		}
		seen[ev.EventType()] = true
		if w := strings.TrimSpace(wantEvents[i]); ev.EventType() != "machine."+w {
			t.Errorf("%s: event %d is %s, want machine.%s", where, i, ev.EventType(), w)
		}
		after.Apply(e)
	}
	if got := column(after); got != wantCol {
		t.Errorf("%s: ends in %s, want %s", where, got, wantCol)
	}
	// Idempotency: the same command against the resulting state does
	// nothing more, so a redelivered command is harmless.
	if again, err := Decide(after, cmd, matrixNow); err == nil && len(again) > 0 {
		t.Errorf("%s: repeating the command emits %v again", where, again)
	}
}
