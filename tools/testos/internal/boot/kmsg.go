package boot

import (
	"strconv"
	"strings"
	"syscall"
	"time"
)

// followKernelLog copies the kernel's log (/dev/kmsg) into the journal as
// "kernel:" lines, from the first message on, as journald does; the
// console already shows them, so they are not printed again. The backlog
// is copied before it returns, so the journal starts with the kernel's
// boot; later messages follow in a goroutine.
func (s *system) followKernelLog() {
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		s.note("reading /dev/kmsg: %v; the journal has no kernel lines", err)
		return
	}
	bootTime := time.Now().Add(-uptime())
	buf := make([]byte, 8192)
	copyRecords := func() error {
		for {
			n, err := syscall.Read(fd, buf)
			switch {
			case err == syscall.EPIPE:
				continue // overwritten before it was read
			case err != nil:
				return err
			}
			if at, msg, ok := parseKmsg(string(buf[:n]), bootTime); ok {
				s.log.LogAt(at, "kernel", 0, msg)
			}
		}
	}
	if err := copyRecords(); err != syscall.EAGAIN {
		s.note("reading /dev/kmsg: %v; no more kernel lines in the journal", err)
		return
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		return
	}
	go func() {
		err := copyRecords()
		s.note("reading /dev/kmsg: %v; no more kernel lines in the journal", err)
	}()
}

// parseKmsg reads one /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>;msg"
// followed by optional continuation lines (" KEY=value"), which are
// dropped. usec counts from boot.
func parseKmsg(rec string, bootTime time.Time) (time.Time, string, bool) {
	head, msg, ok := strings.Cut(rec, ";")
	if !ok {
		return time.Time{}, "", false
	}
	msg, _, _ = strings.Cut(msg, "\n")
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return time.Time{}, "", false
	}
	usec, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return time.Time{}, "", false
	}
	return bootTime.Add(time.Duration(usec) * time.Microsecond), msg, true
}
