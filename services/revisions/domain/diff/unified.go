package diff

import (
	"fmt"
	"strings"
)

// Unified returns a unified diff (as diff -u prints it) of two texts, with
// context lines around each change; "" when they are equal.
func Unified(oldName, newName, oldText, newText string, context int) string {
	if oldText == newText {
		return ""
	}
	a, b := splitLines(oldText), splitLines(newText)
	ops := myers(a, b)
	a, b = trimMarks(a), trimMarks(b)

	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range hunks(ops, context) {
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", span(h.aStart, h.aLen), span(h.bStart, h.bLen))
		for _, op := range h.ops {
			switch op.kind {
			case opEqual:
				out.WriteString(" " + a[op.a] + "\n")
			case opDelete:
				out.WriteString("-" + a[op.a] + "\n")
			case opInsert:
				out.WriteString("+" + b[op.b] + "\n")
			}
			if op.noEOL {
				out.WriteString("\\ No newline at end of file\n")
			}
		}
	}
	return out.String()
}

// splitLines splits on "\n"; a missing final newline is marked on the last
// line so that it shows as a change, as diff does.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if lines[len(lines)-1] == "" {
		return lines[:len(lines)-1]
	}
	lines[len(lines)-1] += noEOLMark
	return lines
}

// noEOLMark is appended to a last line without newline; it cannot occur in
// a line of text because lines never contain "\n".
const noEOLMark = "\n"

type opKind int

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

type op struct {
	kind  opKind
	a, b  int // line indexes (a for equal/delete, b for insert)
	noEOL bool
}

// myers computes a shortest edit script (Myers 1986, the greedy forward
// algorithm), keeping each round's frontier to trace the path back.
func myers(a, b []string) []op {
	n, m := len(a), len(b)
	maxD := n + m
	offset := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	var dFound int
found:
	for d := 0; d <= maxD; d++ {
		if d*len(v) > maxTraceCells {
			return replaceAll(a, b)
		}
		snapshot := make([]int, len(v))
		copy(snapshot, v)
		trace = append(trace, snapshot)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[offset+k-1] < v[offset+k+1]) {
				x = v[offset+k+1] // down: insertion
			} else {
				x = v[offset+k-1] + 1 // right: deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[offset+k] = x
			if x >= n && y >= m {
				dFound = d
				break found
			}
		}
	}

	// Walk back through the frontiers.
	var rev []op
	x, y := n, m
	for d := dFound; d > 0; d-- {
		vPrev := trace[d]
		k := x - y
		var prevK int
		if k == -d || (k != d && vPrev[offset+k-1] < vPrev[offset+k+1]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vPrev[offset+prevK]
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, op{kind: opEqual, a: x, b: y})
		}
		if x == prevX {
			y--
			rev = append(rev, op{kind: opInsert, a: x, b: y})
		} else {
			x--
			rev = append(rev, op{kind: opDelete, a: x, b: y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{kind: opEqual, a: x, b: y})
	}
	ops := make([]op, len(rev))
	for i := range rev {
		ops[i] = rev[len(rev)-1-i]
	}
	for i := range ops {
		var line string
		if ops[i].kind == opInsert {
			line = b[ops[i].b]
		} else {
			line = a[ops[i].a]
		}
		if strings.HasSuffix(line, noEOLMark) {
			ops[i].noEOL = true
		}
	}
	return ops
}

func trimMarks(lines []string) []string {
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], noEOLMark)
	}
	return lines
}

// maxTraceCells bounds the memory of one diff; past it (huge, wholly
// different texts) the diff is "delete everything, insert everything",
// which is still correct, only not minimal.
const maxTraceCells = 1 << 24

func replaceAll(a, b []string) []op {
	ops := make([]op, 0, len(a)+len(b))
	for i := range a {
		ops = append(ops, op{kind: opDelete, a: i, noEOL: strings.HasSuffix(a[i], noEOLMark)})
	}
	for j := range b {
		ops = append(ops, op{kind: opInsert, b: j, noEOL: strings.HasSuffix(b[j], noEOLMark)})
	}
	return ops
}

type hunk struct {
	aStart, aLen, bStart, bLen int
	ops                        []op
}

// hunks groups the script into hunks with context lines on each side,
// merging changes whose contexts touch.
func hunks(ops []op, context int) []hunk {
	var out []hunk
	i := 0
	for i < len(ops) {
		// Find the next change.
		for i < len(ops) && ops[i].kind == opEqual {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-context)
		end := i
		// Extend while the gap between changes is at most 2*context.
		for end < len(ops) {
			for end < len(ops) && ops[end].kind != opEqual {
				end++
			}
			gap := end
			for gap < len(ops) && ops[gap].kind == opEqual {
				gap++
			}
			if gap < len(ops) && gap-end <= 2*context {
				end = gap
				continue
			}
			end = min(len(ops), end+context)
			break
		}
		h := hunk{ops: ops[start:end]}
		h.aStart, h.bStart = lineStart(ops, start)
		for _, o := range h.ops {
			if o.kind != opInsert {
				h.aLen++
			}
			if o.kind != opDelete {
				h.bLen++
			}
		}
		out = append(out, h)
		i = end
	}
	return out
}

// lineStart returns the 0-based a and b line numbers at ops[i].
func lineStart(ops []op, i int) (int, int) {
	a, b := 0, 0
	for _, o := range ops[:i] {
		if o.kind != opInsert {
			a++
		}
		if o.kind != opDelete {
			b++
		}
	}
	return a, b
}

// span prints a hunk range: "start,len", 1-based; an empty range names
// the line before it, as diff does.
func span(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
