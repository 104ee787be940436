package machine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// apply decides cmd and folds the events into s, failing on error.
func apply(t *testing.T, s *State, cmd Command) []any {
	t.Helper()
	evs, err := Decide(*s, cmd, matrixNow)
	if err != nil {
		t.Fatalf("%s: %v", cmd.CommandType(), err)
	}
	for _, e := range evs {
		s.Apply(e)
	}
	return evs
}

func TestPreRegistrationThenBoot(t *testing.T) {
	var s State
	apply(t, &s, PreRegister{UUID: strings.ToUpper(fxUUID), Hostname: "gpu-07", Labels: map[string]string{"rack": "r7", "gpu": "a100"}, Pool: "gpu", UpgradeIndex: 3, ControlPlane: true})
	if s.Status != StatusPreregistered || s.UUID != fxUUID {
		t.Fatalf("after pre-registration: %+v", s)
	}
	evs := apply(t, &s, Register{UUID: fxUUID, MAC: "52-54-00-AA-BB-CC", EnrollmentTokenID: fxToken, At: t0})
	reg := evs[0].(Registered)
	if reg.MAC != "52:54:00:aa:bb:cc" || reg.UUID != fxUUID {
		t.Fatalf("registered event not normalized: %+v", reg)
	}
	if s.Status != StatusPending || s.Hostname != "gpu-07" || s.Pool != "gpu" || s.Labels["rack"] != "r7" ||
		s.UpgradeIndex != 3 || !s.ControlPlane || s.LastIPXEBootAt != t0 || s.EnrollmentTokenID != fxToken {
		t.Fatalf("the booted machine must take over its pre-registered configuration: %+v", s)
	}
	// Later boots register again: nothing happens.
	if evs, err := Decide(s, Register{UUID: fxUUID, MAC: "52:54:00:aa:bb:cc", EnrollmentTokenID: fxToken, At: t0.Add(time.Hour)}, matrixNow); err != nil || len(evs) != 0 {
		t.Fatalf("re-registration must be a no-op: %v %v", evs, err)
	}

	// Without a pool, a pre-registered machine boots into ready_unassigned.
	var u State
	apply(t, &u, PreRegister{UUID: fxUUID, Hostname: "spare-1"})
	apply(t, &u, Register{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0})
	if u.Status != StatusReadyUnassigned || u.Hostname != "spare-1" {
		t.Fatalf("%+v", u)
	}
}

func TestUUIDCaseNormalisation(t *testing.T) {
	var s State
	apply(t, &s, Register{UUID: "4C4C4544-0042-3510-8052-B4C04F4E3132", MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0})
	if s.UUID != fxUUID {
		t.Fatalf("uuid %q", s.UUID)
	}
	if evs, err := Decide(s, Register{UUID: "4c4c4544-0042-3510-8052-B4C04F4E3132", MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0}, matrixNow); err != nil || len(evs) != 0 {
		t.Fatalf("mixed case is the same machine: %v %v", evs, err)
	}
	if _, err := Decide(s, Register{UUID: "5c4c4544-0042-3510-8052-b4c04f4e3132", MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0}, matrixNow); !errs.Is(err, errs.KindInternal) {
		t.Fatalf("a command for another UUID is a bug in the caller: %v", err)
	}
}

