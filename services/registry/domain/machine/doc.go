// Package machine is the Machine aggregate: one server in an organization,
// identified by its SMBIOS UUID.
//
// It follows decide/evolve. Decide(state, command, now) validates a command
// and returns the events it causes without touching the state; State.Apply
// folds an event into the state and never reads the clock. The status state
// machine (meltcloud's states merged with Mirantis's Machine lifecycle) is
// specified in docs/machine-states.md, whose matrix the tests check cell by
// cell.
//
// Heartbeats are not events: ConnectivityTransition turns the last
// heartbeat time, kept elsewhere, into an online/offline event when one is
// due.
package machine
