package machine

import "time"

// ipxeMark is what the machine's last event says about its iPXE boots.
type ipxeMark struct {
	// quiet: the last event is the last recorded iPXE boot, so nothing
	// else has happened to the machine since.
	quiet bool
	// retryIn is how long that boot told the firmware to wait (0: it was
	// not told to wait).
	retryIn time.Duration
}

func markIPXE(event any) ipxeMark {
	e, ok := event.(IPXEBooted)
	if !ok {
		return ipxeMark{}
	}
	m := ipxeMark{quiet: true}
	if !e.RetryBy.IsZero() && e.RetryBy.After(e.At) {
		m.retryIn = e.RetryBy.Sub(e.At)
	}
	return m
}

// IPXEBootDue reports whether an iPXE boot at `at`, whose firmware was told
// to ask again in retryIn (0: not told to wait), is recorded as an event
// (machine.ipxe_booted) when boots that change nothing are recorded at most
// once per every.
//
// A machine waiting in its iPXE loop asks again every few minutes for as
// long as it waits; recording each request would grow the log by hundreds
// of events a day per machine, none of which ever ages out. So a boot is
// recorded when:
//   - every is not positive (each boot is recorded);
//   - the machine has no recorded boot;
//   - anything else happened to the machine since its last recorded boot
//     (any other event: a new status, pool, target revision, label, a
//     report of its agent…);
//   - the firmware starts or stops being told to wait, or the wait is more
//     than twice or less than half the recorded one (the boot service's
//     back-off doubles; its ±20 % jitter stays within that);
//   - or the last recorded boot is at least every old.
//
// A boot that is not recorded still counts: the registry keeps the time of
// each machine's latest boot, and its retry time, outside the log (as it
// keeps heartbeats), and shows them as last_ipxe_boot_at and ipxe_retry_by.
func IPXEBootDue(s State, at time.Time, retryIn, every time.Duration) bool {
	switch {
	case every <= 0, s.LastIPXEBootAt.IsZero(), !s.ipxe.quiet:
		return true
	case !sameWait(s.ipxe.retryIn, retryIn):
		return true
	}
	return at.Sub(s.LastIPXEBootAt) >= every
}

// sameWait reports whether two retry delays are the same wait, give or
// take the boot service's jitter.
func sameWait(a, b time.Duration) bool {
	if a <= 0 || b <= 0 {
		return a <= 0 && b <= 0
	}
	return a <= 2*b && b <= 2*a
}

// WithIPXEBoot returns s as it shows an iPXE boot at `at` whose firmware
// was told to ask again by retryBy (zero: not told to wait): a boot that
// IPXEBootDue left out of the log. A boot no later than the last recorded
// one changes nothing.
func (s State) WithIPXEBoot(at, retryBy time.Time) State {
	if !s.Exists() || !at.After(s.LastIPXEBootAt) {
		return s
	}
	s.LastIPXEBootAt = at.UTC()
	if !retryBy.IsZero() {
		s.IPXERetryBy = retryBy.UTC()
	}
	return s
}