func TestParseUUID(t *testing.T) {
	good := map[string]string{
		"4c4c4544-0042-3510-8052-b4c04f4e3132": fxUUID,
		"4C4C4544-0042-3510-8052-B4C04F4E3132": fxUUID,
		"4c4C4544-0042-3510-8052-b4C04f4e3132": fxUUID,
		"00000000-0000-0000-0000-000000000001": "00000000-0000-0000-0000-000000000001",
		"ffffffff-ffff-ffff-ffff-fffffffffffe": "ffffffff-ffff-ffff-ffff-fffffffffffe",
	}
	for in, want := range good {
		got, err := ParseUUID(in)
		if err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	bad := []string{
		"", "{4c4c4544-0042-3510-8052-b4c04f4e3132}", "urn:uuid:4c4c4544-0042-3510-8052-b4c04f4e3132",
		"4c4c454400423510 8052b4c04f4e3132", "4c4c45440042351080524c04f4e31324", " 4c4c4544-0042-3510-8052-b4c04f4e313",
		"4c4c4544-0042-3510-8052-b4c04f4e313g", "4c4c4544_0042-3510-8052-b4c04f4e3132", "4c4c4544-00423-510-8052-b4c04f4e3132",
		"00000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"4c4c4544-0042-3510-8052-b4c04f4e31é",
	}
	for _, in := range bad {
		_, err := ParseUUID(in)
		if got := errs.FieldNames(err); !reflect.DeepEqual(got, []string{"uuid"}) {
			t.Errorf("%q: want a field error on uuid, got %v", in, err)
		}
	}
}

func TestValidationNamesEveryField(t *testing.T) {
	_, err := Decide(State{}, PreRegister{
		UUID:         "nope",
		Hostname:     "Node_1",
		Labels:       map[string]string{"rack": "r 1", "-bad": "x", "ok": "fine"},
		Pool:         "GPU",
		UpgradeIndex: -1,
	}, matrixNow)
	want := []string{"uuid", "hostname", `labels["-bad"]`, `labels["rack"]`, "pool", "upgrade_index"}
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("fields %v, want %v (%v)", got, want, err)
	}
	_, err = Decide(State{}, Register{UUID: fxUUID, MAC: "zz", EnrollmentTokenID: "x"}, matrixNow)
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, []string{"mac", "enrollment_token_id", "at"}) {
		t.Fatalf("fields %v (%v)", got, err)
	}
	s := build(fixtures()["ready"])
	_, err = Decide(s, ReportHardware{Hardware: Hardware{Disks: []Disk{{Name: ""}}, NICs: []NIC{{Name: "a very long interface", MAC: "x"}}}}, matrixNow)
	want = []string{"hardware.cpus", "hardware.ram_bytes", "hardware.disks[0].name", "hardware.nics[0].name", "hardware.nics[0].mac", "at"}
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("fields %v, want %v (%v)", got, want, err)
	}
	for _, c := range []Command{MarkFailed{}, FailDeletion{}, SetTargetRevision{}, MarkReady{}, Delete{Policy: "gentle"}, CheckConnectivity{}} {
		if _, err := Decide(s, c, matrixNow); !errs.Is(err, errs.KindValidation) {
			t.Errorf("%s: want validation error, got %v", c.CommandType(), err)
		}
	}
}

func TestHostnameAndLabels(t *testing.T) {
	for _, h := range []string{"a", "node-1", "node-1.rack3.dc1.example.com", strings.Repeat("a", 63), "1"} {
		if err := ValidateHostname(h); err != nil {
			t.Errorf("%q: %v", h, err)
		}
	}
	for _, h := range []string{"", "-a", "a-", "Node", "a..b", "a_b", ".a", "a.", strings.Repeat("a", 64) + ".b", strings.Repeat("a.", 32) + "a", "ä"} {
		if err := ValidateHostname(h); err == nil {
			t.Errorf("%q should be refused", h)
		}
	}
	ok := map[string]string{"rack": "r1", "example.com/zone": "eu-1", "empty": "", "a_b.c-d": "X_y.z-1"}
	if err := ValidateLabels(ok); err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if got := errs.FieldNames(ValidateLabels(many)); !reflect.DeepEqual(got, []string{"labels"}) {
		t.Fatalf("too many labels: %v", got)
	}
	for _, bad := range []map[string]string{{"": "v"}, {"a/b/c": "v"}, {"k": "-v"}, {"k": strings.Repeat("v", 64)}, {"UPPER.com/k": "v"}} {
		if err := ValidateLabels(bad); err == nil {
			t.Errorf("%v should be refused", bad)
		}
	}
}

func TestCommandsDoNotAliasInput(t *testing.T) {
	labels := map[string]string{"rack": "r1"}
	var s State
	evs := apply(t, &s, PreRegister{UUID: fxUUID, Labels: labels})
	labels["rack"] = "changed"
	if s.Labels["rack"] != "r1" || evs[0].(Preregistered).Labels["rack"] != "r1" {
		t.Fatal("state and events must not share the command's map")
	}
	hw := sampleHardware()
	s = build(fixtures()["ready"])
	apply(t, &s, ReportHardware{Hardware: hw, At: t0})
	hw.NICs[0].Name = "changed"
	if s.Hardware.NICs[0].Name != "eno1" || s.Hardware.NICs[0].MAC != "52:54:00:ab:cd:ef" {
		t.Fatalf("hardware aliased or not normalized: %+v", s.Hardware)
	}
	if evs, _ := Decide(s, ReportHardware{Hardware: sampleHardware(), At: t0.Add(time.Hour)}, matrixNow); len(evs) != 0 {
		t.Fatal("unchanged hardware (MAC case aside) must be a no-op")
	}
}

