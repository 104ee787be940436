// Package passwd implements the subset of shadow-utils' useradd, usermod,
// userdel, groupadd, groupmod and groupdel that Ignition's files stage
// calls (always with --root <sysroot>). The test OS has no shadow-utils:
// these edit /etc/passwd, /etc/shadow, /etc/group and /etc/gshadow under
// the root directly.
package passwd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// db is the four colon-separated files, one []string of fields per line.
type db struct {
	root                           string
	passwd, shadow, group, gshadow [][]string
	hasGshadow                     bool
}

func load(root string) (*db, error) {
	d := &db{root: root}
	var err error
	if d.passwd, err = readColon(root, "/etc/passwd", 7); err != nil {
		return nil, err
	}
	if d.shadow, err = readColon(root, "/etc/shadow", 9); err != nil {
		return nil, err
	}
	if d.group, err = readColon(root, "/etc/group", 4); err != nil {
		return nil, err
	}
	if _, statErr := os.Stat(filepath.Join(root, "/etc/gshadow")); statErr == nil {
		d.hasGshadow = true
		if d.gshadow, err = readColon(root, "/etc/gshadow", 4); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func readColon(root, p string, fields int) ([][]string, error) {
	data, err := os.ReadFile(filepath.Join(root, p))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][]string
	for n, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) > fields {
			return nil, fmt.Errorf("%s line %d: %d fields, want %d", p, n+1, len(f), fields)
		}
		for len(f) < fields {
			f = append(f, "")
		}
		out = append(out, f)
	}
	return out, nil
}

func (d *db) save() error {
	files := []struct {
		p     string
		lines [][]string
		mode  os.FileMode
	}{{"/etc/passwd", d.passwd, 0o644}, {"/etc/shadow", d.shadow, 0o640}, {"/etc/group", d.group, 0o644}}
	if d.hasGshadow {
		files = append(files, struct {
			p     string
			lines [][]string
			mode  os.FileMode
		}{"/etc/gshadow", d.gshadow, 0o640})
	}
	for _, f := range files {
		var b strings.Builder
		for _, l := range f.lines {
			b.WriteString(strings.Join(l, ":") + "\n")
		}
		full := filepath.Join(d.root, f.p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		tmp := full + ".anvil-testos.tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, full); err != nil {
			return err
		}
	}
	return nil
}

func find(lines [][]string, name string) int {
	return slices.IndexFunc(lines, func(l []string) bool { return l[0] == name })
}

func (d *db) idTaken(lines [][]string, col int, id int) bool {
	s := strconv.Itoa(id)
	return slices.ContainsFunc(lines, func(l []string) bool { return l[col] == s })
}

