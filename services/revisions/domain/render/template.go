package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	baseutil "github.com/coreos/ignition/v2/butane/base/util"
	"golang.org/x/sync/singleflight"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// A Template is a pool revision's Ignition config rendered once, through
// Butane and Ignition's validator, for a stand-in machine, with the four
// files that differ from machine to machine cut out: /etc/hostname,
// /etc/anvil/revision, the kubeadm join configuration (node name and node
// labels) and the agent's env file (machine revision id). Specialise puts a
// machine's own versions of them back, encoded exactly as Butane encodes
// them, so that its result is byte for byte what Render returns for that
// machine (template_test.go checks it for many machines), at a small
// fraction of the cost.
//
// Specialise cannot make the config invalid: it only replaces the JSON
// string of a file's source URL with another JSON-encoded data URL, and
// the machine's settings pass the same validation as for a full render.
type Template struct {
	key    string
	pool   string
	rev    pool.Revision
	join   cluster.Join
	opts   Options
	config pool.Config // rev.Config, normalized
	k8s    catalog.Version
	api    string // the join endpoint

	// parts are the rendered config around the machine's files: the
	// source of files[i] goes between parts[i] and parts[i+1].
	parts [][]byte
	files []machineFile
	size  int
}

// machineFile names a file whose contents are the machine's own.
type machineFile int

const (
	fileHostname machineFile = iota
	fileRevision
	fileJoin
	fileAgentEnv
)

// templateHostname is the stand-in machine's name: long and unusual, so
// that its files' sources occur once in the rendered stand-in config.
const templateHostname = "anvil-template-stand-in-machine-0f1e2d3c4b5a"

