package readmodel

import (
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

var timeZero time.Time

// OrgView is an organization's folded state with its version.
type OrgView struct {
	State   org.State
	Version uint64
}

// OrgProjection keeps every organization and an index from token ID to
// organization, so that a presented token is verified without a log read.
type OrgProjection struct {
	projection.Position
	mu       sync.RWMutex
	orgs     map[string]*OrgView
	tokenOrg map[string]string
}

// NewOrgProjection returns an empty projection.
func NewOrgProjection() *OrgProjection {
	return &OrgProjection{orgs: map[string]*OrgView{}, tokenOrg: map[string]string{}}
}

func (p *OrgProjection) Apply(env *events.Envelope, payload any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.orgs[env.AggregateID]
	if v == nil {
		v = &OrgView{}
	}
	// Fold on a copy: readers may hold the previous view's token map.
	next := v.State
	next.Tokens = maps.Clone(v.State.Tokens)
	next.Apply(payload)
	v.State, v.Version = next, env.Sequence
	if v.State.Exists() {
		p.orgs[env.AggregateID] = v
		for id := range v.State.Tokens {
			p.tokenOrg[id] = env.AggregateID
		}
	}
	p.SetCheckpoint(env.Sequence)
	return nil
}

func (p *OrgProjection) Reset() {
	p.mu.Lock()
	p.orgs, p.tokenOrg = map[string]*OrgView{}, map[string]string{}
	p.SetCheckpoint(0)
	p.mu.Unlock()
}

// Get returns one organization.
func (p *OrgProjection) Get(id string) (OrgView, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	v, ok := p.orgs[id]
	if !ok {
		return OrgView{}, errs.NotFound("organization %q does not exist", id)
	}
	return *v, nil
}

// List returns every organization, by ID.
func (p *OrgProjection) List() []OrgView {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]OrgView, 0, len(p.orgs))
	for _, v := range p.orgs {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].State.ID < out[j].State.ID })
	return out
}

// ByToken returns the organization that issued a token ID.
func (p *OrgProjection) ByToken(tokenID string) (OrgView, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	id, ok := p.tokenOrg[tokenID]
	if !ok {
		return OrgView{}, false
	}
	return *p.orgs[id], true
}
