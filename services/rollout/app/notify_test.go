package app

import (
	"testing"
	"time"
)

func TestNotifierWakesEveryWaiterOnceAndOnlyItsKey(t *testing.T) {
	n := NewNotifier()
	a1, a2, b := n.C("a"), n.C("a"), n.C("b")
	if a1 != a2 {
		t.Fatal("two waiters on one key should share the channel")
	}
	n.Notify("a")
	select {
	case <-a1:
	case <-time.After(time.Second):
		t.Fatal("waiter on a not woken")
	}
	select {
	case <-b:
		t.Fatal("waiter on b woken by a")
	default:
	}
	// The next wait on a is a fresh channel; a notification nobody waits
	// for is not remembered (waiters take the channel before reading).
	n.Notify("a")
	select {
	case <-n.C("a"):
		t.Fatal("a fresh channel is already closed")
	default:
	}
}

func TestRolloutIDsAreDeterministicAndDistinct(t *testing.T) {
	first, again := RolloutIDFor("e1"), RolloutIDFor("e1")
	if first != again || first == RolloutIDFor("e2") {
		t.Fatal("rollout ids must follow the event id")
	}
	if OperationIDFor("e1") == RolloutIDFor("e1") || OperationIDFor("e1")[:3] != "op-" {
		t.Fatalf("operation id %q", OperationIDFor("e1"))
	}
}
