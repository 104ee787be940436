// Package diff compares two revisions: which fields changed (as paths with
// old and new values), and how the rendered Ignition changed (a unified
// diff of the pretty-printed JSON, plus one of each changed file decoded,
// since file contents are data URLs that are unreadable in the JSON).
package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/vincent-petithory/dataurl"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// Change is one field that differs. Old is absent for an added field, New
// for a removed one.
type Change struct {
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
}

// FileDiff is the unified diff of one file or unit as it lands on disk.
type FileDiff struct {
	Path    string `json:"path"`
	Unified string `json:"unified"`
}

// Diff is the comparison of two revisions.
type Diff struct {
	From     int        `json:"from"`
	To       int        `json:"to"`
	FromHash string     `json:"from_hash"`
	ToHash   string     `json:"to_hash"`
	Changes  []Change   `json:"changes"`
	Ignition string     `json:"ignition"`
	Files    []FileDiff `json:"files,omitempty"`
}

// ContextLines is how many unchanged lines surround each hunk.
const ContextLines = 3

// Revisions compares two revisions of a pool. fromIgn and toIgn are their
// rendered configs (render the same preview machine for both, so that
// only the pool's changes show).
func Revisions(from, to pool.Revision, fromIgn, toIgn []byte) (Diff, error) {
	changes, err := Fields(from.Config.Normalize(), to.Config.Normalize())
	if err != nil {
		return Diff{}, err
	}
	d := Diff{From: from.Number, To: to.Number, FromHash: from.Hash, ToHash: to.Hash, Changes: changes}
	fromName := fmt.Sprintf("revision-%d.ign.json", from.Number)
	toName := fmt.Sprintf("revision-%d.ign.json", to.Number)
	d.Ignition, d.Files, err = Ignition(fromName, toName, fromIgn, toIgn)
	return d, err
}

// Ignition diffs two Ignition configs: the pretty-printed JSON, and each
// file and unit whose contents differ.
func Ignition(fromName, toName string, fromIgn, toIgn []byte) (string, []FileDiff, error) {
	a, err := pretty(fromIgn)
	if err != nil {
		return "", nil, errs.Invalid(fromName, "not JSON: %v", err)
	}
	b, err := pretty(toIgn)
	if err != nil {
		return "", nil, errs.Invalid(toName, "not JSON: %v", err)
	}
	unified := Unified(fromName, toName, a, b, ContextLines)

	fa, err := contents(fromIgn)
	if err != nil {
		return "", nil, errs.Invalid(fromName, "%v", err)
	}
	fb, err := contents(toIgn)
	if err != nil {
		return "", nil, errs.Invalid(toName, "%v", err)
	}
	var files []FileDiff
	for _, p := range unionKeys(fa, fb) {
		if u := Unified("a"+p, "b"+p, fa[p], fb[p], ContextLines); u != "" {
			files = append(files, FileDiff{Path: p, Unified: u})
		}
	}
	return unified, files, nil
}

func pretty(b []byte) (string, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(b), "", "  "); err != nil {
		return "", err
	}
	out.WriteByte('\n')
	return out.String(), nil
}

// contents maps each file path (and each unit, as
// /etc/systemd/system/<name>) to its text as it lands on disk.
func contents(ign []byte) (map[string]string, error) {
	var cfg types.Config
	if err := json.Unmarshal(ign, &cfg); err != nil {
		return nil, fmt.Errorf("not an Ignition config: %v", err)
	}
	out := map[string]string{}
	for _, f := range cfg.Storage.Files {
		src := ""
		if f.Contents.Source != nil {
			src = *f.Contents.Source
		}
		if strings.HasPrefix(src, "data:") && (f.Contents.Compression == nil || *f.Contents.Compression == "") {
			if u, err := dataurl.DecodeString(src); err == nil {
				out[f.Path] = string(u.Data)
				continue
			}
		}
		out[f.Path] = "(fetched from " + src + ")\n"
	}
	for _, u := range cfg.Systemd.Units {
		base := "/etc/systemd/system/" + u.Name
		if u.Contents != nil {
			out[base] = *u.Contents
		}
		for _, d := range u.Dropins {
			if d.Contents != nil {
				out[base+".d/"+d.Name] = *d.Contents
			}
		}
	}
	return out, nil
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Fields compares two values through their JSON form and lists every
// leaf that differs, with paths like the ones validation errors use
// (network.vlans[1].id, node_labels["a/b"]). Lists are aligned by their
// longest common subsequence, so inserting an element reports one added
// element rather than a change at every later index.
func Fields(old, new any) ([]Change, error) {
	a, err := toTree(old)
	if err != nil {
		return nil, err
	}
	b, err := toTree(new)
	if err != nil {
		return nil, err
	}
	var out []Change
	walk(&out, "", a, b)
	return out, nil
}

func toTree(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, errs.Internal("diff: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var t any
	if err := dec.Decode(&t); err != nil {
		return nil, errs.Internal("diff: %v", err)
	}
	return t, nil
}

type absent struct{}

func walk(out *[]Change, path string, a, b any) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(av)+len(bv))
			for k := range av {
				keys = append(keys, k)
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				x, okA := av[k]
				y, okB := bv[k]
				if !okA {
					x = absent{}
				}
				if !okB {
					y = absent{}
				}
				walk(out, join(path, k), x, y)
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			walkList(out, path, av, bv)
			return
		}
	}
	if equal(a, b) {
		return
	}
	c := Change{Path: path}
	if _, ok := a.(absent); !ok {
		c.Old = encode(a)
	}
	if _, ok := b.(absent); !ok {
		c.New = encode(b)
	}
	*out = append(*out, c)
}

