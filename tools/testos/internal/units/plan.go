package units

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// PresetDirs are systemd's system preset directories, highest priority
// first. Ignition writes /etc/systemd/system-preset/20-ignition.preset.
var PresetDirs = []string{"/etc/systemd/system-preset", "/run/systemd/system-preset", "/usr/lib/systemd/system-preset"}

// BootTargets are the targets a default boot into multi-user.target
// reaches; a unit installed into one of them is started.
var BootTargets = []string{
	"default.target", "multi-user.target", "basic.target", "sysinit.target", "sockets.target",
	"timers.target", "paths.target", "local-fs.target", "remote-fs.target", "network.target",
	"network-online.target", "network-pre.target",
}

// PresetRule is one "enable"/"disable" line of a preset file.
type PresetRule struct {
	Enable  bool
	Pattern string // a glob, e.g. "anvil-agent.service" or "*"
	File    string
}

// Presets reads every *.preset file under root in systemd's order: by file
// name across PresetDirs, a name in a higher-priority directory masking
// the same name in a lower one.
func Presets(root string) ([]PresetRule, error) {
	byName := map[string]string{}
	for _, dir := range PresetDirs {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".preset") {
				if _, ok := byName[e.Name()]; !ok {
					byName[e.Name()] = path.Join(dir, e.Name())
				}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	var rules []PresetRule
	for _, n := range names {
		data, err := readIn(root, byName[n])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", byName[n], err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for ln := 1; sc.Scan(); ln++ {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
				continue
			}
			if len(f) < 2 || (f[0] != "enable" && f[0] != "disable") {
				return nil, fmt.Errorf("%s:%d: want \"enable <unit>\" or \"disable <unit>\"", byName[n], ln)
			}
			rules = append(rules, PresetRule{Enable: f[0] == "enable", Pattern: f[1], File: byName[n]})
		}
	}
	return rules, nil
}

// PresetEnabled applies the first rule that matches name. Without a
// match a unit is disabled: Flatcar ships "disable *" as its last preset.
func PresetEnabled(rules []PresetRule, name string) bool {
	for _, r := range rules {
		if ok, _ := path.Match(r.Pattern, name); ok {
			return r.Enable
		}
	}
	return false
}

