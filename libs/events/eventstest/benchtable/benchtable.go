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
	lineRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	// A failure in the first run of a benchmark is a line of its own; in a
	// later run (a -benchtime other than 1x, -count) it follows the name
	// that go test printed before the run, on the same line.
	outcomeRE = regexp.MustCompile(`(?:^|\s)--- (FAIL|SKIP): Benchmark(\S+?)(?:-\d+)?(?:\s|$)`)
	// endRE is the line that ends a package's output ("ok  \t<pkg>\t3.1s",
	// "FAIL\t<pkg>\t12.0s", "FAIL\t<pkg> [build failed]").
	endRE = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)(?:\s+(?:[\d.]+s|\(cached\)|\[[^]]*\])|\s*$)`)
)

// PackageRun names the row of a package whose run failed with no
// benchmark marked failed: a panic, a timeout, a build that failed.
const PackageRun = "(the package's run)"

// Parse reads `go test -bench` output. A benchmark's "--- FAIL:" line
// (or "--- SKIP:", which go test writes with -v) sets the Outcome of its
// result, or adds a result without metrics when it reported none. The
// line that ends a package's output gives the package of every result
// since the one before: go test writes "pkg:" only once a benchmark of
// the package has run once, after the failure of a first one. Other
// lines (logs, PASS) are skipped.
func Parse(r io.Reader) ([]Result, error) {
	var out []Result
	pkg := ""
	block := 0 // the first result of the package being read
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if m := endRE.FindStringSubmatch(line); m != nil {
			failed := false
			for i := block; i < len(out); i++ {
				out[i].Package = m[2]
				failed = failed || out[i].Outcome == Failed
			}
			if m[1] == "FAIL" && !failed {
				out = append(out, Result{Package: m[2], Name: PackageRun, Outcome: Failed})
			}
			block, pkg = len(out), ""
			continue
		}
		if m := outcomeRE.FindStringSubmatch(line); m != nil {
			outcome := Failed
			if m[1] == "SKIP" {
				outcome = Skipped
			}
			out = setOutcome(out, block, pkg, m[2], outcome)
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
	return withoutFailedParents(out), sc.Err()
}

// setOutcome marks the result of the package being read (out[block:])
// named name with outcome, or adds one without metrics when it reported
// none.
func setOutcome(out []Result, block int, pkg, name, outcome string) []Result {
	for i := len(out) - 1; i >= block; i-- {
		if out[i].Name == name {
			out[i].Outcome = outcome
			return out
		}
	}
	return append(out, Result{Package: pkg, Name: name, Outcome: outcome})
}

// withoutFailedParents drops the rows of benchmarks that only ran
// sub-benchmarks and failed because one of them did (go test reports
// "--- FAIL:" for the parent too, with no results): the sub-benchmark's
// row says what failed.
func withoutFailedParents(rs []Result) []Result {
	return slices.DeleteFunc(slices.Clone(rs), func(r Result) bool {
		if r.Outcome != Failed || len(r.Ratios)+len(r.Figures) > 0 {
			return false
		}
		return slices.ContainsFunc(rs, func(o Result) bool {
			return o.Package == r.Package && o.Outcome == Failed && strings.HasPrefix(o.Name, r.Name+"/")
		})
	})
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