func TestReportsIgnoreStaleAndUnchanged(t *testing.T) {
	s := build(fixtures()["ready"])
	apply(t, &s, RecordIPXEBoot{At: t0.Add(2 * time.Hour)})
	for _, c := range []Command{
		RecordIPXEBoot{At: t0.Add(time.Hour)},
		ReportBootedRevision{Revision: 1, At: t0.Add(time.Hour)},
		ReportBootedRevision{Revision: 9, At: t0.Add(-time.Hour)},
		ReportRebootRequired{Required: false, Reason: "ignored without a reboot"},
	} {
		if evs, err := Decide(s, c, matrixNow); err != nil || len(evs) != 0 {
			t.Errorf("%s %+v: want no-op, got %v %v", c.CommandType(), c, evs, err)
		}
	}
	apply(t, &s, ReportRebootRequired{Required: true, Reason: "linux-image"})
	if !s.Reboot.Required || s.Reboot.Reason != "linux-image" {
		t.Fatalf("%+v", s.Reboot)
	}
}

func TestCasesOutsideTheMatrix(t *testing.T) {
	fx := fixtures()

	// Maintenance from ready_unassigned returns there; force-unassign ends it.
	s := build(fx["ready_unassigned"])
	apply(t, &s, SetMaintenance{Enabled: true})
	if s.Status != StatusMaintenance {
		t.Fatal(s.Status)
	}
	for _, c := range []Command{Unassign{}, ForceUnassign{}} {
		if evs, err := Decide(s, c, matrixNow); err != nil || len(evs) != 0 {
			t.Fatalf("%s without a pool: %v %v", c.CommandType(), evs, err)
		}
	}
	if _, err := Decide(s, AssignToPool{Pool: "p1"}, matrixNow); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("assign in maintenance: %v", err)
	}
	if evs, _ := Decide(s, Delete{}, matrixNow); evs[0].(Event).EventType() != "machine.deleted" {
		t.Fatal("no node: graceful deletion is immediate")
	}
	apply(t, &s, SetMaintenance{Enabled: false})
	if s.Status != StatusReadyUnassigned {
		t.Fatal(s.Status)
	}

	// A failed machine in maintenance stays failed afterwards, with its reason.
	s = build(fx["failed"])
	apply(t, &s, SetMaintenance{Enabled: true})
	apply(t, &s, CompleteMaintenanceEntry{})
	apply(t, &s, SetMaintenance{Enabled: false})
	if s.Status != StatusFailed || s.Failure == nil || s.Failure.Reason != "join timed out" {
		t.Fatalf("%+v", s)
	}

	// A failure after joining retries as a reconfiguration.
	s = build(fx["reconfiguring"])
	apply(t, &s, MarkFailed{Reason: "drain timed out: pod web-1 blocked by PDB web"})
	apply(t, &s, SetTargetRevision{Revision: 1}) // roll back
	if s.Status != StatusReconfiguring || s.Failure != nil || s.TargetRevision != 1 {
		t.Fatalf("%+v", s)
	}
	_, err := Decide(s, MarkReady{Revision: 2}, matrixNow)
	if !errs.Is(err, errs.KindConflict) || !strings.Contains(err.Error(), "target revision is 1") {
		t.Fatalf("mark ready at the wrong revision: %v", err)
	}

	// Unsafe deletions and prepared graceful ones cannot be aborted.
	s = build(fx["ready"])
	apply(t, &s, Delete{Policy: DeletionUnsafe})
	if _, err := Decide(s, AbortDeletion{}, matrixNow); !errs.Is(err, errs.KindConflict) {
		t.Fatal(err)
	}
	s = build(fx["deleting:completed"])
	apply(t, &s, FailDeletion{Reason: "node removal failed"})
	if _, err := Decide(s, AbortDeletion{}, matrixNow); !errs.Is(err, errs.KindConflict) || !strings.Contains(err.Error(), "preparation has completed") {
		t.Fatalf("abort after preparation: %v", err)
	}
	apply(t, &s, Delete{Policy: DeletionGraceful}) // retry
	if s.Deletion.Phase != PhaseStarted || !s.Deletion.Prepared || s.Deletion.Reason != "" {
		t.Fatalf("%+v", s.Deletion)
	}

	// An aborted deletion restores the exact previous status and failure.
	s = build(fx["failed"])
	apply(t, &s, Delete{})
	apply(t, &s, AbortDeletion{})
	apply(t, &s, CompleteDeletionAbort{})
	if s.Status != StatusFailed || s.Failure == nil || s.Deletion != nil {
		t.Fatalf("%+v", s)
	}

	// The default deletion policy is graceful; the message names the policy.
	s = build(fx["ready"])
	evs := apply(t, &s, Delete{})
	if evs[0].(DeletionStarted).Policy != DeletionGraceful {
		t.Fatal(evs)
	}
	_, err = Decide(s, AssignToPool{Pool: "p2"}, matrixNow)
	if msg := err.Error(); !strings.Contains(msg, fxUUID+" is deleting (policy graceful, phase started); it cannot be assigned to a pool") {
		t.Fatalf("message: %s", msg)
	}

	// A deleted machine can come back as a new one.
	s = build(fx["ready"])
	apply(t, &s, Delete{Policy: DeletionForced})
	apply(t, &s, Register{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0.Add(time.Hour)})
	if s.Status != StatusReadyUnassigned || s.Pool != "" || s.CurrentRevision != 0 {
		t.Fatalf("%+v", s)
	}
}

