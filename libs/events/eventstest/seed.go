package eventstest

import (
	"os"
	"strconv"
	"testing"
)

// SeedFromEnv is ANVIL_TEST_SEED, if it is set: the seed that repeats a
// randomised test's run (docs/e2e.md#random-seeds-in-tests).
func SeedFromEnv(t testing.TB) (uint64, bool) {
	t.Helper()
	s := os.Getenv("ANVIL_TEST_SEED")
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("ANVIL_TEST_SEED=%q: want an unsigned integer", s)
	}
	return v, true
}

// Seed is the seed of a test's random choices: ANVIL_TEST_SEED when it is
// set, else def. It is logged, so that a failing run can be repeated with
// ANVIL_TEST_SEED=<seed>.
func Seed(t testing.TB, def uint64) uint64 {
	t.Helper()
	seed := def
	if v, ok := SeedFromEnv(t); ok {
		seed = v
	}
	t.Logf("random seed %d (ANVIL_TEST_SEED=%d repeats it)", seed, seed)
	return seed
}
