package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep past the deadline = %v, want context.DeadlineExceeded", err)
	}
}

func TestSleepCompletes(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
}

func TestSleepWithoutDuration(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if err := Sleep(context.Background(), d); err != nil {
			t.Errorf("Sleep(live, %v) = %v, want nil", d, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := Sleep(ctx, d); !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep(cancelled, %v) = %v, want context.Canceled", d, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An ended context wins over a timer that has not fired: the result
	// does not depend on which select case Go happens to pick.
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled, 1h) = %v, want context.Canceled", err)
	}
}