func TestConnectivityTransition(t *testing.T) {
	ready := build(fixtures()["ready"])
	now := matrixNow
	cases := []struct {
		name string
		conn Connectivity
		last time.Time
		want string
	}{
		{"never heartbeated", ConnectivityUnknown, time.Time{}, ""},
		{"first heartbeat", ConnectivityUnknown, now.Add(-time.Second), "machine.came_online"},
		{"silent, unknown", ConnectivityUnknown, now.Add(-time.Hour), "machine.went_offline"},
		{"still online", Online, now.Add(-30 * time.Second), ""},
		{"exactly at threshold", Online, now.Add(-time.Minute), ""},
		{"silent", Online, now.Add(-time.Minute - time.Nanosecond), "machine.went_offline"},
		{"still offline", Offline, now.Add(-time.Hour), ""},
		{"back", Offline, now.Add(-time.Second), "machine.came_online"},
		{"clock skew", Offline, now.Add(time.Second), "machine.came_online"},
	}
	for _, c := range cases {
		s := ready
		s.Connectivity = c.conn
		ev, due := ConnectivityTransition(s, c.last, time.Minute, now)
		got := ""
		if due {
			got = ev.EventType()
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if _, due := ConnectivityTransition(build(fixtures()["preregistered"]), now, time.Minute, now); due {
		t.Fatal("a pre-registered machine has no connectivity")
	}
	s := ready
	s.Apply(WentOffline{LastSeenAt: now.Add(-time.Hour), At: now})
	if s.Connectivity != Offline || !s.ConnectivitySince.Equal(now.Add(-time.Hour)) || s.Status != StatusReady {
		t.Fatalf("offline is not a status: %+v", s)
	}
}

func TestApplyIsTotal(t *testing.T) {
	s := build(fixtures()["ready"])
	before := s.Clone()
	s.Apply(nil)
	s.Apply(42)
	s.Apply((*Registered)(nil))
	s.Apply(struct{ EventType string }{"machine.registered"})
	if !reflect.DeepEqual(before, s) {
		t.Fatal("unknown events must be ignored")
	}
	s.Apply(&HostnameChanged{Hostname: "via-pointer"})
	if s.Hostname != "via-pointer" {
		t.Fatal("pointer events must apply")
	}
	var absent State
	absent.Apply(HostnameChanged{Hostname: "ghost"})
	absent.Apply(BecameReady{Revision: 1})
	if !reflect.DeepEqual(absent, State{}) {
		t.Fatal("events for a machine that does not exist are ignored")
	}
}

func TestEventsRoundTripJSON(t *testing.T) {
	names := map[string]bool{}
	for _, e := range EventTypes() {
		ev := e.(Event)
		if !strings.HasPrefix(ev.EventType(), "machine.") || names[ev.EventType()] {
			t.Errorf("bad or duplicate event type %q", ev.EventType())
		}
		names[ev.EventType()] = true
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(ev))
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Fatal(err)
		}
	}
	// Full state (as a snapshot would store it) survives JSON.
	s := build(fixtures()["deleting:failed"])
	apply(t, &s, ReportHardware{Hardware: sampleHardware(), At: t0})
	b, _ := json.Marshal(s)
	var back State
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("state JSON round trip: %v\n%+v\n%+v", err, s, back)
	}
}

