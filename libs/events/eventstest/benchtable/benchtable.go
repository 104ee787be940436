// Package benchtable turns the output of `go test -bench` into the one
// table `make bench` prints: every benchmark with each ratio it reports
// against the baseline it measured in the same run, and its other
// figures, so that a reader (or a script) sees the whole scale run at
// once instead of scrolling through package logs.
package benchtable

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is one benchmark line.
type Result struct {
	Package string // the package the line belongs to ("pkg:" before it)
	Name    string // without the Benchmark prefix and the -GOMAXPROCS suffix
	// Ratios are the figures measured against a baseline of the same run
	// (see IsRatio); Figures every other reported metric.
	Ratios, Figures []Metric
	// Outcome is "" for a benchmark that passed, else Failed or Skipped
	// (its "--- FAIL:" or "--- SKIP:" line): a failed benchmark usually
	// reports nothing, and must not just be missing from the table.
	Outcome string
}

// The outcomes of benchmarks that did not pass.
const (
	Failed  = "FAILED"
	Skipped = "skipped"
)

// Metric is one value a benchmark reported, with its unit as named.
type Metric struct {
	Unit  string
	Value float64
}

// Standard units go test reports on its own; they are left out of the
// table, which is about what each benchmark chose to report.
var standard = map[string]bool{"ns/op": true, "B/op": true, "allocs/op": true, "MB/s": true}

// IsRatio says whether a metric is a ratio against a baseline, by the
// names the benchmarks use: "ratio…", "…_ratio", "x_…", "…_x", or
// "…_vs_…".
func IsRatio(unit string) bool {
	return strings.HasPrefix(unit, "ratio") || strings.HasSuffix(unit, "_ratio") || strings.HasPrefix(unit, "x_") ||
		strings.HasSuffix(unit, "_x") || strings.Contains(unit, "_vs_")
}

var (
	lineRE    = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	outcomeRE = regexp.MustCompile(`^\s*--- (FAIL|SKIP): Benchmark(\S+?)(?:-\d+)?(?:\s|$)`)
)

// Parse reads `go test -bench` output. A benchmark's "--- FAIL:" or
// "--- SKIP:" line sets the Outcome of its result, or adds a result
// without metrics when it reported none; other lines that are not
// benchmark results (logs, PASS, ok) only set the package.
func Parse(r io.Reader) ([]Result, error) {
	var out []Result
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if m := outcomeRE.FindStringSubmatch(line); m != nil {
			outcome := Failed
			if m[1] == "SKIP" {
				outcome = Skipped
			}
			out = setOutcome(out, pkg, m[2], outcome)
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		res := Result{Package: pkg, Name: m[1]}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break // not a value/unit pair: the rest is not metrics
			}
			unit := fields[i+1]
			switch {
			case standard[unit]:
			case IsRatio(unit):
				res.Ratios = append(res.Ratios, Metric{unit, v})
			default:
				res.Figures = append(res.Figures, Metric{unit, v})
			}
		}
		out = append(out, res)
	}
	return withoutParents(out), sc.Err()
}

// withoutParents drops the rows of benchmarks that only ran
// sub-benchmarks (go test reports "--- FAIL:" for the parent of a failed
// sub-benchmark too, and no results for it): the sub-benchmarks' rows
// say what failed.
func withoutParents(rs []Result) []Result {
	return slices.DeleteFunc(rs, func(r Result) bool {
		if len(r.Ratios)+len(r.Figures) > 0 {
			return false
		}
		return slices.ContainsFunc(rs, func(o Result) bool {
			return o.Package == r.Package && strings.HasPrefix(o.Name, r.Name+"/")
		})
	})
}

// setOutcome marks the package's benchmark name with outcome, or adds it
// when it reported no line of results (a parent benchmark whose
// sub-benchmark failed has its own line; its sub-benchmarks keep theirs).
func setOutcome(out []Result, pkg, name, outcome string) []Result {
	for i := len(out) - 1; i >= 0 && out[i].Package == pkg; i-- {
		if out[i].Name == name {
			out[i].Outcome = outcome
			return out
		}
	}
	return append(out, Result{Package: pkg, Name: name, Outcome: outcome})
}

// Failures counts the results that failed.
func Failures(results []Result) int {
	n := 0
	for _, r := range results {
		if r.Outcome == Failed {
			n++
		}
	}
	return n
}

// Write prints results as one Markdown table, in the order they ran; a
// benchmark that failed or was skipped says so before its figures.
func Write(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("| package | benchmark | against its baseline | figures |\n| --- | --- | --- | --- |\n")
	for _, r := range results {
		ratios := join(r.Ratios)
		if r.Outcome != "" {
			ratios = "**" + r.Outcome + "**"
			if len(r.Ratios) > 0 {
				ratios += ", " + join(r.Ratios)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", shortPackage(r.Package), r.Name, ratios, join(r.Figures))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func join(ms []Metric) string {
	if len(ms) == 0 {
		return "—"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Unit + " " + format(m.Value)
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func format(v float64) string {
	switch {
	case v == float64(int64(v)) && v < 1e15 && v > -1e15:
		return strconv.FormatInt(int64(v), 10)
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1 || v <= -1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func shortPackage(p string) string {
	return strings.TrimPrefix(p, "github.com/anvil-fleet/anvil/")
}
