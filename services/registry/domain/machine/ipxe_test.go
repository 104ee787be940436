package machine

import (
	"encoding/json"
	"testing"
	"time"
)

func TestIPXEBootDue(t *testing.T) {
	const every = 10 * time.Minute
	registered := Registered{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, BootedAt: t0}
	waited := IPXEBooted{At: t0, RetryBy: t0.Add(5 * time.Minute)} // the last recorded boot: told to wait 5m
	booted := IPXEBooted{At: t0}                                   // the last recorded boot: not told to wait
	tests := []struct {
		name    string
		history []any
		at      time.Time
		retryIn time.Duration
		every   time.Duration
		due     bool
	}{
		{"a retry within the interval that changes nothing", []any{registered, waited}, t0.Add(9 * time.Minute), 5 * time.Minute, every, false},
		{"jitter is the same wait", []any{registered, waited}, t0.Add(time.Minute), 4 * time.Minute, every, false},
		{"jitter is the same wait, up", []any{registered, waited}, t0.Add(time.Minute), 6 * time.Minute, every, false},
		{"a boot without a wait after one without", []any{registered, booted}, t0.Add(time.Minute), 0, every, false},
		{"the interval has passed", []any{registered, waited}, t0.Add(every), 5 * time.Minute, every, true},
		{"long after", []any{registered, waited}, t0.Add(24 * time.Hour), 5 * time.Minute, every, true},
		{"the wait more than doubled", []any{registered, waited}, t0.Add(time.Minute), 11 * time.Minute, every, true},
		{"the wait more than halved", []any{registered, waited}, t0.Add(time.Minute), 2 * time.Minute, every, true},
		{"the firmware is no longer told to wait (it boots)", []any{registered, waited}, t0.Add(time.Minute), 0, every, true},
		{"the firmware is told to wait again", []any{registered, booted}, t0.Add(time.Minute), 5 * time.Second, every, true},
		{"its status changed since", []any{registered, waited, AssignedToPool{Pool: "p1"}}, t0.Add(time.Minute), 5 * time.Minute, every, true},
		{"a target revision since", []any{registered, AssignedToPool{Pool: "p1"}, waited, TargetRevisionSet{Revision: 1}}, t0.Add(time.Minute), 5 * time.Minute, every, true},
		{"a label changed since", []any{registered, waited, LabelsChanged{Labels: map[string]string{"a": "b"}}}, t0.Add(time.Minute), 5 * time.Minute, every, true},
		{"it went offline since", []any{registered, waited, WentOffline{LastSeenAt: t0, At: t0}}, t0.Add(time.Minute), 5 * time.Minute, every, true},
		{"only its registration is recorded", []any{registered}, t0.Add(time.Minute), 5 * time.Minute, every, true},
		{"no interval: every boot", []any{registered, waited}, t0.Add(time.Second), 5 * time.Minute, 0, true},
		{"a negative interval: every boot", []any{registered, waited}, t0.Add(time.Second), 5 * time.Minute, -time.Second, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := build(tc.history)
			if got := IPXEBootDue(s, tc.at, tc.retryIn, tc.every); got != tc.due {
				t.Fatalf("IPXEBootDue = %v, want %v", got, tc.due)
			}
			evs, err := Decide(s, RecordIPXEBoot{At: tc.at, RetryIn: tc.retryIn, RecordEvery: tc.every}, matrixNow)
			if err != nil || (len(evs) == 1) != tc.due || len(evs) > 1 {
				t.Fatalf("Decide: %v %v, want an event: %v", evs, err, tc.due)
			}
		})
	}
}

// A machine that waits an hour in its boot loop, asking every 5 minutes
// (give or take the jitter), records one boot per interval.
func TestIPXERetriesAreRecordedOncePerInterval(t *testing.T) {
	var s State
	apply(t, &s, Register{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, At: t0})
	recorded := 0
	waits := []time.Duration{4 * time.Minute, 5 * time.Minute, 6 * time.Minute}
	for i := range 12 {
		evs := apply(t, &s, RecordIPXEBoot{At: t0.Add(time.Duration(i) * 5 * time.Minute), RetryIn: waits[i%3], RecordEvery: 10 * time.Minute})
		recorded += len(evs)
	}
	// t0 (the first boot after the registration), 10m, 20m, … 50m
	if recorded != 6 {
		t.Fatalf("%d boots recorded in an hour of 5-minute retries, want 6 (one per 10 minutes)", recorded)
	}
	if !s.LastIPXEBootAt.Equal(t0.Add(50 * time.Minute)) {
		t.Fatalf("last recorded boot at %v", s.LastIPXEBootAt)
	}
	// As soon as something changes, the next boot is recorded.
	apply(t, &s, AssignToPool{Pool: "p1"})
	if evs := apply(t, &s, RecordIPXEBoot{At: t0.Add(56 * time.Minute), RetryIn: 5 * time.Minute, RecordEvery: 10 * time.Minute}); len(evs) != 1 {
		t.Fatalf("the boot after an assignment must be recorded: %v", evs)
	}
}

// The mark that IPXEBootDue reads is not part of the machine's JSON: a
// state read back from the API or a snapshot records its next boot.
func TestIPXEMarkIsNotShown(t *testing.T) {
	s := build([]any{Registered{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, BootedAt: t0}, IPXEBooted{At: t0, RetryBy: t0.Add(time.Minute)}})
	if IPXEBootDue(s, t0.Add(time.Second), time.Minute, time.Hour) {
		t.Fatal("a quiet machine must not record a retry")
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !IPXEBootDue(back, t0.Add(time.Second), time.Minute, time.Hour) {
		t.Fatal("a state without its mark must record the next boot")
	}
}

func TestWithIPXEBootShowsTheLatestBoot(t *testing.T) {
	s := build([]any{Registered{UUID: fxUUID, MAC: fxMAC, EnrollmentTokenID: fxToken, BootedAt: t0}, IPXEBooted{At: t0, RetryBy: t0.Add(time.Minute)}})
	for _, tc := range []struct {
		name           string
		at, retryBy    time.Time
		wantAt, wantBy time.Time
	}{
		{"a later boot told to wait", t0.Add(5 * time.Minute), t0.Add(10 * time.Minute), t0.Add(5 * time.Minute), t0.Add(10 * time.Minute)},
		{"a later boot not told to wait keeps the retry time", t0.Add(5 * time.Minute), time.Time{}, t0.Add(5 * time.Minute), t0.Add(time.Minute)},
		{"the recorded boot", t0, t0.Add(time.Minute), t0, t0.Add(time.Minute)},
		{"an older boot", t0.Add(-time.Minute), t0.Add(time.Hour), t0, t0.Add(time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.WithIPXEBoot(tc.at, tc.retryBy)
			if !got.LastIPXEBootAt.Equal(tc.wantAt) || !got.IPXERetryBy.Equal(tc.wantBy) {
				t.Fatalf("shows %v / %v, want %v / %v", got.LastIPXEBootAt, got.IPXERetryBy, tc.wantAt, tc.wantBy)
			}
		})
	}
	if got := (State{}).WithIPXEBoot(t0, t0); got.Exists() || !got.LastIPXEBootAt.IsZero() {
		t.Fatalf("a machine that does not exist shows nothing: %+v", got)
	}
}