func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{fxUUID, strings.ToUpper(fxUUID), "", "{" + fxUUID + "}", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "4c4c4544-0042-3510-8052-b4c04f4e313\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseUUID(s)
		if err != nil {
			if errs.FieldNames(err)[0] != "uuid" {
				t.Fatalf("error without the uuid field: %v", err)
			}
			return
		}
		if got != strings.ToLower(s) || len(got) != 36 {
			t.Fatalf("%q parsed as %q", s, got)
		}
		if again, err := ParseUUID(got); err != nil || again != got {
			t.Fatalf("canonical form must parse to itself: %q %v", again, err)
		}
	})
}

func FuzzValidateHostnameAndLabels(f *testing.F) {
	for _, s := range []string{"node-1", "", "a.b.c", "-x", "Ab", "example.com/rack", strings.Repeat("a", 70), "a/b/c", "é"} {
		f.Add(s, "value")
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		if err := ValidateHostname(key); err != nil {
			if len(errs.As(err).Fields) != 1 {
				t.Fatalf("hostname error must name one field: %v", err)
			}
		} else if len(key) == 0 || len(key) > MaxHostnameLen || strings.ToLower(key) != key {
			t.Fatalf("accepted hostname %q", key)
		}
		if err := ValidateLabels(map[string]string{key: value}); err != nil {
			for _, fe := range errs.As(err).Fields {
				if !strings.HasPrefix(fe.Field, "labels[") {
					t.Fatalf("label error on %q", fe.Field)
				}
			}
		}
	})
}

func TestNodeNameDefaultsToTheUUID(t *testing.T) {
	var s State
	apply(t, &s, Register{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0})
	if s.Hostname != "" || s.NodeName != fxUUID {
		t.Fatalf("a machine without a hostname is named by its UUID: hostname %q, node name %q", s.Hostname, s.NodeName)
	}
	apply(t, &s, SetHostname{Hostname: "worker-3"})
	if s.NodeName != "worker-3" {
		t.Fatalf("the hostname names the node: %q", s.NodeName)
	}
	if err := ValidateHostname(NodeNameOf("", fxUUID)); err != nil {
		t.Fatalf("the default node name must be a valid hostname: %v", err)
	}
}

func TestFailureRecordsTheStepWhateverTheStatus(t *testing.T) {
	s := stateIn(t, StatusReady)
	apply(t, &s, MarkFailed{Reason: "rollout ro-1: cordon: the API server refused the patch", Step: "cordon"})
	if s.Status != StatusFailed || s.Failure == nil || s.Failure.Step != "cordon" || s.Failure.During != StatusReady {
		t.Fatalf("a machine whose rollout failed while it was ready must be failed with the step: %+v", s.Failure)
	}
	// Retried, it is reconfigured (it had joined).
	apply(t, &s, SetTargetRevision{Revision: 2})
	if s.Status != StatusReconfiguring {
		t.Fatalf("retry of a machine that failed while ready: %s", s.Status)
	}
	if _, err := Decide(s, MarkFailed{Reason: "x", Step: strings.Repeat("s", 65)}, matrixNow); !reflect.DeepEqual(errs.FieldNames(err), []string{"step"}) {
		t.Fatalf("an oversized step must be refused naming the field: %v", err)
	}
}

