package benchtable

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/anvil-fleet/anvil/libs/events
cpu: some CPU
BenchmarkAppendVsRawPublish-2   	       1	2093520 ns/op	       955.0 append_per_s	      1021 raw_per_s	         0.9351 ratio	  30450 B/op	     412 allocs/op
--- BENCH: BenchmarkAppendVsRawPublish-2
    bench_test.go:40: size 2000 (full)
PASS
ok  	github.com/anvil-fleet/anvil/libs/events	3.1s
pkg: github.com/anvil-fleet/anvil/services/rollout/service
BenchmarkRollout1000-2   	       1	90000000000 ns/op	      1000 cordoned_drained	         8.000 floor_s	        90.00 ms/machine	         0 no_node	        90.00 total_s	        11.25 x_floor
BenchmarkRenderFirst	     300	   3900000 ns/op
`

func TestParseAndWrite(t *testing.T) {
	rs, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("parsed %d results, want 3: %+v", len(rs), rs)
	}
	a := rs[0]
	if a.Package != "github.com/anvil-fleet/anvil/libs/events" || a.Name != "AppendVsRawPublish" ||
		len(a.Ratios) != 1 || a.Ratios[0] != (Metric{"ratio", 0.9351}) || len(a.Figures) != 2 {
		t.Fatalf("append line = %+v", a)
	}
	r := rs[1]
	if r.Name != "Rollout1000" || len(r.Ratios) != 1 || r.Ratios[0].Unit != "x_floor" || len(r.Figures) != 5 {
		t.Fatalf("rollout line = %+v", r)
	}
	if rs[2].Name != "RenderFirst" || len(rs[2].Ratios)+len(rs[2].Figures) != 0 {
		t.Fatalf("plain line = %+v", rs[2])
	}
	tableHas(t, rs,
		"| libs/events | AppendVsRawPublish | ratio 0.935 | append_per_s 955, raw_per_s 1021 |",
		"| services/rollout/service | Rollout1000 | x_floor 11.25 | cordoned_drained 1000, floor_s 8, ms/machine 90, no_node 0, total_s 90 |",
		"| services/rollout/service | RenderFirst | — | — |",
	)
}

// tableHas writes rs as the table and checks that it holds each row.
func tableHas(t *testing.T, rs []Result, rows ...string) {
	t.Helper()
	var b strings.Builder
	if err := Write(&b, rs); err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if !strings.Contains(b.String(), row) {
			t.Errorf("table lacks %q:\n%s", row, b.String())
		}
	}
}

func TestIsRatio(t *testing.T) {
	for unit, want := range map[string]bool{
		"ratio": true, "ratio_vs_raw": true, "x_floor": true, "first_vs_baseline_x": true, "cached_vs_baseline": true,
		"list_ratio": true, "total_s": false, "raw_per_s": false, "machines/s": false, "bytes/machine": false,
	} {
		if IsRatio(unit) != want {
			t.Errorf("IsRatio(%q) = %v, want %v", unit, !want, want)
		}
	}
}

// Failed and skipped benchmarks are rows of the table that say so, laid
// out as go test writes them: a failure in a benchmark's first run before
// the package's "pkg:" line (go test writes it once a benchmark has run
// once), a sub-benchmark's failure before its parent's, a failure in a
// later run after the benchmark's name, a package whose run failed with
// no benchmark marked (a panic, a timeout), a skip (-v).
func TestFailedAndSkipped(t *testing.T) {
	const out = `goos: linux
goarch: amd64
--- FAIL: BenchmarkIgnitionFirst
    boot_test.go:10: no render
pkg: github.com/anvil-fleet/anvil/services/boot/service
cpu: AMD EPYC
BenchmarkBootStorm/prepared-2   	       1	16666005267 ns/op	        17.12 x_baseline_first
--- FAIL: BenchmarkBootStorm/cold
    boot_test.go:20: boom
--- FAIL: BenchmarkBootStorm
FAIL
exit status 1
FAIL	github.com/anvil-fleet/anvil/services/boot/service	52.1s
goos: linux
goarch: amd64
pkg: github.com/anvil-fleet/anvil/services/rollout/service
BenchmarkRollout1000-2   	       1	66577361847 ns/op	         8.682 floor_s	        32.49 total_s	         3.742 x_floor
--- BENCH: BenchmarkRollout1000-2
    bench_test.go:87: size: 1000 machines
--- FAIL: BenchmarkRollout10000
    bench_test.go:647: context deadline exceeded
BenchmarkAppend-2         	--- FAIL: BenchmarkAppend-2
    append_test.go:5: lost an event in a later run
--- SKIP: BenchmarkStart
    harness_test.go:5: no Kubernetes binaries
FAIL
exit status 1
FAIL	github.com/anvil-fleet/anvil/services/rollout/service	1429.298s
pkg: github.com/anvil-fleet/anvil/services/gateway/service
BenchmarkMachineReads-2   	       1	4979855214 ns/op	         0.5837 get_ratio
panic: test timed out after 3h0m0s
FAIL	github.com/anvil-fleet/anvil/services/gateway/service	10800.1s
?   	github.com/anvil-fleet/anvil/sim/cmd/anvil-sim	[no test files]
FAIL
`
	rs, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, shortPackage(r.Package)+" "+r.Name+":"+r.Outcome)
	}
	want := []string{
		"services/boot/service IgnitionFirst:FAILED",
		"services/boot/service BootStorm/prepared:",
		"services/boot/service BootStorm/cold:FAILED",
		"services/rollout/service Rollout1000:",
		"services/rollout/service Rollout10000:FAILED",
		"services/rollout/service Append:FAILED",
		"services/rollout/service Start:skipped",
		"services/gateway/service MachineReads:",
		"services/gateway/service " + PackageRun + ":FAILED",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := Failures(rs); n != 5 {
		t.Errorf("Failures = %d, want 5", n)
	}
	tableHas(t, rs,
		"| services/rollout/service | Rollout1000 | x_floor 3.74 | floor_s 8.68, total_s 32.49 |",
		"| services/rollout/service | Rollout10000 | **FAILED** | — |",
		"| services/boot/service | IgnitionFirst | **FAILED** | — |",
		"| services/rollout/service | Start | **skipped** | — |",
		"| services/gateway/service | MachineReads | get_ratio 0.584 | — |",
		"| services/gateway/service | "+PackageRun+" | **FAILED** | — |",
	)
}

// A benchmark that reported its figures in one run and failed in a later
// one (-count) keeps its figures, marked FAILED, and a parent that failed
// on its own while its sub-benchmarks passed keeps its row.
func TestFailedAfterResults(t *testing.T) {
	const out = `pkg: example.com/p
BenchmarkA-2   	       1	100 ns/op	         0.9 ratio
BenchmarkA-2   	--- FAIL: BenchmarkA-2
    a_test.go:1: second run
BenchmarkB/one-2   	       1	100 ns/op	         2 x_base
--- FAIL: BenchmarkB
    b_test.go:1: after its sub-benchmarks
FAIL
FAIL	example.com/p	1.0s
`
	rs, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	tableHas(t, rs,
		"| example.com/p | A | **FAILED**, ratio 0.9 | — |",
		"| example.com/p | B/one | x_base 2 | — |",
		"| example.com/p | B | **FAILED** | — |",
	)
	if len(rs) != 3 {
		t.Errorf("%d rows, want 3: %+v", len(rs), rs)
	}
}