// nextID returns the lowest free id in [lo, hi].
func (d *db) nextID(lines [][]string, col, lo, hi int) (int, error) {
	for id := lo; id <= hi; id++ {
		if !d.idTaken(lines, col, id) {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no free id between %d and %d", lo, hi)
}

// gid resolves a group given by name or number.
func (d *db) gid(g string) (string, error) {
	if _, err := strconv.Atoi(g); err == nil {
		return g, nil
	}
	if i := find(d.group, g); i >= 0 {
		return d.group[i][2], nil
	}
	return "", fmt.Errorf("group %q does not exist", g)
}

// setMembership makes user a member of exactly groups (secondary groups,
// as usermod --groups without --append does).
func (d *db) setMembership(user string, groups []string) error {
	for _, g := range groups {
		if find(d.group, g) < 0 {
			return fmt.Errorf("group %q does not exist", g)
		}
	}
	update := func(lines [][]string) {
		for _, l := range lines {
			var members []string
			for _, m := range strings.Split(l[3], ",") {
				if m != "" && m != user {
					members = append(members, m)
				}
			}
			if slices.Contains(groups, l[0]) {
				members = append(members, user)
			}
			l[3] = strings.Join(members, ",")
		}
	}
	update(d.group)
	update(d.gshadow)
	return nil
}

// Options are the flags Ignition passes.
type Options struct {
	Root        string
	HomeDir     string
	MoveHome    bool
	CreateHome  bool
	NoUserGroup bool
	System      bool
	Password    *string
	UID, GID    string
	Comment     *string
	Groups      *[]string
	Shell       string
	Remove      bool
	Name        string
	GroupGID    string // groupadd/groupmod --gid
}

// ParseArgs reads the flags of the named tool (useradd, usermod, userdel,
// groupadd, groupmod, groupdel). Unknown flags are an error that names them.
func ParseArgs(tool string, args []string) (Options, error) {
	var o Options
	value := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s: %s needs a value", tool, flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, inline, hasInline := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "-") {
			if o.Name != "" {
				return o, fmt.Errorf("%s: more than one name (%q and %q)", tool, o.Name, a)
			}
			o.Name = a
			continue
		}
		get := func() (string, error) {
			if hasInline {
				return inline, nil
			}
			return value(&i, flag)
		}
		var v string
		var err error
		switch flag {
		case "--root", "-R":
			o.Root, err = get()
		case "--home-dir", "--home", "-d":
			o.HomeDir, err = get()
		case "--move-home", "-m":
			if tool == "useradd" {
				o.CreateHome = true
			} else {
				o.MoveHome = true
			}
		case "--create-home":
			o.CreateHome = true
		case "--no-create-home", "-M":
			o.CreateHome = false
		case "--no-user-group", "-N":
			o.NoUserGroup = true
		case "--system", "-r":
			o.System = true
		case "--no-log-init", "-l":
		case "--password", "-p":
			v, err = get()
			o.Password = &v
		case "--uid", "-u":
			o.UID, err = get()
		case "--gid", "-g":
			v, err = get()
			if strings.HasPrefix(tool, "group") {
				o.GroupGID = v
			} else {
				o.GID = v
			}
		case "--comment", "-c":
			v, err = get()
			o.Comment = &v
		case "--groups", "-G":
			v, err = get()
			var gs []string
			for _, g := range strings.Split(v, ",") {
				if g != "" {
					gs = append(gs, g)
				}
			}
			o.Groups = &gs
		case "--shell", "-s":
			o.Shell, err = get()
		case "--remove":
			o.Remove = true
		default:
			return o, fmt.Errorf("%s: option %s is not supported by the anvil test OS", tool, a)
		}
		if err != nil {
			return o, err
		}
	}
	if o.Name == "" {
		return o, fmt.Errorf("%s: no user or group name given", tool)
	}
	if o.Root == "" {
		o.Root = "/"
	}
	return o, nil
}

// Run carries out tool with the parsed options.
func Run(tool string, o Options) error {
	d, err := load(o.Root)
	if err != nil {
		return err
	}
	switch tool {
	case "useradd":
		err = d.useradd(o)
	case "usermod":
		err = d.usermod(o)
	case "userdel":
		err = d.userdel(o)
	case "groupadd":
		err = d.groupadd(o)
	case "groupmod":
		err = d.groupmod(o)
	case "groupdel":
		err = d.groupdel(o)
	default:
		return fmt.Errorf("unknown tool %q", tool)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", tool, o.Name, err)
	}
	return d.save()
}

func daysSinceEpoch() string { return strconv.FormatInt(time.Now().Unix()/86400, 10) }

func (d *db) useradd(o Options) error {
	if find(d.passwd, o.Name) >= 0 {
		return errors.New("user already exists")
	}
	lo, hi := 1000, 59999
	if o.System {
		lo, hi = 100, 999
	}
	uid := o.UID
	if uid == "" {
		n, err := d.nextID(d.passwd, 2, lo, hi)
		if err != nil {
			return err
		}
		uid = strconv.Itoa(n)
	} else if n, err := strconv.Atoi(uid); err != nil || n < 0 {
		return fmt.Errorf("uid %q is not a number", uid)
	}
	gid := ""
	switch {
	case o.GID != "":
		g, err := d.gid(o.GID)
		if err != nil {
			return err
		}
		gid = g
	case o.NoUserGroup:
		gid = "100" // shadow-utils' default GROUP
	default:
		if find(d.group, o.Name) >= 0 {
			return fmt.Errorf("group %q exists; pass --gid or --no-user-group", o.Name)
		}
		n, _ := strconv.Atoi(uid)
		if d.idTaken(d.group, 2, n) {
			var err error
			if n, err = d.nextID(d.group, 2, lo, hi); err != nil {
				return err
			}
		}
		gid = strconv.Itoa(n)
		d.group = append(d.group, []string{o.Name, "x", gid, ""})
		if d.hasGshadow {
			d.gshadow = append(d.gshadow, []string{o.Name, "!", "", ""})
		}
	}
	home := o.HomeDir
	if home == "" {
		home = "/home/" + o.Name
	}
	shell := o.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	comment := ""
	if o.Comment != nil {
		comment = *o.Comment
	}
	pw := "!"
	if o.Password != nil {
		pw = *o.Password
	}
	d.passwd = append(d.passwd, []string{o.Name, "x", uid, gid, comment, home, shell})
	d.shadow = append(d.shadow, []string{o.Name, pw, daysSinceEpoch(), "0", "99999", "7", "", "", ""})
	if o.Groups != nil {
		if err := d.setMembership(o.Name, *o.Groups); err != nil {
			return err
		}
	}
	if o.CreateHome {
		u, _ := strconv.Atoi(uid)
		g, _ := strconv.Atoi(gid)
		full := filepath.Join(d.root, home)
		if err := os.MkdirAll(full, 0o700); err != nil {
			return err
		}
		if err := os.Chown(full, u, g); err != nil {
			return err
		}
	}
	return nil
}

