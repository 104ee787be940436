package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

// JournalSource provides the tail of this boot's system log for reports.
type JournalSource interface {
	Tail(ctx context.Context, lines int) ([]string, error)
}

// JournalFunc adapts a function to a JournalSource.
type JournalFunc func(ctx context.Context, lines int) ([]string, error)

func (f JournalFunc) Tail(ctx context.Context, lines int) ([]string, error) { return f(ctx, lines) }

// Journalctl runs `journalctl -b --no-pager -o short-iso -n <lines>`.
type Journalctl struct {
	// Path to journalctl; default "journalctl" from PATH.
	Path string
}

func (j Journalctl) Tail(ctx context.Context, lines int) ([]string, error) {
	path := j.Path
	if path == "" {
		path = "journalctl"
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-b", "--no-pager", "-o", "short-iso", "-n", strconv.Itoa(lines)).Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	var tail []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		tail = append(tail, sc.Text())
	}
	// Never trust the tool to honour -n exactly.
	if len(tail) > lines {
		tail = tail[len(tail)-lines:]
	}
	return tail, sc.Err()
}
