// Command modclosure prints the kernel modules a selection needs: the
// selected .ko files and, transitively, every module they depend on, as
// paths relative to the module directory, sorted. Dependencies are the
// depends= field of each module's .modinfo section and its softdep=
// ("pre: crc32c post: …"), resolved by module name or alias: libcrc32c
// declares crc32c only as a soft dependency, and without a crc32c module
// nf_tables cannot load (iptables-nft then fails with "Could not fetch
// rule set generation id: Invalid argument"). A hard dependency that is
// neither a module file nor built into the kernel (modules.builtin) is an
// error; a soft one that resolves to nothing is ignored, as modprobe does.
//
// Usage: modclosure -dir /lib/modules/<release> SELECTION...
//
// Each SELECTION is a path relative to -dir: a directory (every .ko below
// it) or one .ko file. Compressed modules (.ko.xz, .ko.zst) are not read;
// Debian's 6.1 kernels ship plain .ko files.
package main

import (
	"bufio"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	dir := flag.String("dir", "", "the module directory, /lib/modules/<release> (required)")
	flag.Parse()
	if *dir == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modclosure -dir /lib/modules/<release> SELECTION...")
		os.Exit(2)
	}
	out, err := run(*dir, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "modclosure:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, p := range out {
		fmt.Fprintln(w, p)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "modclosure:", err)
		os.Exit(1)
	}
}

// modinfo is what the closure reads of one module.
type modinfo struct {
	depends  []string // hard dependencies, by module name
	softdeps []string // soft dependencies (pre and post), by name or alias
	aliases  []string
}

// tree is a module directory: every module's path and modinfo, and the
// names of those built into the kernel.
type tree struct {
	info    map[string]modinfo // path relative to the directory -> modinfo
	builtin map[string]bool    // module names
}

// moduleName is how depends= names a module: its file name without .ko,
// with dashes as underscores.
func moduleName(path string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(path), ".ko"), "-", "_")
}

func run(dir string, selection []string) ([]string, error) {
	t, err := readTree(dir)
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, sel := range selection {
		fi, err := os.Stat(filepath.Join(dir, sel))
		if err != nil {
			return nil, fmt.Errorf("selection %s: %w", sel, err)
		}
		rel := filepath.ToSlash(filepath.Clean(sel))
		if fi.IsDir() {
			rel += "/"
		}
		roots = append(roots, rel)
	}
	return t.closure(roots)
}

func readTree(dir string) (tree, error) {
	t := tree{info: map[string]modinfo{}, builtin: map[string]bool{}}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".ko") {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		mi, err := readModinfo(p)
		if err != nil {
			return err
		}
		t.info[filepath.ToSlash(rel)] = mi
		return nil
	})
	if err != nil {
		return tree{}, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return tree{}, err
	}
	for _, l := range strings.Fields(string(b)) {
		t.builtin[moduleName(l)] = true
	}
	return t, nil
}

// closure returns the modules below the roots (a path ending in "/" is a
// directory, anything else one module) and everything they depend on.
func (t tree) closure(roots []string) ([]string, error) {
	byName := map[string]string{}
	byAlias := map[string][]string{}
	for rel, mi := range t.info {
		byName[moduleName(rel)] = rel
		for _, a := range mi.aliases {
			byAlias[a] = append(byAlias[a], rel)
		}
	}
	var queue []string
	for _, root := range roots {
		if !strings.HasSuffix(root, "/") {
			if _, ok := t.info[root]; !ok {
				return nil, fmt.Errorf("selection %s: not a module", root)
			}
			queue = append(queue, root)
			continue
		}
		n := len(queue)
		for rel := range t.info {
			if strings.HasPrefix(rel, root) {
				queue = append(queue, rel)
			}
		}
		if len(queue) == n {
			return nil, fmt.Errorf("selection %s: no .ko file below it", root)
		}
	}
	slices.Sort(queue) // the same error message for the same input

	selected := map[string]bool{}
	for i := 0; i < len(queue); i++ {
		rel := queue[i]
		if selected[rel] {
			continue
		}
		selected[rel] = true
		mi := t.info[rel]
		for _, d := range mi.depends {
			switch dep, ok := byName[moduleName(d)]; {
			case ok:
				queue = append(queue, dep)
			case t.builtin[moduleName(d)]:
			default:
				return nil, fmt.Errorf("%s depends on %s, which is neither a module here nor built into the kernel", rel, d)
			}
		}
		for _, d := range mi.softdeps {
			if dep, ok := byName[moduleName(d)]; ok {
				queue = append(queue, dep)
			}
			queue = append(queue, byAlias[d]...)
		}
	}
	out := make([]string, 0, len(selected))
	for rel := range selected {
		out = append(out, rel)
	}
	slices.Sort(out)
	return out, nil
}

// readModinfo reads a module's .modinfo section.
func readModinfo(path string) (modinfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return modinfo{}, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return modinfo{}, fmt.Errorf("%s: no .modinfo section (not a kernel module?)", path)
	}
	data, err := sec.Data()
	if err != nil {
		return modinfo{}, fmt.Errorf("%s: reading .modinfo: %w", path, err)
	}
	return parseModinfo(string(data)), nil
}

// parseModinfo parses the NUL-separated key=value fields of .modinfo.
func parseModinfo(data string) modinfo {
	var mi modinfo
	for _, field := range strings.Split(data, "\x00") {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			continue
		}
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					mi.depends = append(mi.depends, d)
				}
			}
		case "softdep":
			// "pre: a b post: c": every word but the markers.
			for _, w := range strings.Fields(v) {
				if w != "pre:" && w != "post:" {
					mi.softdeps = append(mi.softdeps, w)
				}
			}
		case "alias":
			mi.aliases = append(mi.aliases, v)
		}
	}
	return mi
}