func (d *db) usermod(o Options) error {
	i := find(d.passwd, o.Name)
	if i < 0 {
		return errors.New("user does not exist")
	}
	p := d.passwd[i]
	if o.UID != "" {
		if _, err := strconv.Atoi(o.UID); err != nil {
			return fmt.Errorf("uid %q is not a number", o.UID)
		}
		p[2] = o.UID
	}
	if o.GID != "" {
		g, err := d.gid(o.GID)
		if err != nil {
			return err
		}
		p[3] = g
	}
	if o.Comment != nil {
		p[4] = *o.Comment
	}
	if o.HomeDir != "" && o.HomeDir != p[5] {
		if o.MoveHome {
			from, to := filepath.Join(d.root, p[5]), filepath.Join(d.root, o.HomeDir)
			if _, err := os.Stat(from); err == nil {
				if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
					return err
				}
				if err := os.Rename(from, to); err != nil {
					return err
				}
			}
		}
		p[5] = o.HomeDir
	}
	if o.Shell != "" {
		p[6] = o.Shell
	}
	if o.Password != nil {
		j := find(d.shadow, o.Name)
		if j < 0 {
			d.shadow = append(d.shadow, []string{o.Name, *o.Password, daysSinceEpoch(), "0", "99999", "7", "", "", ""})
		} else {
			d.shadow[j][1] = *o.Password
			d.shadow[j][2] = daysSinceEpoch()
		}
	}
	if o.Groups != nil {
		return d.setMembership(o.Name, *o.Groups)
	}
	return nil
}

func (d *db) userdel(o Options) error {
	i := find(d.passwd, o.Name)
	if i < 0 {
		return errors.New("user does not exist")
	}
	home := d.passwd[i][5]
	d.passwd = slices.Delete(d.passwd, i, i+1)
	if j := find(d.shadow, o.Name); j >= 0 {
		d.shadow = slices.Delete(d.shadow, j, j+1)
	}
	if err := d.setMembership(o.Name, nil); err != nil {
		return err
	}
	if o.Remove && home != "" && home != "/" {
		return os.RemoveAll(filepath.Join(d.root, home))
	}
	return nil
}

func (d *db) groupadd(o Options) error {
	if find(d.group, o.Name) >= 0 {
		return errors.New("group already exists")
	}
	gid := o.GroupGID
	if gid == "" {
		lo, hi := 1000, 59999
		if o.System {
			lo, hi = 100, 999
		}
		n, err := d.nextID(d.group, 2, lo, hi)
		if err != nil {
			return err
		}
		gid = strconv.Itoa(n)
	} else if n, err := strconv.Atoi(gid); err != nil || n < 0 {
		return fmt.Errorf("gid %q is not a number", gid)
	} else if d.idTaken(d.group, 2, n) {
		return fmt.Errorf("gid %s is taken", gid)
	}
	pw := "!"
	if o.Password != nil {
		pw = *o.Password
	}
	d.group = append(d.group, []string{o.Name, "x", gid, ""})
	if d.hasGshadow {
		d.gshadow = append(d.gshadow, []string{o.Name, pw, "", ""})
	}
	return nil
}

func (d *db) groupmod(o Options) error {
	i := find(d.group, o.Name)
	if i < 0 {
		return errors.New("group does not exist")
	}
	if o.GroupGID != "" {
		if _, err := strconv.Atoi(o.GroupGID); err != nil {
			return fmt.Errorf("gid %q is not a number", o.GroupGID)
		}
		d.group[i][2] = o.GroupGID
	}
	if o.Password != nil && d.hasGshadow {
		if j := find(d.gshadow, o.Name); j >= 0 {
			d.gshadow[j][1] = *o.Password
		}
	}
	return nil
}

func (d *db) groupdel(o Options) error {
	i := find(d.group, o.Name)
	if i < 0 {
		return errors.New("group does not exist")
	}
	d.group = slices.Delete(d.group, i, i+1)
	if j := find(d.gshadow, o.Name); j >= 0 {
		d.gshadow = slices.Delete(d.gshadow, j, j+1)
	}
	return nil
}