func TestIPXEBootRecordsWhenTheFirmwareAsksAgain(t *testing.T) {
	var s State
	apply(t, &s, Register{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0})
	evs := apply(t, &s, RecordIPXEBoot{At: t0, RetryIn: 40 * time.Second})
	if len(evs) != 1 || !s.IPXERetryBy.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("the first boot's retry time must be recorded: %v %+v", evs, s.IPXERetryBy)
	}
	if evs := apply(t, &s, RecordIPXEBoot{At: t0, RetryIn: 40 * time.Second}); len(evs) != 0 {
		t.Fatalf("the same boot again must be a no-op: %v", evs)
	}
	apply(t, &s, RecordIPXEBoot{At: t0.Add(time.Minute), RetryIn: 5 * time.Minute})
	if !s.IPXERetryBy.Equal(t0.Add(6 * time.Minute)) {
		t.Fatalf("a later boot moves the retry time: %v", s.IPXERetryBy)
	}
	if _, err := Decide(s, RecordIPXEBoot{At: t0.Add(2 * time.Minute), RetryIn: -time.Second}, matrixNow); !reflect.DeepEqual(errs.FieldNames(err), []string{"retry_in"}) {
		t.Fatalf("a negative retry must be refused naming the field: %v", err)
	}
}

// stateIn builds a machine in status st from the matrix's fixtures.
func stateIn(t *testing.T, st Status) State {
	t.Helper()
	evs, ok := fixtures()[string(st)]
	if !ok {
		t.Fatalf("no fixture for %s", st)
	}
	return build(evs)
}

func TestReportAgentDecidesItsPartsTogether(t *testing.T) {
	s := build(fixtures()["ready"])
	apply(t, &s, ReportHardware{Hardware: sampleHardware(), At: t0})

	// Unchanged hardware is left out; the parts that changed are decided
	// in order, each on what the one before left.
	evs := apply(t, &s, ReportAgent{
		Hardware:       &ReportHardware{Hardware: sampleHardware(), At: t0.Add(time.Hour)},
		RebootRequired: &ReportRebootRequired{Required: true, Reason: "linux-image"},
		BootedRevision: &ReportBootedRevision{Revision: 2, At: t0.Add(time.Hour)},
	})
	if len(evs) != 2 {
		t.Fatalf("want the reboot indicator and the booted revision, got %v", evs)
	}
	if _, ok := evs[0].(RebootRequiredChanged); !ok {
		t.Fatalf("first event %T, want RebootRequiredChanged", evs[0])
	}
	if _, ok := evs[1].(RevisionBooted); !ok {
		t.Fatalf("second event %T, want RevisionBooted", evs[1])
	}
	if !s.Reboot.Required || s.CurrentRevision != 2 {
		t.Fatalf("%+v", s)
	}

	// Bad fields in several parts are all named, under their part (the
	// field's path in the command's JSON).
	_, err := Decide(s, ReportAgent{
		Hardware:       &ReportHardware{Hardware: Hardware{CPUs: 1, RAMBytes: 1, NICs: []NIC{{Name: "eth0", MAC: "zz"}}}},
		RebootRequired: &ReportRebootRequired{Required: true, Reason: "ok"},
		BootedRevision: &ReportBootedRevision{},
	}, matrixNow)
	want := []string{"hardware.hardware.nics[0].mac", "hardware.at", "booted_revision.revision", "booted_revision.at"}
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("fields %v, want %v (%v)", got, want, err)
	}
	if _, err := Decide(s, ReportAgent{}, matrixNow); !reflect.DeepEqual(errs.FieldNames(err), []string{"report"}) {
		t.Fatalf("an empty report: %v", err)
	}

	// A machine that cannot take a report takes none of it; bad fields
	// are named before that.
	pre := build(fixtures()["preregistered"])
	if evs, err := Decide(pre, ReportAgent{RebootRequired: &ReportRebootRequired{Required: true}}, matrixNow); !errs.Is(err, errs.KindConflict) || len(evs) != 0 {
		t.Fatalf("preregistered: want conflict, got %v %v", evs, err)
	}
	_, err = Decide(pre, ReportAgent{RebootRequired: &ReportRebootRequired{Required: true}, BootedRevision: &ReportBootedRevision{Revision: 2}}, matrixNow)
	if got := errs.FieldNames(err); !reflect.DeepEqual(got, []string{"booted_revision.at"}) {
		t.Fatalf("preregistered, a bad field in a later part: %v", err)
	}
}
