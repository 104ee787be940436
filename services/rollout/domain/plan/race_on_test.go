//go:build race

package plan

// The race detector makes the simulations about ten times slower; they
// run fewer seeds under it (and all of them without it).
const raceEnabled = true