// walkList aligns two lists by LCS over their encoded elements; a run of
// removed elements next to a run of added ones is paired up and compared
// field by field.
func walkList(out *[]Change, path string, a, b []any) {
	ea := make([]string, len(a))
	for i, v := range a {
		ea[i] = string(encode(v))
	}
	eb := make([]string, len(b))
	for i, v := range b {
		eb[i] = string(encode(v))
	}
	ops := myers(ea, eb)
	for i := 0; i < len(ops); {
		if ops[i].kind == opEqual {
			i++
			continue
		}
		var dels, ins []op
		for i < len(ops) && ops[i].kind == opDelete {
			dels = append(dels, ops[i])
			i++
		}
		for i < len(ops) && ops[i].kind == opInsert {
			ins = append(ins, ops[i])
			i++
		}
		pairs, onlyA, onlyB := pair(a, b, dels, ins)
		// Removals first, then changes and additions in the new order.
		for _, i := range onlyA {
			*out = append(*out, Change{Path: fmt.Sprintf("%s[%d]", path, i), Old: encode(a[i])})
		}
		for _, j := range onlyB {
			pairs = append(pairs, [2]int{-1, j})
		}
		slices.SortFunc(pairs, func(x, y [2]int) int { return x[1] - y[1] })
		for _, p := range pairs {
			if p[0] < 0 {
				*out = append(*out, Change{Path: fmt.Sprintf("%s[%d]", path, p[1]), New: encode(b[p[1]])})
				continue
			}
			walk(out, fmt.Sprintf("%s[%d]", path, p[1]), a[p[0]], b[p[1]])
		}
	}
}

// pair matches removed and added elements that are the same thing
// changed: objects with the same identity (name, key or id), and scalars
// or anonymous objects by position. Objects of different identity are a
// removal and an addition, not a change.
func pair(a, b []any, dels, ins []op) (pairs [][2]int, onlyA, onlyB []int) {
	usedB := make([]bool, len(ins))
	var anonA []int
	for _, d := range dels {
		id := identity(a[d.a])
		if id == "" {
			anonA = append(anonA, d.a)
			continue
		}
		matched := false
		for j, n := range ins {
			if !usedB[j] && identity(b[n.b]) == id {
				usedB[j] = true
				pairs = append(pairs, [2]int{d.a, n.b})
				matched = true
				break
			}
		}
		if !matched {
			onlyA = append(onlyA, d.a)
		}
	}
	var anonB []int
	for j, n := range ins {
		if usedB[j] {
			continue
		}
		if identity(b[n.b]) == "" {
			anonB = append(anonB, n.b)
		} else {
			onlyB = append(onlyB, n.b)
		}
	}
	k := min(len(anonA), len(anonB))
	for i := 0; i < k; i++ {
		pairs = append(pairs, [2]int{anonA[i], anonB[i]})
	}
	onlyA = append(onlyA, anonA[k:]...)
	onlyB = append(onlyB, anonB[k:]...)
	slices.Sort(onlyA)
	return pairs, onlyA, onlyB
}

// identity names a list element that is an object with a name, key or id.
func identity(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	for _, f := range []string{"name", "key", "id"} {
		if x, ok := m[f]; ok {
			id := f + "=" + string(encode(x))
			if p, ok := m["parent"]; ok { // VLANs: the id is per parent
				id += ",parent=" + string(encode(p))
			}
			return id
		}
	}
	return ""
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func join(path, key string) string {
	if !identRe.MatchString(key) {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func equal(a, b any) bool {
	return bytes.Equal(encode(a), encode(b))
}

func encode(v any) json.RawMessage {
	if _, ok := v.(absent); ok {
		return json.RawMessage("null")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
