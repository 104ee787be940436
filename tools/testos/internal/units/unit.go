package units

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SearchPath is where systemd looks for system units, highest priority
// first (with /usr merged, /lib/systemd/system is the same directory).
var SearchPath = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system"}

// ErrNotFound means no unit file exists for the name.
var ErrNotFound = errors.New("no unit file")

// Unit is a service unit as systemd would load it: the unit file with all
// its drop-ins applied.
type Unit struct {
	Name    string
	Path    string   // the unit file, relative to the root ("/etc/systemd/system/x.service")
	DropIns []string // drop-in files applied, in order
	Masked  bool     // a /dev/null link: never started

	Description              string
	After, Before            []string
	Requires, Wants          []string
	ConditionPathExists      []string // "!" prefix negates
	UnsupportedConditions    []string // Condition*/Assert* lines the test OS does not evaluate
	WantedBy, RequiredBy     []string
	Type                     string // simple (default), exec, oneshot, notify, forking, idle
	ExecStartPre, ExecStart  []string
	Environment              []string      // KEY=VALUE in order
	EnvironmentFiles         []string      // as written; a "-" prefix means optional
	Restart                  string        // no (default), always, on-failure, ...
	RestartDelay             time.Duration // RestartSec=
	RemainAfterExit          bool
	WorkingDirectory         string
	IgnoredServiceDirectives []string // [Service] keys this test OS does not implement
}

// Load reads the unit name under root. A unit whose highest-priority file
// is a link to /dev/null is returned with Masked set and nothing else.
func Load(root, name string) (*Unit, error) {
	u := &Unit{Name: name, Type: "simple", Restart: "no", RestartDelay: 100 * time.Millisecond}
	for _, dir := range SearchPath {
		p := path.Join(dir, name)
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(filepath.Join(root, p)); err == nil && target == "/dev/null" {
				u.Masked = true
				return u, nil
			}
		}
		u.Path = p
		break
	}
	if u.Path == "" {
		return nil, fmt.Errorf("%s: %w in %s", name, ErrNotFound, strings.Join(SearchPath, ", "))
	}

	// Drop-ins: the same file name in a higher-priority directory replaces
	// a lower one; all are applied in file-name order.
	byName := map[string]string{}
	for _, dir := range SearchPath {
		d := path.Join(dir, name+".d")
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".conf") {
				if _, ok := byName[e.Name()]; !ok {
					byName[e.Name()] = path.Join(d, e.Name())
				}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)

	files := []string{u.Path}
	for _, n := range names {
		u.DropIns = append(u.DropIns, byName[n])
		files = append(files, byName[n])
	}
	for _, f := range files {
		data, err := readIn(root, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		as, err := ParseINI(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, a := range as {
			if err := u.apply(a); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", f, a.Line, err)
			}
		}
	}
	return u, nil
}

// readIn reads p under root, resolving symlinks inside root (an absolute
// link target is taken relative to root, as in a chroot).
func readIn(root, p string) ([]byte, error) {
	for range 40 {
		full := filepath.Join(root, p)
		fi, err := os.Lstat(full)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return os.ReadFile(full)
		}
		target, err := os.Readlink(full)
		if err != nil {
			return nil, err
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = target
	}
	return nil, fmt.Errorf("%s: too many levels of symbolic links", p)
}

// listValue appends the words of v to *list, or clears it when v is
// empty (systemd's reset rule for list settings).
func listValue(list *[]string, v string) {
	if v == "" {
		*list = nil
		return
	}
	*list = append(*list, strings.Fields(v)...)
}

func (u *Unit) apply(a Assignment) error {
	switch a.Section {
	case "Unit":
		switch a.Key {
		case "Description":
			u.Description = a.Value
		case "After":
			listValue(&u.After, a.Value)
		case "Before":
			listValue(&u.Before, a.Value)
		case "Requires", "BindsTo", "Requisite":
			listValue(&u.Requires, a.Value)
		case "Wants":
			listValue(&u.Wants, a.Value)
		case "ConditionPathExists":
			if a.Value == "" {
				u.ConditionPathExists = nil
			} else {
				u.ConditionPathExists = append(u.ConditionPathExists, a.Value)
			}
		default:
			if strings.HasPrefix(a.Key, "Condition") || strings.HasPrefix(a.Key, "Assert") {
				u.UnsupportedConditions = append(u.UnsupportedConditions, a.Key+"="+a.Value)
			}
		}
	case "Install":
		switch a.Key {
		case "WantedBy":
			listValue(&u.WantedBy, a.Value)
		case "RequiredBy":
			listValue(&u.RequiredBy, a.Value)
		}
	case "Service":
		switch a.Key {
		case "Type":
			u.Type = a.Value
		case "ExecStart":
			if a.Value == "" {
				u.ExecStart = nil
			} else {
				u.ExecStart = append(u.ExecStart, a.Value)
			}
		case "ExecStartPre":
			if a.Value == "" {
				u.ExecStartPre = nil
			} else {
				u.ExecStartPre = append(u.ExecStartPre, a.Value)
			}
		case "Environment":
			if a.Value == "" {
				u.Environment = nil
				return nil
			}
			words, err := SplitWords(a.Value)
			if err != nil {
				return fmt.Errorf("in Environment=: %w", err)
			}
			for _, w := range words {
				if !strings.Contains(w, "=") {
					return fmt.Errorf("in Environment=: %q is not KEY=VALUE", w)
				}
			}
			u.Environment = append(u.Environment, words...)
		case "EnvironmentFile":
			if a.Value == "" {
				u.EnvironmentFiles = nil
			} else {
				u.EnvironmentFiles = append(u.EnvironmentFiles, a.Value)
			}
		case "Restart":
			u.Restart = a.Value
		case "RestartSec":
			d, err := ParseTimespan(a.Value)
			if err != nil {
				return fmt.Errorf("in RestartSec=: %w", err)
			}
			u.RestartDelay = d
		case "RemainAfterExit":
			u.RemainAfterExit = parseBool(a.Value)
		case "WorkingDirectory":
			u.WorkingDirectory = a.Value
		default:
			u.IgnoredServiceDirectives = append(u.IgnoredServiceDirectives, a.Key)
		}
	}
	return nil
}

func parseBool(s string) bool {
	switch strings.ToLower(s) {
	case "1", "yes", "true", "on", "y", "t":
		return true
	}
	return false
}

// ParseTimespan reads systemd time spans: "5", "5s", "100ms", "1min 30s".
// A bare number is seconds.
func ParseTimespan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty time span")
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	units := []struct {
		suffix string
		d      time.Duration
	}{
		{"usec", time.Microsecond}, {"us", time.Microsecond}, {"msec", time.Millisecond}, {"ms", time.Millisecond},
		{"seconds", time.Second}, {"second", time.Second}, {"sec", time.Second}, {"s", time.Second},
		{"minutes", time.Minute}, {"minute", time.Minute}, {"min", time.Minute}, {"m", time.Minute},
		{"hours", time.Hour}, {"hour", time.Hour}, {"hr", time.Hour}, {"h", time.Hour},
	}
	var total time.Duration
	rest := strings.ReplaceAll(s, " ", "")
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("bad time span %q", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("bad time span %q", s)
		}
		rest = rest[i:]
		matched := false
		for _, u := range units {
			if strings.HasPrefix(rest, u.suffix) {
				total += time.Duration(n * float64(u.d))
				rest = rest[len(u.suffix):]
				matched = true
				break
			}
		}
		if !matched {
			return 0, fmt.Errorf("bad time span %q", s)
		}
	}
	return total, nil
}
