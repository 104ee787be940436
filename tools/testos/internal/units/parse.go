// Package units reads what Ignition wrote for systemd (unit files, drop-ins,
// preset files, .wants links and /dev/null masks) under a root, and works
// out which services a first boot of systemd would start, in which order,
// and with which command lines and environment. It is pure logic over a
// directory tree; the init does the starting.
package units

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Assignment is one "Key=Value" line of a unit file, in file order.
type Assignment struct {
	Section, Key, Value string
	Line                int
}

// ParseINI reads systemd's unit file syntax: [Section] headers, Key=Value
// lines, '#' and ';' comments, and lines continued with a trailing
// backslash (joined with a space, as systemd does).
func ParseINI(data []byte) ([]Assignment, error) {
	var out []Assignment
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		start := n
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			next := strings.TrimSpace(sc.Text())
			if next != "" && (next[0] == '#' || next[0] == ';') {
				continue // comments inside a continuation are dropped
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: section header without ']'", start)
			}
			section = line[1 : len(line)-1]
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want Key=Value", start)
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: assignment outside of a section", start)
		}
		out = append(out, Assignment{Section: section, Key: strings.TrimSpace(key), Value: strings.TrimSpace(value), Line: start})
	}
	return out, sc.Err()
}

// SplitWords splits a value into words as systemd does for command lines
// and Environment=: whitespace separates words, "…" and '…' quote, and
// backslash escapes (\n, \t, \\, \", \', \ and \$ are understood).
func SplitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("trailing backslash in %q", s)
			}
			i++
			switch s[i] {
			case 'n':
				cur.WriteByte('\n')
			case 't':
				cur.WriteByte('\t')
			default:
				cur.WriteByte(s[i])
			}
			inWord = true
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote = c
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// ParseEnvironmentFile reads a systemd EnvironmentFile: KEY=VALUE lines,
// '#' and ';' comments, optional "export " prefixes, values in "…" or '…'
// quotes, and backslash-continued lines. Errors name the line, never its
// content (env files hold credentials).
func ParseEnvironmentFile(data []byte) ([][2]string, error) {
	var out [][2]string
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + strings.TrimSpace(lines[i])
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		out = append(out, [2]string{key, value})
	}
	return out, nil
}