// TemplateKey identifies a template: the pool, the pool revision (number
// and content hash), the join material and the options. Every machine
// revision of that pool revision renders from the same template.
func (in Input) TemplateKey() string {
	h := sha256.New()
	for _, s := range []string{
		in.Machine.Pool, fmt.Sprint(in.Revision.Number), in.Revision.Hash,
		in.Join.APIEndpoint, in.Join.BootstrapToken.Reveal(), in.Join.CACertHash,
		in.Options.BaseURL, in.Options.AgentURL, in.Options.AgentHash, in.Options.SysextURL, in.Options.SysextHash, in.Options.Arch,
	} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// NewTemplate renders the template of the pool revision that in's machine
// revision refers to (the machine itself is not used beyond its pool and
// pool revision).
func NewTemplate(in Input) (*Template, error) {
	standIn, err := pool.NewMachineRevision(in.Machine.Pool, in.Revision, pool.MachineSettings{Hostname: templateHostname})
	if err != nil {
		return nil, err
	}
	in.Machine = standIn
	out, err := Render(in) // validates the input and the output
	if err != nil {
		return nil, err
	}
	t := &Template{key: in.TemplateKey(), pool: standIn.Pool, rev: in.Revision, join: in.Join, opts: in.Options,
		config: in.Revision.Config.Normalize()}
	t.k8s, _ = catalog.ParseVersion(t.config.Kubernetes.Version) // Render checked it
	if t.api, err = cluster.JoinEndpoint(in.Join.APIEndpoint); err != nil {
		return nil, errs.Invalid("join.api_endpoint", "%v", err)
	}
	type cut struct {
		at, end int
		file    machineFile
	}
	var cuts []cut
	for _, f := range []machineFile{fileHostname, fileRevision, fileJoin, fileAgentEnv} {
		src, err := t.source(f, standIn)
		if err != nil {
			return nil, err
		}
		if n := bytes.Count(out, src); n != 1 {
			return nil, errs.Internal("render: template: the source of machine file %d occurs %d times in the stand-in's config, want 1", f, n)
		}
		at := bytes.Index(out, src)
		cuts = append(cuts, cut{at, at + len(src), f})
	}
	slices.SortFunc(cuts, func(a, b cut) int { return a.at - b.at })
	prev := 0
	for _, c := range cuts {
		if c.at < prev {
			return nil, errs.Internal("render: template: machine files overlap in the stand-in's config")
		}
		t.parts = append(t.parts, out[prev:c.at])
		t.files = append(t.files, c.file)
		prev = c.end
	}
	t.parts = append(t.parts, out[prev:])
	for _, p := range t.parts {
		t.size += len(p)
	}
	return t, nil
}

// Key is the template's TemplateKey.
func (t *Template) Key() string { return t.key }

// Size is the template's size in bytes.
func (t *Template) Size() int { return t.size }

// Specialise returns the config of machine revision m, which must be a
// machine revision of the template's pool revision: what Render returns
// for it, with the template's join material and options.
func (t *Template) Specialise(m pool.MachineRevision) ([]byte, error) {
	var f errs.Fields
	if err := m.Verify(); err != nil {
		f.Add("machine", "%v", err)
	}
	if m.Pool != t.pool || m.PoolRevision != t.rev.Number || m.PoolRevisionHash != t.rev.Hash {
		f.Add("revision", "machine revision %s refers to pool %s revision %d (%s), the template is of pool %s revision %d (%s)",
			m.ID, m.Pool, m.PoolRevision, m.PoolRevisionHash, t.pool, t.rev.Number, t.rev.Hash)
	}
	f.Merge("machine", pool.MachineSettings{Hostname: m.Hostname, Labels: m.Labels}.Validate())
	if err := f.Err(); err != nil {
		return nil, err
	}
	srcs := make([][]byte, len(t.files))
	n := t.size
	for i, file := range t.files {
		src, err := t.source(file, m)
		if err != nil {
			return nil, err
		}
		srcs[i] = src
		n += len(src)
	}
	out := make([]byte, 0, n)
	for i, p := range t.parts {
		out = append(out, p...)
		if i < len(srcs) {
			out = append(out, srcs[i]...)
		}
	}
	return out, nil
}

// source is the JSON string (quotes included) of a machine file's source
// as it appears in the rendered config of m.
func (t *Template) source(f machineFile, m pool.MachineRevision) ([]byte, error) {
	in := Input{Machine: m, Revision: t.rev, Join: t.join, Options: t.opts}
	var url string
	switch f {
	case fileAgentEnv:
		url = agentEnvURL(in) // a source of ours, which Butane passes on as it is
	default:
		var contents string
		switch f {
		case fileHostname:
			contents = hostnameFile(m)
		case fileRevision:
			contents = revisionFile(m)
		case fileJoin:
			y, err := joinConfiguration(in, t.config, t.k8s, t.api)
			if err != nil {
				return nil, err
			}
			contents = y
		}
		// What Butane makes of an inline file (base/v0_5's translation,
		// without compression: Render turns it off).
		u, _, err := baseutil.MakeDataURL([]byte(contents), nil, false)
		if err != nil {
			return nil, errs.Internal("render: data URL: %v", err)
		}
		url = u
	}
	// encoding/json, as Butane's output: the same escaping.
	return json.Marshal(url)
}

// Templates keeps the templates of the pool revisions machines boot, one
// render each: concurrent misses for one key share a render, and the set
// is emptied when it holds max templates (each is a config's size, a few
// tens of KiB; a pool revision's template is rendered again on its next
// use).
type Templates struct {
	max   int
	group singleflight.Group

	mu    sync.Mutex
	items map[string]*Template
	stats TemplateStats
}

// TemplateStats are counters for metrics.
type TemplateStats struct {
	Hits, Renders uint64
	Entries       int
}

// NewTemplates returns a template set of at most max templates.
func NewTemplates(max int) *Templates {
	return &Templates{max: max, items: map[string]*Template{}}
}

// Render renders in through its pool revision's template. When no
// template can be made of it, the full render (what a template stands for)
// answers: it gives the machine its config, or the refusal that names
// what is wrong.
func (ts *Templates) Render(in Input) ([]byte, error) {
	t, err := ts.Template(in)
	if err != nil {
		return Render(in)
	}
	return t.Specialise(in.Machine)
}

// Template returns the template of in's pool revision, join material and
// options, rendering it on first use.
func (ts *Templates) Template(in Input) (*Template, error) {
	key := in.TemplateKey()
	ts.mu.Lock()
	t, ok := ts.items[key]
	if ok {
		ts.stats.Hits++
	}
	ts.mu.Unlock()
	if ok {
		return t, nil
	}
	v, err, _ := ts.group.Do(key, func() (any, error) {
		t, err := NewTemplate(in)
		if err != nil {
			return nil, err
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.stats.Renders++
		if len(ts.items) >= ts.max {
			clear(ts.items)
		}
		ts.items[key] = t
		return t, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Template), nil
}

// Stats returns a snapshot of the counters.
func (ts *Templates) Stats() TemplateStats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	s := ts.stats
	s.Entries = len(ts.items)
	return s
}
