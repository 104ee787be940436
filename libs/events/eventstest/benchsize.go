package eventstest

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// EnvBenchScale is the one setting of every benchmark's size
// (docs/performance.md#running-the-benchmarks): "full" (or unset) runs
// each at the size it is written for, "tiny" at a handful of machines or
// events (seconds, not minutes: make bench-check), and a number between 0
// and 1 scales the full size (never below the tiny one).
const EnvBenchScale = "ANVIL_BENCH_SCALE"

// BenchScale reads ANVIL_BENCH_SCALE: the factor of the full size, and
// whether the tiny size is asked for. A malformed value fails tb, naming
// the variable.
func BenchScale(tb testing.TB) (factor float64, tiny bool) {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvBenchScale))
	switch strings.ToLower(v) {
	case "", "full":
		return 1, false
	case "tiny":
		return 0, true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
		tb.Fatalf("%s=%q: want tiny, full or a factor in (0, 1]", EnvBenchScale, v)
	}
	return f, false
}

// BenchTiny reports whether ANVIL_BENCH_SCALE asks for the tiny size, for
// a benchmark that changes more than one number at that size.
func BenchTiny(tb testing.TB) bool {
	tb.Helper()
	_, tiny := BenchScale(tb)
	return tiny
}

// BenchSize is the size a benchmark runs at: full, tiny (ANVIL_BENCH_SCALE
// =tiny) or full scaled by the factor ANVIL_BENCH_SCALE gives (at least
// tiny). It logs the size it chose, with what it was chosen from.
func BenchSize(tb testing.TB, what string, full, tiny int) int {
	tb.Helper()
	f, isTiny := BenchScale(tb)
	n := full
	switch {
	case isTiny:
		n = tiny
	case f < 1:
		n = max(tiny, int(math.Round(float64(full)*f)))
	}
	setting := os.Getenv(EnvBenchScale)
	if setting == "" {
		setting = "full (unset)"
	}
	tb.Logf("size: %d %s (%s=%s; full %d, tiny %d)", n, what, EnvBenchScale, setting, full, tiny)
	return n
}
