package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones must resolve the same on every host, including scratch images

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Rollout holds how revisions of this pool are rolled out. None of it
// needs a reboot, so changing it never makes a revision.
type Rollout struct {
	MaxUnavailable     IntOrPercent `json:"max_unavailable,omitempty"`
	Pause              Duration     `json:"pause,omitempty"`
	DrainTimeout       Duration     `json:"drain_timeout,omitempty"`
	DrainGracePeriod   *Duration    `json:"drain_grace_period,omitempty"` // nil: each pod's own terminationGracePeriodSeconds
	NodeReadyTimeout   Duration     `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []Window     `json:"maintenance_windows,omitempty"`
	// Remediation is whether a rollout gives a machine that booted but
	// never came back one more reboot; nil leaves it to the rollout
	// service (--remediation-max-in-flight).
	Remediation *Remediation `json:"remediation,omitempty"`
}

// Remediation is a pool's remediation setting: at most MaxInFlight
// machines of a rollout are remediated at a time (one more reboot into
// the revision, once per machine, when wait_boot or wait_ready timed
// out); 0 turns remediation off.
type Remediation struct {
	MaxInFlight int `json:"max_in_flight"`
}

// MaxRemediationInFlight bounds Remediation.MaxInFlight (as the rollout
// service bounds its flag).
const MaxRemediationInFlight = 1000

// ResolveRemediation is how many machines of a rollout may be remediated
// at a time: the pool's setting, or fallback (the rollout service's
// default) when the pool has none. 0: off.
func (r Rollout) ResolveRemediation(fallback int) int {
	if r.Remediation == nil {
		return fallback
	}
	return r.Remediation.MaxInFlight
}

// Rollout defaults.
const (
	DefaultMaxUnavailable   = IntOrPercent("1")
	DefaultDrainTimeout     = Duration(15 * time.Minute)
	DefaultNodeReadyTimeout = Duration(2 * time.Hour)
)

// WithDefaults fills unset fields. A drain always has a timeout: a drain
// that can hang forever on a PodDisruptionBudget is the bug we avoid.
func (r Rollout) WithDefaults() Rollout {
	if r.MaxUnavailable == "" {
		r.MaxUnavailable = DefaultMaxUnavailable
	}
	if r.DrainTimeout == 0 {
		r.DrainTimeout = DefaultDrainTimeout
	}
	if r.NodeReadyTimeout == 0 {
		r.NodeReadyTimeout = DefaultNodeReadyTimeout
	}
	return r
}

// Validate checks a rollout strategy (after defaults).
func (r Rollout) Validate() error {
	var f errs.Fields
	if r.MaxUnavailable != "" {
		if _, _, err := r.MaxUnavailable.parse(); err != nil {
			f.Add("max_unavailable", "%v", err)
		}
	}
	if r.Pause < 0 || r.Pause > Duration(24*time.Hour) {
		f.Add("pause", "must be between 0s and 24h, got %s", r.Pause)
	}
	if r.DrainTimeout < 0 || r.DrainTimeout > Duration(24*time.Hour) {
		f.Add("drain_timeout", "must be between 1s and 24h, got %s", r.DrainTimeout)
	} else if r.DrainTimeout != 0 && r.DrainTimeout < Duration(time.Second) {
		f.Add("drain_timeout", "must be at least 1s, got %s", r.DrainTimeout)
	}
	if g := r.DrainGracePeriod; g != nil && (*g < 0 || *g > Duration(24*time.Hour)) {
		f.Add("drain_grace_period", "must be between 0s and 24h, got %s", *g)
	}
	if r.NodeReadyTimeout < 0 || r.NodeReadyTimeout > Duration(24*time.Hour) {
		f.Add("node_ready_timeout", "must be between 1m and 24h, got %s", r.NodeReadyTimeout)
	} else if r.NodeReadyTimeout != 0 && r.NodeReadyTimeout < Duration(time.Minute) {
		f.Add("node_ready_timeout", "must be at least 1m, got %s", r.NodeReadyTimeout)
	}
	if m := r.Remediation; m != nil && (m.MaxInFlight < 0 || m.MaxInFlight > MaxRemediationInFlight) {
		f.Add("remediation.max_in_flight", "must be between 0 (off) and %d, got %d", MaxRemediationInFlight, m.MaxInFlight)
	}
	if len(r.MaintenanceWindows) > 32 {
		f.Add("maintenance_windows", "at most 32 windows, got %d", len(r.MaintenanceWindows))
	}
	for i, w := range r.MaintenanceWindows {
		f.Merge(fmt.Sprintf("maintenance_windows[%d]", i), w.Validate())
	}
	return f.Err()
}

// IntOrPercent is a count ("3") or a percentage of the pool ("25%"). In
// JSON it is a number or a string.
type IntOrPercent string

func (v IntOrPercent) parse() (n int, percent bool, err error) {
	s := string(v)
	percent = strings.HasSuffix(s, "%")
	num := strings.TrimSuffix(s, "%")
	if num == "" || len(num) > 9 || strings.TrimLeft(num, "0123456789") != "" {
		return 0, false, fmt.Errorf("must be an integer >= 0 or a percentage 0%%-100%% such as \"25%%\", got %q", s)
	}
	n, _ = strconv.Atoi(num)
	if percent && n > 100 {
		return 0, false, fmt.Errorf("percentage must be between 0%% and 100%%, got %q", s)
	}
	return n, percent, nil
}

// Resolve turns the value into a number of machines for a pool of size
// total. Percentages round down, and the result is at least 1 (bare metal
// cannot surge, so 0 would stall every rollout) and at most total.
func (v IntOrPercent) Resolve(total int) int {
	if total <= 0 {
		return 0
	}
	n, percent, err := v.parse()
	if err != nil {
		n, percent = 1, false
	}
	if percent {
		n = n * total / 100
	}
	return max(1, min(n, total))
}

func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	if n, percent, err := v.parse(); err == nil && !percent {
		return []byte(strconv.Itoa(n)), nil
	}
	return json.Marshal(string(v))
}

func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*v = IntOrPercent(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("max_unavailable must be a number or a string")
	}
	*v = IntOrPercent(s)
	return nil
}

// Duration is a time.Duration written as a Go duration string ("90s").
type Duration time.Duration

func (d Duration) String() string               { return time.Duration(d).String() }
func (d Duration) Std() time.Duration           { return time.Duration(d) }
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = 0
		return nil
	}
	x, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"90s\" or \"15m\"", b)
	}
	*d = Duration(x)
	return nil
}

// Window is a recurring maintenance window: on each listed day, from Start
// to End wall-clock time in TimeZone. End at or before Start means the
// window runs past midnight into the next day.
type Window struct {
	Days     []string `json:"days"`
	Start    string   `json:"start"` // "22:00"
	End      string   `json:"end"`   // "04:00"
	TimeZone string   `json:"time_zone"`
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// Validate checks one window.
func (w Window) Validate() error {
	var f errs.Fields
	if len(w.Days) == 0 {
		f.Add("days", "list at least one day (mon, tue, wed, thu, fri, sat, sun)")
	}
	seen := map[string]bool{}
	for i, d := range w.Days {
		_, known := weekdays[d]
		switch {
		case !known:
			f.Add(fmt.Sprintf("days[%d]", i), "must be one of mon, tue, wed, thu, fri, sat, sun, got %q", d)
		case seen[d]:
			f.Add(fmt.Sprintf("days[%d]", i), "%q is listed twice", d)
		}
		seen[d] = true
	}
	start, errS := clock(w.Start)
	if errS != nil {
		f.Add("start", "%v", errS)
	}
	end, errE := clock(w.End)
	if errE != nil {
		f.Add("end", "%v", errE)
	}
	if errS == nil && errE == nil && start == end {
		f.Add("end", "must differ from start (a window cannot be empty or a full day; list the days instead)")
	}
	if w.TimeZone == "" {
		f.Add("time_zone", "must be an IANA time zone such as Europe/Zurich or UTC")
	} else if _, err := loadZone(w.TimeZone); err != nil {
		f.Add("time_zone", "unknown IANA time zone %q", w.TimeZone)
	}
	return f.Err()
}

func loadZone(name string) (*time.Location, error) {
	// time.LoadLocation also accepts "Local" and "" which mean the host's
	// zone; a pool setting must not depend on where it is evaluated.
	if name == "" || name == "Local" || strings.ContainsAny(name, "\x00\\") || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, errors.New("not an IANA zone")
	}
	return time.LoadLocation(name)
}

// clock parses "HH:MM" into minutes since midnight.
func clock(s string) (int, error) {
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("must be a time of day HH:MM (24h), got %q", s)
	}
	h, errH := strconv.Atoi(s[:2])
	m, errM := strconv.Atoi(s[3:])
	if errH != nil || errM != nil || h < 0 || h > 23 || m < 0 || m > 59 || s[0] == '+' || s[3] == '+' || s[0] == '-' || s[3] == '-' {
		return 0, fmt.Errorf("must be a time of day HH:MM (24h), got %q", s)
	}
	return h*60 + m, nil
}

// Contains reports whether t falls inside the window. An invalid window
// contains nothing.
func (w Window) Contains(t time.Time) bool {
	loc, err := loadZone(w.TimeZone)
	if err != nil {
		return false
	}
	start, err1 := clock(w.Start)
	end, err2 := clock(w.End)
	if err1 != nil || err2 != nil || start == end {
		return false
	}
	local := t.In(loc)
	now := local.Hour()*60 + local.Minute()
	today := local.Weekday()
	if start < end {
		return w.on(today) && now >= start && now < end
	}
	// Past midnight: the evening part belongs to today, the morning part to
	// the window that started yesterday.
	return (w.on(today) && now >= start) || (w.on((today+6)%7) && now < end)
}

func (w Window) on(d time.Weekday) bool {
	for _, s := range w.Days {
		if wd, ok := weekdays[s]; ok && wd == d {
			return true
		}
	}
	return false
}

// InMaintenanceWindow reports whether t is inside any window. With no
// windows a pool may be rolled out at any time.
func InMaintenanceWindow(windows []Window, t time.Time) bool {
	if len(windows) == 0 {
		return true
	}
	for _, w := range windows {
		if w.Contains(t) {
			return true
		}
	}
	return false
}