// WantsLinks returns the units linked into the .wants/ and .requires/
// directories of the boot targets under /etc/systemd/system (how
// `systemctl enable` records enablement).
func WantsLinks(root string) []string {
	var out []string
	for _, t := range BootTargets {
		for _, kind := range []string{".wants", ".requires"} {
			entries, err := os.ReadDir(filepath.Join(root, "/etc/systemd/system", t+kind))
			if err != nil {
				continue
			}
			for _, e := range entries {
				out = append(out, e.Name())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Decision says what the init does with one unit.
type Decision struct {
	Name   string
	Unit   *Unit  // nil when the unit could not be loaded
	Start  bool   // false: skipped, see Reason
	Reason string // why it is skipped, or why it is started

	// For units that start: the environment and the commands, resolved
	// against the root (Exec paths are inside the root).
	Env          []string
	ExecStartPre []Command
	ExecStart    []Command
}

// Plan works out the services a first boot starts: units enabled by a
// preset and installed into a boot target, units linked into a boot
// target's .wants/, and the services those require or want. Decisions come
// in start order (After=/Before= respected among them, ties by name);
// skipped units and masked units come with the reason, for the console.
func Plan(root string) ([]Decision, error) {
	rules, err := Presets(root)
	if err != nil {
		return nil, err
	}
	decisions := map[string]*Decision{}
	var queue []string
	want := func(name, why string) {
		if _, ok := decisions[name]; ok {
			return
		}
		decisions[name] = &Decision{Name: name, Start: true, Reason: why}
		queue = append(queue, name)
	}

	// Candidates from presets: every unit a preset names explicitly (a
	// glob like "disable *" enables nothing).
	var presetNames []string
	for _, r := range rules {
		if r.Enable && !strings.ContainsAny(r.Pattern, "*?[") {
			presetNames = append(presetNames, r.Pattern)
		}
	}
	slices.Sort(presetNames)
	for _, n := range slices.Compact(presetNames) {
		if PresetEnabled(rules, n) {
			want(n, "enabled by preset")
		}
	}
	for _, n := range WantsLinks(root) {
		want(n, "linked into a boot target")
	}

	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		d := decisions[name]
		if !strings.HasSuffix(name, ".service") {
			d.Start = false
			d.Reason = "only .service units are started by this test OS"
			continue
		}
		u, err := Load(root, name)
		if err != nil {
			d.Start = false
			if errors.Is(err, ErrNotFound) {
				d.Reason = "no unit file for it in " + strings.Join(SearchPath, ", ") + " (it is not part of this test OS)"
			} else {
				d.Reason = err.Error()
			}
			continue
		}
		d.Unit = u
		if u.Masked {
			d.Start = false
			d.Reason = "masked"
			continue
		}
		if d.Reason == "enabled by preset" && !installedIntoBoot(u) {
			d.Start = false
			d.Reason = "enabled by preset but not installed into a boot target ([Install] WantedBy=/RequiredBy=), so systemd would not start it"
			continue
		}
		for _, dep := range append(slices.Clone(u.Requires), u.Wants...) {
			if strings.HasSuffix(dep, ".service") {
				want(dep, "pulled in by "+name)
			}
		}
	}

	names := make([]string, 0, len(decisions))
	for n := range decisions {
		names = append(names, n)
	}
	slices.Sort(names)
	ordered := order(names, decisions)
	for _, n := range ordered {
		if d := decisions[n]; d.Start {
			prepare(root, d)
		}
	}
	// A unit that requires a skipped unit is skipped too, transitively.
	for changed := true; changed; {
		changed = false
		for _, n := range ordered {
			d := decisions[n]
			if !d.Start {
				continue
			}
			for _, dep := range d.Unit.Requires {
				if why := requirementMissing(dep, decisions); why != "" {
					d.Start, d.Reason, changed = false, why, true
					break
				}
			}
		}
	}
	out := make([]Decision, 0, len(ordered))
	for _, n := range ordered {
		out = append(out, *decisions[n])
	}
	return out, nil
}

// prepare resolves a unit's environment and commands, or marks it skipped
// with the reason (a missing binary says that it is not part of this OS).
func prepare(root string, d *Decision) {
	u := d.Unit
	if len(u.ExecStart) == 0 {
		d.Start, d.Reason = false, "it has no ExecStart="
		return
	}
	env, err := u.Env(root)
	if err != nil {
		d.Start, d.Reason = false, err.Error()
		return
	}
	d.Env = env
	vars := EnvMap(env)
	parse := func(lines []string) ([]Command, bool) {
		var cmds []Command
		for _, line := range lines {
			c, err := ParseCommand(line, vars)
			if err != nil {
				d.Start, d.Reason = false, fmt.Sprintf("cannot parse %q: %v", line, err)
				return nil, false
			}
			p, err := Resolve(root, c)
			if err != nil {
				d.Start, d.Reason = false, c.Path+" is not part of this test OS ("+err.Error()+")"
				if path.IsAbs(c.Path) {
					d.Reason = c.Path + " is not part of this test OS"
				}
				return nil, false
			}
			c.Path = p
			cmds = append(cmds, c)
		}
		return cmds, true
	}
	var ok bool
	if d.ExecStartPre, ok = parse(u.ExecStartPre); !ok {
		return
	}
	if d.ExecStart, ok = parse(u.ExecStart); !ok {
		return
	}
	if len(d.ExecStart) > 1 && u.Type != "oneshot" {
		d.Start, d.Reason = false, "more than one ExecStart= is only allowed for Type=oneshot"
	}
}

// requirementMissing returns why the required unit dep keeps a unit from
// starting, or "" if it does not.
func requirementMissing(dep string, ds map[string]*Decision) string {
	if strings.HasSuffix(dep, ".target") {
		return "" // targets are reached by the boot itself
	}
	d, ok := ds[dep]
	if !ok {
		return "it requires " + dep + ", which this test OS cannot start"
	}
	if !d.Start {
		return "it requires " + dep + ", which is not started (" + d.Reason + ")"
	}
	return ""
}

func installedIntoBoot(u *Unit) bool {
	for _, t := range append(slices.Clone(u.WantedBy), u.RequiredBy...) {
		if slices.Contains(BootTargets, t) {
			return true
		}
	}
	return false
}

// order sorts names topologically by After=/Before= (an edge a→b means a
// starts first), picking the smallest name among the ready ones so the
// order is stable. A cycle is broken at the smallest remaining name.
func order(names []string, ds map[string]*Decision) []string {
	before := map[string][]string{} // before[a] = units that must start after a
	indeg := map[string]int{}
	edge := func(a, b string) {
		if _, ok := ds[a]; !ok {
			return
		}
		if _, ok := ds[b]; !ok || a == b || slices.Contains(before[a], b) {
			return
		}
		before[a] = append(before[a], b)
		indeg[b]++
	}
	for _, n := range names {
		u := ds[n].Unit
		if u == nil {
			continue
		}
		for _, a := range u.After {
			edge(a, n)
		}
		for _, b := range u.Before {
			edge(n, b)
		}
	}
	var out []string
	done := map[string]bool{}
	for len(out) < len(names) {
		next := ""
		for _, n := range names {
			if !done[n] && indeg[n] == 0 {
				next = n
				break
			}
		}
		if next == "" { // a cycle: take the smallest remaining name
			for _, n := range names {
				if !done[n] {
					next = n
					break
				}
			}
		}
		done[next] = true
		out = append(out, next)
		for _, b := range before[next] {
			indeg[b]--
		}
	}
	return out
}

// CheckConditions evaluates ConditionPathExists= under root; it returns
// the first failed condition, or "" when the unit may start.
func (u *Unit) CheckConditions(root string) string {
	for _, c := range u.ConditionPathExists {
		p, negate := strings.CutPrefix(c, "!")
		_, err := os.Stat(filepath.Join(root, p))
		if exists := err == nil; exists == negate {
			return "ConditionPathExists=" + c + " is not met"
		}
	}
	return ""
}
