package ports

import (
	"context"
	"sync"
)

// writeMarks remembers, per caller (API token) and per service, the stream
// sequence of the last write the caller made through this gateway, so that
// its next read sees that write (read-your-writes): reads pass it to the
// service as MinVersion, and the service waits (briefly) for its
// projection, or reads the log. The mark is per service because a
// projection can only wait for a sequence its own filter selects. Marks
// are kept in memory for a bounded number of callers; one forgotten only
// means that caller's next read is as fresh as the projection happens to
// be. See docs/api.md, "Consistency".
type writeMarks struct {
	mu    sync.Mutex
	marks map[string]uint64
}

// maxWriteMarks bounds the callers remembered; past it, the map starts
// over (the marks protect a read that follows its write by milliseconds).
const maxWriteMarks = 10000

// The services whose writes are marked.
const (
	marksRegistry  = "registry"
	marksRevisions = "revisions"
	marksRollout   = "rollout"
)

func markKey(ctx context.Context, service string) (string, bool) {
	who := principalOf(ctx)
	return service + "\x00" + who.TokenID + "\x00" + who.Name, who.TokenID != "" || who.Name != ""
}

func (w *writeMarks) note(ctx context.Context, service string, seq uint64) {
	key, ok := markKey(ctx, service)
	if seq == 0 || !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marks == nil || len(w.marks) >= maxWriteMarks {
		w.marks = map[string]uint64{}
	}
	if seq > w.marks[key] {
		w.marks[key] = seq
	}
}

func (w *writeMarks) last(ctx context.Context, service string) uint64 {
	key, _ := markKey(ctx, service)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marks[key]
}
