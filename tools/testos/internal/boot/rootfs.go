package boot

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Root mode rootfs (the kubernetes variant): the image carries a Debian
// root file system as a squashfs. As on Flatcar's PXE boot, / is a tmpfs
// and /usr is the squashfs's /usr, read-only: the init copies the rest of
// the squashfs (/etc, /var, ...; a few MB) into a fresh tmpfs on /sysroot
// and binds the squashfs's /usr on /sysroot/usr. (An overlay over the
// squashfs would be simpler, but containerd's overlayfs snapshotter cannot
// use a directory on an overlay as its upper layer, and on Flatcar
// /var/lib/containerd is on the tmpfs.) The squashfs is mounted below
// /run, which moves into the new root with switch_root, so the mount
// stays visible there.
const (
	rootfsLower = runDir + "/rootfs" // the squashfs, read-only
	switchRoot  = "/usr/bin/switch_root"
	systemdInit = "/sbin/init"
)

// prepareRootfs mounts /sysroot for root mode rootfs. The squashfs is
// mounted once; every attempt gets a fresh tmpfs.
func (s *system) prepareRootfs() error {
	for _, d := range []string{sysroot, rootfsLower} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if !isMountPoint(rootfsLower) {
		start := time.Now()
		// busybox mount sets up the loop device (the loop module is loaded).
		ws, err := s.reaper.run(s.command("/usr/bin/mount", "-t", "squashfs", "-o", "ro,loop", rootfsImage, rootfsLower))
		if err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("mounting %s on %s failed (%v %s); the journal has mount's output (are the squashfs and loop modules loaded?)", rootfsImage, rootfsLower, err, describe(ws))
		}
		s.say("root file system: %s mounted read-only (%.1fs)", rootfsImage, time.Since(start).Seconds())
	}
	if err := syscall.Mount("tmpfs", sysroot, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", sysroot, err)
	}
	start := time.Now()
	n, err := copyTree(rootfsLower, sysroot, func(name string) bool { return name == "usr" })
	if err != nil {
		return fmt.Errorf("copying the root file system (but /usr) into %s: %w", sysroot, err)
	}
	s.note("copied %d entries of the root file system (but /usr) into %s in %.1fs", n, sysroot, time.Since(start).Seconds())
	usr := filepath.Join(sysroot, "usr")
	if err := os.MkdirAll(usr, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(filepath.Join(rootfsLower, "usr"), usr, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the root file system's /usr on %s: %w", usr, err)
	}
	if err := syscall.Mount("", usr, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", usr, err)
	}
	return nil
}

// copyTree copies the tree at src into dst (which exists): directories,
// regular files, symlinks and device nodes, with their modes and owners
// (not their times; hard links become copies). skip is asked for each
// top-level entry by name; a skipped entry is not copied at all. It
// returns the number of entries copied.
func copyTree(src, dst string, skip func(name string) bool) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		if !strings.Contains(rel, string(filepath.Separator)) && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", p)
		}
		target := filepath.Join(dst, rel)
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			err = os.Mkdir(target, 0o700)
		case mode&fs.ModeSymlink != 0:
			var link string
			if link, err = os.Readlink(p); err == nil {
				err = os.Symlink(link, target)
			}
		case mode.IsRegular():
			err = copyFile(p, target)
		case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
			err = syscall.Mknod(target, st.Mode, int(st.Rdev))
		default:
			return nil // sockets: nothing to copy
		}
		if err != nil {
			return err
		}
		if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if mode&fs.ModeSymlink == 0 {
			// After chown, which clears set-id bits.
			if err := syscall.Chmod(target, st.Mode&0o7777); err != nil {
				return err
			}
		}
		n++
		return nil
	})
	return n, err
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// switchToSystemd hands the machine to the root file system's systemd,
// as Flatcar's initramfs does after Ignition: it stops what the init
// started (DHCP clients, see stopDHCP), moves /dev, /proc, /sys and /run into
// /sysroot and execs busybox's switch_root, which empties the initramfs
// and execs /sbin/init as PID 1. It returns only when that cannot be done.
func (s *system) switchToSystemd() error {
	init, err := resolveIn(sysroot, systemdInit)
	if err != nil {
		return fmt.Errorf("the root file system has no usable %s: %w", systemdInit, err)
	}
	if fi, err := os.Stat(init); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s (%s in %s) is not an executable file", systemdInit, strings.TrimPrefix(init, sysroot), sysroot)
	}
	s.stopDHCP()
	if _, ok := s.cmdline["flatcar.first_boot"]; ok {
		if _, err := os.Lstat(filepath.Join(sysroot, "etc/machine-id")); err == nil {
			s.say("warning: %s/etc/machine-id exists, so systemd will not treat this as its first boot (no presets applied)", sysroot)
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys", "/run"} {
		target := filepath.Join(sysroot, d)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(d, target, "", syscall.MS_MOVE, ""); err != nil {
			return fmt.Errorf("moving %s to %s: %w", d, target, err)
		}
	}
	s.say("switching root to %s: systemd (%s) takes over, %s after the init started", sysroot, strings.TrimPrefix(init, sysroot), s.since())
	syscall.Sync()
	// The journal file and /dev/kmsg are O_CLOEXEC; stdio (the console)
	// is what systemd inherits.
	err = syscall.Exec(switchRoot, []string{"switch_root", sysroot, systemdInit}, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=linux"})
	// Only reached when the exec failed; the API file systems are in
	// /sysroot now, so the console is all that is left.
	return fmt.Errorf("exec %s: %w", switchRoot, err)
}

// stopDHCP ends the udhcpc clients, keeps them from being restarted, and
// takes the NICs down again: the kernel cannot rename a link that is up,
// and udev in the root file system gives NICs their predictable names
// (enp0s3, as on Flatcar) before systemd-networkd runs DHCP on them.
func (s *system) stopDHCP() {
	s.svcMu.Lock()
	s.stopping = true
	procs := append([]*proc(nil), s.dhcpProcs...)
	s.svcMu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	for _, ifc := range ethernetInterfaces() {
		for _, argv := range [][]string{{"/usr/bin/ip", "addr", "flush", "dev", ifc}, {"/usr/bin/ip", "link", "set", ifc, "down"}} {
			if ws, err := s.reaper.run(s.command(argv...)); err != nil || ws.ExitStatus() != 0 {
				s.note("%s: %v %s", strings.Join(argv, " "), err, describe(ws))
			}
		}
	}
}

// resolveIn resolves p inside root as if root were /: absolute symlink
// targets are taken relative to root. It returns the path on this side.
func resolveIn(root, p string) (string, error) {
	cur := "/"
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("too many symbolic links resolving %s", p)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

// isMountPoint reports whether p is on another device than its parent.
func isMountPoint(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(p, &st) != nil || syscall.Stat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
