// Package inventory reads the machine's hardware and reboot indicators from
// /proc, /sys and /run under a configurable root, so tests and the simulator
// can point it at a fake tree.
package inventory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/agent/api"
)

// Read returns the hardware inventory under root. It is best effort: what
// could be read is returned together with an error naming what could not, so
// one unreadable file does not hide the rest of the inventory.
func Read(root string) (api.Hardware, error) {
	var errs []error
	var hw api.Hardware
	var err error
	if hw.CPUs, err = CPUs(root); err != nil {
		errs = append(errs, err)
	}
	if hw.MemoryBytes, err = MemoryBytes(root); err != nil {
		errs = append(errs, err)
	}
	if hw.Disks, err = Disks(root); err != nil {
		errs = append(errs, err)
	}
	if hw.NICs, err = NICs(root); err != nil {
		errs = append(errs, err)
	}
	return hw, errors.Join(errs...)
}

// CPUs counts logical CPUs from /proc/cpuinfo, falling back to
// /sys/devices/system/cpu/online on architectures whose cpuinfo has no
// "processor" lines.
func CPUs(root string) (int, error) {
	if data, err := os.ReadFile(filepath.Join(root, "proc/cpuinfo")); err == nil {
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			key, _, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(key) == "processor" {
				n++
			}
		}
		if n > 0 {
			return n, nil
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "sys/devices/system/cpu/online"))
	if err != nil {
		return 0, fmt.Errorf("cpu count: %w", err)
	}
	n, err := countCPUList(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("cpu count: %s: %w", "sys/devices/system/cpu/online", err)
	}
	return n, nil
}

// countCPUList counts a kernel CPU list such as "0-15,32-47,64".
func countCPUList(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty cpu list")
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("bad cpu list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// MemoryBytes reads MemTotal from /proc/meminfo. MemTotal is what the kernel
// manages, slightly less than the installed DIMMs; it is what Kubernetes sees.
func MemoryBytes(root string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "MemTotal" {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			break
		}
		if len(fields) > 1 && fields[1] != "kB" {
			return 0, fmt.Errorf("memory: unexpected MemTotal unit %q", fields[1])
		}
		return kb * 1024, nil
	}
	return 0, errors.New("memory: no readable MemTotal in proc/meminfo")
}

// virtualDiskPrefixes name block devices that are not hardware: loop-mounted
// images (Flatcar's sysexts), RAM disks, compressed swap, device-mapper.
var virtualDiskPrefixes = []string{"loop", "ram", "zram", "dm-"}

// Disks lists physical block devices from /sys/block, sorted by name.
func Disks(root string) ([]api.Disk, error) {
	dir := filepath.Join(root, "sys/block")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []api.Disk{}, fmt.Errorf("disks: %w", err)
	}
	disks := []api.Disk{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if slices.ContainsFunc(virtualDiskPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		sectors, err := readUint(filepath.Join(dir, name, "size"))
		if err != nil {
			errs = append(errs, fmt.Errorf("disk %s: %w", name, err))
			continue
		}
		// /sys/block/*/size is always in 512-byte units, whatever the logical block size.
		d := api.Disk{Name: name, SizeBytes: sectors * 512}
		d.Rotational = readString(filepath.Join(dir, name, "queue/rotational")) == "1"
		d.Model = readString(filepath.Join(dir, name, "device/model"))
		disks = append(disks, d)
	}
	slices.SortFunc(disks, func(a, b api.Disk) int { return strings.Compare(a.Name, b.Name) })
	return disks, errors.Join(errs...)
}

// NICs lists physical network interfaces from /sys/class/net, sorted by name.
// An interface without a "device" link is virtual (lo, bridges, bonds, VLANs,
// veths) and is skipped: the inventory describes the hardware, not the
// network profile built on top of it.
func NICs(root string) ([]api.NIC, error) {
	dir := filepath.Join(root, "sys/class/net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []api.NIC{}, fmt.Errorf("nics: %w", err)
	}
	nics := []api.NIC{}
	for _, e := range entries {
		name := e.Name()
		if _, err := os.Lstat(filepath.Join(dir, name, "device")); err != nil {
			continue
		}
		n := api.NIC{Name: name, MAC: strings.ToLower(readString(filepath.Join(dir, name, "address")))}
		// Reading speed fails with EINVAL or yields -1 while the link is down;
		// old drivers print SPEED_UNKNOWN as an unsigned 4294967295.
		if s, err := strconv.Atoi(readString(filepath.Join(dir, name, "speed"))); err == nil && s > 0 && s < math.MaxInt32 {
			n.SpeedMbps = s
		}
		nics = append(nics, n)
	}
	slices.SortFunc(nics, func(a, b api.NIC) int { return strings.Compare(a.Name, b.Name) })
	return nics, nil
}

// RebootRequired reports whether /run/reboot-required exists; the reason lists
// /run/reboot-required.pkgs when present.
func RebootRequired(root string) (bool, string, error) {
	flag := filepath.Join(root, "run/reboot-required")
	if _, err := os.Stat(flag); errors.Is(err, fs.ErrNotExist) {
		return false, "", nil
	} else if err != nil {
		return false, "", fmt.Errorf("reboot indicator: %w", err)
	}
	reason := "/run/reboot-required exists"
	if data, err := os.ReadFile(flag + ".pkgs"); err == nil {
		if pkgs := strings.Fields(string(data)); len(pkgs) > 0 {
			reason += " (packages: " + strings.Join(pkgs, ", ") + ")"
		}
	}
	return true, reason, nil
}

// MachineUUID reads the SMBIOS system UUID that the kernel exposes in
// /sys/class/dmi/id/product_uuid (readable by root only) and returns it in
// lowercase canonical form. The nil and all-F UUIDs, which broken or
// unprogrammed firmware reports, are refused: the boot service refuses them
// too, so such a machine never registered under them.
func MachineUUID(root string) (string, error) {
	const rel = "sys/class/dmi/id/product_uuid"
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return "", fmt.Errorf("cannot read the SMBIOS UUID: %w", err)
	}
	id := strings.ToLower(strings.TrimSpace(string(data)))
	if !isCanonicalUUID(id) {
		return "", fmt.Errorf("%s holds %q, not a canonical UUID", rel, truncateForError(id, 64))
	}
	if strings.Trim(id, "0-") == "" || strings.Trim(id, "f-") == "" {
		return "", fmt.Errorf("%s holds %s, which firmware reports when no UUID is set", rel, id)
	}
	return id, nil
}

func isCanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

func truncateForError(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// BootID returns the kernel's random boot id, which changes on every boot.
// The agent stores it with an acted-on instruction to tell "rebooted" from
// "the agent merely restarted".
func BootID(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

func readString(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}
