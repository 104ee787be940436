package ui

import (
	"strings"

	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// diffFile is one file of a side-by-side diff.
type diffFile struct {
	Path string
	Rows []diffRow
}

// diffRow is one row: the old line on the left, the new on the right.
// Kind is "same", "changed", "removed", "added" or "hunk" (a @@ header).
type diffRow struct {
	Kind        string
	Left, Right string
	HasL, HasR  bool
}

// sideBySide lays the unified diffs of a revision diff out in two columns.
func sideBySide(d rev.RevisionDiff) []diffFile {
	if len(d.Files) > 0 {
		out := make([]diffFile, 0, len(d.Files))
		for _, f := range d.Files {
			out = append(out, diffFile{Path: f.Path, Rows: unifiedRows(f.Unified)})
		}
		return out
	}
	if strings.TrimSpace(d.Ignition) == "" {
		return nil
	}
	return []diffFile{{Path: "Ignition config", Rows: unifiedRows(d.Ignition)}}
}

// unifiedRows pairs a unified diff's removed and added lines: a run of
// removals followed by a run of additions becomes rows of changes.
func unifiedRows(unified string) []diffRow {
	var rows, minus, plus []diffRow
	flush := func() {
		for i := 0; i < max(len(minus), len(plus)); i++ {
			r := diffRow{Kind: "changed"}
			if i < len(minus) {
				r.Left, r.HasL = minus[i].Left, true
			}
			if i < len(plus) {
				r.Right, r.HasR = plus[i].Right, true
			}
			switch {
			case !r.HasR:
				r.Kind = "removed"
			case !r.HasL:
				r.Kind = "added"
			}
			rows = append(rows, r)
		}
		minus, plus = minus[:0], plus[:0]
	}
	for _, line := range strings.Split(strings.TrimRight(unified, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "):
		case strings.HasPrefix(line, "@@"):
			flush()
			rows = append(rows, diffRow{Kind: "hunk", Left: line})
		case strings.HasPrefix(line, "-"):
			if len(plus) > 0 {
				flush()
			}
			minus = append(minus, diffRow{Left: line[1:]})
		case strings.HasPrefix(line, "+"):
			plus = append(plus, diffRow{Right: line[1:]})
		case strings.HasPrefix(line, `\`): // "\ No newline at end of file"
		default:
			flush()
			text := strings.TrimPrefix(line, " ")
			rows = append(rows, diffRow{Kind: "same", Left: text, Right: text, HasL: true, HasR: true})
		}
	}
	flush()
	return rows
}
