package eventstest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Logf instead of
// stopping, to check what BenchSize says.
type recorder struct {
	testing.TB
	fatal, logs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, a ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, a...))
}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }

func TestBenchSize(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
	}{{"", 1000}, {"full", 1000}, {"tiny", 5}, {" Tiny ", 5}, {"0.1", 100}, {"1", 1000}, {"0.001", 5}} {
		t.Setenv(EnvBenchScale, c.env)
		r := &recorder{TB: t}
		if got := BenchSize(r, "machines", 1000, 5); got != c.want || len(r.fatal) > 0 {
			t.Errorf("%s=%q: %d %v, want %d", EnvBenchScale, c.env, got, r.fatal, c.want)
		}
		if len(r.logs) != 1 || !strings.Contains(r.logs[0], fmt.Sprintf("size: %d machines", c.want)) {
			t.Errorf("%s=%q: logged %q", EnvBenchScale, c.env, r.logs)
		}
	}
	for _, bad := range []string{"small", "0", "-1", "2", "NaN"} {
		t.Setenv(EnvBenchScale, bad)
		r := &recorder{TB: t}
		BenchSize(r, "machines", 1000, 5)
		if len(r.fatal) != 1 || !strings.Contains(r.fatal[0], EnvBenchScale) {
			t.Errorf("%s=%q: %q, want a failure naming the variable", EnvBenchScale, bad, r.fatal)
		}
	}
}
