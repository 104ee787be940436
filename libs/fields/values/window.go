package values

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones must resolve the same on every host, including scratch images
)

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

// Problems lists what is wrong with the window, field by field; none for
// a valid one.
func (w Window) Problems() []Problem {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(w.Days) == 0 {
		add("days", "list at least one day (mon, tue, wed, thu, fri, sat, sun)")
	}
	seen := map[string]bool{}
	for i, d := range w.Days {
		_, known := weekdays[d]
		switch {
		case !known:
			add(fmt.Sprintf("days[%d]", i), "must be one of mon, tue, wed, thu, fri, sat, sun, got %q", d)
		case seen[d]:
			add(fmt.Sprintf("days[%d]", i), "%q is listed twice", d)
		}
		seen[d] = true
	}
	start, errS := clock(w.Start)
	if errS != nil {
		add("start", "%v", errS)
	}
	end, errE := clock(w.End)
	if errE != nil {
		add("end", "%v", errE)
	}
	if errS == nil && errE == nil && start == end {
		add("end", "must differ from start (a window cannot be empty or a full day; list the days instead)")
	}
	if w.TimeZone == "" {
		add("time_zone", "must be an IANA time zone such as Europe/Zurich or UTC")
	} else if _, err := loadZone(w.TimeZone); err != nil {
		add("time_zone", "unknown IANA time zone %q", w.TimeZone)
	}
	return ps
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
