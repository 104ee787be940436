// Package rollout is the Rollout aggregate: bringing a set of machines to a
// target pool revision, one machine and one step at a time (cordon, drain,
// reboot, wait for the boot, wait for the node to be Ready, uncordon).
//
// It follows decide/evolve like the other aggregates. Decide(state, command,
// now) validates a command against the state and returns the events it
// causes without touching the state; State.Apply folds an event into the
// state, is deterministic and total, and never reads the clock. The
// process manager that runs rollouts (the service layer) holds no state of
// its own: it folds these events, asks the planner (package plan) what to do
// next, decides the planner's commands here, and carries out the planner's
// actions. See docs/rollout.md for the whole model and its crash-safety
// argument.
//
// The rules that keep machines safe (order, maxUnavailable, one
// control-plane machine at a time, pause between machines, maintenance
// windows, a failed machine stops new ones) are checked here, in Decide,
// as well as in the planner, so that no caller can break them.
package rollout
