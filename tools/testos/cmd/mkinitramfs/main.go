// Command mkinitramfs writes a directory tree as a newc cpio archive (the
// initramfs format) on stdout, adding /dev/console, which the kernel opens
// for PID 1's stdio before /init runs. Owners are 0:0 and every mtime is
// the same, so the same tree gives the same bytes; no root is needed.
//
// With -append it writes an archive meant to follow another one (the
// kernel unpacks concatenated archives in order): no /dev/console, which
// the first archive already has.
//
// Usage: mkinitramfs -root DIR [-mtime SECONDS] [-append] > initrd.cpio
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/anvil-fleet/anvil/tools/testos/internal/cpio"
)

func main() {
	root := flag.String("root", "", "the tree to archive (required)")
	mtime := flag.Uint("mtime", 0, "mtime of every entry, in seconds since the epoch (e.g. $SOURCE_DATE_EPOCH)")
	appendOnly := flag.Bool("append", false, "an archive appended to another initramfs: no /dev/console entry, DIR needs no dev/")
	flag.Parse()
	if *root == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: mkinitramfs -root DIR [-mtime SECONDS] [-append] > initrd.cpio")
		os.Exit(2)
	}
	if err := write(*root, uint32(*mtime), !*appendOnly); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

func write(root string, mtime uint32, console bool) error {
	if fi, err := os.Stat(root + "/dev"); console && (err != nil || !fi.IsDir()) {
		return fmt.Errorf("%s/dev must be a directory (it holds /dev/console)", root)
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	w := cpio.NewWriter(out, mtime)
	if err := w.AddTree(root); err != nil {
		return err
	}
	// After the tree, so dev/ exists first; the kernel creates entries in
	// archive order.
	if console {
		if err := w.Write(cpio.CharDevice("dev/console", 0o600, 5, 1)); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return out.Flush()
}
