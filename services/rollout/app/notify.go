package app

import "sync"

// Notifier wakes whoever waits on a key (a machine, a rollout) when
// something about it changed. Notifications are hints: a waiter always
// reads the state again, and looks anyway every Settings.Poll, so a lost
// notification (a core NATS message dropped during a reconnect) only
// delays it.
type Notifier struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier { return &Notifier{chans: map[string]chan struct{}{}} }

// C returns a channel closed at the next Notify(key). Take it before
// reading the state, so that a change in between is not missed.
func (n *Notifier) C(key string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.chans[key]
	if !ok {
		c = make(chan struct{})
		n.chans[key] = c
	}
	return c
}

// Notify wakes every waiter on key.
func (n *Notifier) Notify(key string) {
	n.mu.Lock()
	c, ok := n.chans[key]
	delete(n.chans, key)
	n.mu.Unlock()
	if ok {
		close(c)
	}
}

// Keys of the notifier.
func machineKey(org, uuid string) string { return "machine/" + org + "/" + uuid }
func rolloutKey(org, id string) string   { return "rollout/" + org + "/" + id }

// MachineKey is the key a machine's changes are notified on.
func MachineKey(org, uuid string) string { return machineKey(org, uuid) }

// RolloutKey is the key a rollout's new events are notified on.
func RolloutKey(org, id string) string { return rolloutKey(org, id) }
