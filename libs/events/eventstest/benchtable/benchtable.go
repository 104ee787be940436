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
}

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

var lineRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// Parse reads `go test -bench` output. Lines that are not benchmark
// results (logs, PASS, ok) only set the package.
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
	return out, sc.Err()
}

// Write prints results as one Markdown table, in the order they ran.
func Write(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("| package | benchmark | against its baseline | figures |\n| --- | --- | --- | --- |\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", shortPackage(r.Package), r.Name, join(r.Ratios), join(r.Figures))
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
