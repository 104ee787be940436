// Package cpio writes "newc" cpio archives, the format the Linux kernel
// unpacks as an initramfs. It exists so that the test OS image is built
// without root (device nodes are written as entries, never mknod'ed),
// without a host cpio, and reproducibly: every entry is owned by 0:0, has
// the same mtime, and directories are walked in sorted order.
package cpio

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Mode bits of the newc format (the same as st_mode).
const (
	typeDir     = 0o040000
	typeRegular = 0o100000
	typeSymlink = 0o120000
	typeChar    = 0o020000
	typeBlock   = 0o060000
)

// Entry is one archive member. Name is relative ("usr/bin/x", no leading
// slash), as the kernel expects.
type Entry struct {
	Name  string
	Mode  uint32 // type and permission bits
	Data  []byte // file contents, or the target of a symlink
	Major uint32 // device numbers for character and block nodes
	Minor uint32
}

// Dir, File, Symlink and CharDevice build entries.
func Dir(name string, perm uint32) Entry { return Entry{Name: name, Mode: typeDir | perm} }
func File(name string, perm uint32, data []byte) Entry {
	return Entry{Name: name, Mode: typeRegular | perm, Data: data}
}
func Symlink(name, target string) Entry {
	return Entry{Name: name, Mode: typeSymlink | 0o777, Data: []byte(target)}
}
func CharDevice(name string, perm, major, minor uint32) Entry {
	return Entry{Name: name, Mode: typeChar | perm, Major: major, Minor: minor}
}

// Writer writes entries in newc format.
type Writer struct {
	w     io.Writer
	ino   uint32
	mtime uint32
	err   error
}

// NewWriter writes to w; every entry gets mtime (seconds since the epoch).
func NewWriter(w io.Writer, mtime uint32) *Writer {
	return &Writer{w: w, ino: 1, mtime: mtime}
}

// Write appends one entry.
func (cw *Writer) Write(e Entry) error {
	name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if name == "" {
		name = "."
	}
	cw.ino++
	cw.header(name, e.Mode, e.Major, e.Minor, uint32(len(e.Data)))
	cw.write(e.Data)
	cw.pad(len(e.Data))
	return cw.err
}

// Close writes the trailer. It does not close the underlying writer.
func (cw *Writer) Close() error {
	cw.ino = 0
	cw.header("TRAILER!!!", 0, 0, 0, 0)
	return cw.err
}

func (cw *Writer) header(name string, mode, major, minor, size uint32) {
	nlink := uint32(1)
	if mode&0o170000 == typeDir {
		nlink = 2
	}
	// 13 eight-digit hex fields after the magic; see
	// Documentation/driver-api/early-userspace/buffer-format.rst.
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		cw.ino, mode, 0, 0, nlink, cw.mtime, size, 0, 0, major, minor, len(name)+1, 0)
	cw.write([]byte(h))
	cw.write(append([]byte(name), 0))
	cw.pad(len(h) + len(name) + 1)
}

func (cw *Writer) pad(n int) {
	if r := n % 4; r != 0 {
		cw.write(make([]byte, 4-r))
	}
}

func (cw *Writer) write(b []byte) {
	if cw.err == nil {
		_, cw.err = cw.w.Write(b)
	}
}

// AddTree writes every file, directory and symlink under root, in sorted
// order, with their permission bits but owner 0:0. Other file types are an
// error: device nodes must be added explicitly with CharDevice.
func (cw *Writer) AddTree(root string) error {
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel != "." {
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		p := filepath.Join(root, filepath.FromSlash(name))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		perm := uint32(fi.Mode().Perm())
		if fi.Mode()&fs.ModeSetuid != 0 {
			perm |= 0o4000
		}
		if fi.Mode()&fs.ModeSticky != 0 {
			perm |= 0o1000
		}
		var e Entry
		switch {
		case fi.IsDir():
			e = Dir(name, perm)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e = Symlink(name, target)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e = File(name, perm, data)
		default:
			return fmt.Errorf("%s: unsupported file type %v (add device nodes explicitly)", p, fi.Mode().Type())
		}
		if err := cw.Write(e); err != nil {
			return err
		}
	}
	return nil
}
