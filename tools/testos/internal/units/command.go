package units

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultPath is the PATH systemd gives services.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Command is one Exec*= line, prefixes resolved and variables expanded.
type Command struct {
	Path          string   // as written (absolute, or a bare name looked up in DefaultPath)
	Argv          []string // argv[0] first
	IgnoreFailure bool     // "-" prefix: a failure does not fail the unit
}

// ParseCommand reads an Exec*= value: the prefixes "-", "@", ":", "+",
// "!" and "!!", quoted words, and ${VAR} (inside a word) and $VAR (a word
// of its own, split at whitespace) from env, as systemd documents. A
// missing variable expands to nothing.
func ParseCommand(line string, env map[string]string) (Command, error) {
	var c Command
	s := strings.TrimSpace(line)
	argv0Given, expand := false, true
	for prefixes := true; prefixes && s != ""; {
		switch {
		case strings.HasPrefix(s, "!!"):
			s = s[1:] // the second '!' goes below
		case s[0] == '-':
			c.IgnoreFailure = true
		case s[0] == '@':
			argv0Given = true
		case s[0] == ':':
			expand = false
		case s[0] == '+' || s[0] == '!':
		default:
			prefixes = false
			continue
		}
		s = s[1:]
	}
	// Expansion happens on the quoted words, so ${VAR} inside quotes stays
	// one word, as in systemd.
	raw, err := SplitWords(s)
	if err != nil {
		return Command{}, err
	}
	var words []string
	for _, w := range raw {
		if !expand {
			words = append(words, w)
			continue
		}
		if name, ok := strings.CutPrefix(w, "$"); ok && isVarName(name) {
			words = append(words, strings.Fields(env[name])...)
			continue
		}
		words = append(words, expandBraces(w, env))
	}
	if len(words) == 0 {
		return Command{}, errors.New("empty command line")
	}
	c.Path = words[0]
	c.Argv = words
	if argv0Given {
		if len(words) < 2 {
			return Command{}, errors.New("'@' prefix needs an argv[0] after the path")
		}
		c.Argv = words[1:]
	}
	return c, nil
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func expandBraces(w string, env map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(w, "${")
		if i < 0 {
			b.WriteString(w)
			return b.String()
		}
		j := strings.IndexByte(w[i:], '}')
		if j < 0 || !isVarName(w[i+2:i+j]) {
			b.WriteString(w[:i+2])
			w = w[i+2:]
			continue
		}
		b.WriteString(w[:i])
		b.WriteString(env[w[i+2:i+j]])
		w = w[i+j+1:]
	}
}

// Resolve returns the executable a command runs, as a path inside root,
// and an error that names the path when it is not there. A bare name is
// looked up in DefaultPath, as systemd does.
func Resolve(root string, c Command) (string, error) {
	candidates := []string{c.Path}
	if !path.IsAbs(c.Path) {
		candidates = nil
		for _, dir := range strings.Split(DefaultPath, ":") {
			candidates = append(candidates, path.Join(dir, c.Path))
		}
	}
	for _, p := range candidates {
		fi, err := os.Stat(filepath.Join(root, p))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	if path.IsAbs(c.Path) {
		return "", fmt.Errorf("%s does not exist or is not executable", c.Path)
	}
	return "", fmt.Errorf("%s is not in %s", c.Path, DefaultPath)
}

// Env builds a service's environment: PATH, then EnvironmentFile= files
// (read under root) and Environment= assignments in order; later
// assignments win. A missing required environment file is an error; one
// with a "-" prefix is skipped.
func (u *Unit) Env(root string) ([]string, error) {
	vals := map[string]string{"PATH": DefaultPath}
	order := []string{"PATH"}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, ef := range u.EnvironmentFiles {
		p, optional := strings.CutPrefix(ef, "-")
		data, err := readIn(root, p)
		if err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("EnvironmentFile %s: %w", p, err)
		}
		kvs, err := ParseEnvironmentFile(data)
		if err != nil {
			return nil, fmt.Errorf("EnvironmentFile %s: %w", p, err)
		}
		for _, kv := range kvs {
			set(kv[0], kv[1])
		}
	}
	for _, a := range u.Environment {
		k, v, _ := strings.Cut(a, "=")
		set(k, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

// EnvMap turns KEY=VALUE pairs into a map for ParseCommand.
func EnvMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
