package ports

import (
	"context"
	"sync"
)

// writeMarks remembers, per caller (API token), the stream sequence of the
// last machine write it made through this gateway, so that its next read
// sees that write (read-your-writes): reads pass it to the registry as
// MinVersion, and the registry waits (briefly) for its projection, or
// reads the log. Marks are kept in memory for a bounded number of callers;
// one forgotten only means that caller's next read is as fresh as the
// projection happens to be. See docs/api.md, "Consistency".
type writeMarks struct {
	mu    sync.Mutex
	marks map[string]uint64
}

// maxWriteMarks bounds the callers remembered; past it, the map starts
// over (the marks protect a read that follows its write by milliseconds).
const maxWriteMarks = 10000

func (w *writeMarks) note(ctx context.Context, seq uint64) {
	who := principalOf(ctx)
	if seq == 0 || who.TokenID == "" && who.Name == "" {
		return
	}
	key := who.TokenID + "\x00" + who.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marks == nil || len(w.marks) >= maxWriteMarks {
		w.marks = map[string]uint64{}
	}
	if seq > w.marks[key] {
		w.marks[key] = seq
	}
}

func (w *writeMarks) last(ctx context.Context) uint64 {
	who := principalOf(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marks[who.TokenID+"\x00"+who.Name]
}
