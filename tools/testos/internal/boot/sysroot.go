package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Flatcar's core user and the groups it belongs to (uid/gid 500, as in
// Flatcar's baselayout), so that Ignition's passwd section modifies an
// existing "core" the way it does on Flatcar.
const (
	passwdFile = "root:x:0:0:root:/root:/bin/sh\ncore:x:500:500:Flatcar Admin:/home/core:/bin/sh\n"
	shadowFile = "root:*:1:0:99999:7:::\ncore:*:1:0:99999:7:::\n"
	groupFile  = "root:x:0:\nwheel:x:10:root,core\nsudo:x:150:core\ndocker:x:233:core\nsystemd-journal:x:190:core\ncore:x:500:\n"
	gshadow    = "root:::\nwheel:::root,core\nsudo:::core\ndocker:::core\nsystemd-journal:::core\ncore:::\n"
	hostsFile  = "127.0.0.1\tlocalhost\n::1\tlocalhost\n"
	nsswitch   = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
)

// prepareSysroot mounts an empty tmpfs on /sysroot, lays out a
// Flatcar-like base (the /usr-merge links, /etc with users, /var, /opt)
// and binds the image's /usr read-only, as Flatcar's /usr partition is.
// In root mode rootfs, /sysroot is the image's root file system instead
// (prepareRootfs).
func (s *system) prepareSysroot() error {
	if s.mode == rootfsRoot {
		return s.prepareRootfs()
	}
	if err := os.MkdirAll(sysroot, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", sysroot, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", sysroot, err)
	}
	if err := seedBaselayout(sysroot); err != nil {
		return err
	}
	usr := filepath.Join(sysroot, "usr")
	if err := syscall.Mount("/usr", usr, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding /usr into %s: %w", sysroot, err)
	}
	if err := syscall.Mount("", usr, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", usr, err)
	}
	return nil
}

// resetSysroot drops /sysroot and Ignition's run-time state, so that a
// retry starts from scratch.
func (s *system) resetSysroot() {
	if err := syscall.Unmount(sysroot, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		s.say("unmounting %s: %v", sysroot, err)
	}
	for _, p := range []string{"/run/ignition.json", "/run/ignition", "/run/ignition.env"} {
		_ = os.RemoveAll(p)
	}
}

func seedBaselayout(root string) error {
	type entry struct {
		path    string
		mode    os.FileMode // directories and files
		link    string      // symlink target when set
		content string      // file contents when mode is a file
		file    bool
		uid     int
	}
	entries := []entry{
		{path: "bin", link: "usr/bin"},
		{path: "sbin", link: "usr/sbin"},
		{path: "lib", link: "usr/lib"},
		{path: "lib64", link: "usr/lib"},
		{path: "usr", mode: 0o755},
		{path: "etc", mode: 0o755},
		{path: "etc/systemd/system", mode: 0o755},
		{path: "etc/ssl/certs", mode: 0o755},
		{path: "etc/passwd", file: true, mode: 0o644, content: passwdFile},
		{path: "etc/shadow", file: true, mode: 0o640, content: shadowFile},
		{path: "etc/group", file: true, mode: 0o644, content: groupFile},
		{path: "etc/gshadow", file: true, mode: 0o640, content: gshadow},
		{path: "etc/hosts", file: true, mode: 0o644, content: hostsFile},
		{path: "etc/nsswitch.conf", file: true, mode: 0o644, content: nsswitch},
		{path: "etc/os-release", link: "../usr/lib/os-release"},
		{path: "etc/resolv.conf", link: "../run/anvil-testos/resolv.conf"},
		{path: "etc/mtab", link: "../proc/self/mounts"},
		{path: "etc/ssl/certs/ca-certificates.crt", link: "../../../usr/share/anvil-testos/ca-certificates.crt"},
		{path: "home", mode: 0o755},
		{path: "home/core", mode: 0o755, uid: 500},
		{path: "root", mode: 0o700},
		{path: "opt", mode: 0o755},
		{path: "var", mode: 0o755},
		{path: "var/lib", mode: 0o755},
		{path: "var/log", mode: 0o755},
		{path: "var/tmp", mode: 0o777 | os.ModeSticky},
		{path: "tmp", mode: 0o777 | os.ModeSticky},
		{path: "proc", mode: 0o555},
		{path: "sys", mode: 0o555},
		{path: "dev", mode: 0o755},
		{path: "run", mode: 0o755},
		{path: "mnt", mode: 0o755},
		{path: "media", mode: 0o755},
		{path: "srv", mode: 0o755},
	}
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		var err error
		switch {
		case e.link != "":
			err = os.Symlink(e.link, p)
		case e.file:
			err = os.WriteFile(p, []byte(e.content), e.mode)
		default:
			if err = os.MkdirAll(p, 0o755); err == nil {
				err = os.Chmod(p, e.mode)
			}
		}
		if err == nil && e.uid != 0 {
			err = os.Lchown(p, e.uid, e.uid)
		}
		if err != nil {
			return fmt.Errorf("base layout %s: %w", e.path, err)
		}
	}
	return nil
}

// bindAPIFilesystems makes /proc, /sys, /dev and /run visible in root for
// the chrooted services (the agent reads /proc, /sys and /run, and its
// shims write the journal in /run).
func bindAPIFilesystems(root string) error {
	for _, d := range []string{"/proc", "/sys", "/dev", "/run"} {
		target := filepath.Join(root, d)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(d, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", d, err)
		}
	}
	return nil
}
