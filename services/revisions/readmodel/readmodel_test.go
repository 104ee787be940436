package readmodel

import (
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

func env(seq uint64, org, typ, id string) *events.Envelope {
	return &events.Envelope{Sequence: seq, Org: org, AggregateType: typ, AggregateID: id, Time: time.Unix(int64(seq), 0).UTC()}
}

func TestModel(t *testing.T) {
	m := New()
	apply := func(e *events.Envelope, p any) {
		t.Helper()
		if err := m.Apply(e, p); err != nil {
			t.Fatal(err)
		}
	}
	apply(env(1, "_platform", "catalog", "kubernetes"), catalog.Seeded{Versions: []string{"1.33.4"}})
	apply(env(2, "acme", "cluster", "prod"), cluster.Created{Name: "prod", KubernetesVersion: "1.34.1"})
	m.Skip(3)
	apply(env(4, "acme", "pool", "b"), pool.Created{Name: "b", Cluster: "prod"})
	apply(env(5, "acme", "pool", "a"), pool.Created{Name: "a", Cluster: "prod"})
	apply(env(6, "acme", "pool", "a"), pool.RevisionCreated{Revision: pool.Revision{Number: 1}})
	apply(env(7, "globex", "pool", "a"), pool.Created{Name: "a", Cluster: "other"})
	apply(env(8, "acme", "pool", "b"), pool.Deleted{DeletedBy: "x"})

	if m.Checkpoint() != 8 {
		t.Fatalf("checkpoint %d", m.Checkpoint())
	}
	if err := m.Apply(env(9, "acme", "machine", "x"), nil); err == nil {
		t.Fatal("a foreign aggregate type was accepted")
	}
	if err := m.Apply(env(10, "acme", "catalog", "kubernetes"), catalog.VersionAdded{Version: "1.33.5"}); err == nil {
		t.Fatal("a catalog event outside the platform org was accepted")
	}
	if v, _ := m.Catalog().State.Catalog.Latest(catalog.Minor{Major: 1, Minor: 33}); v.String() != "1.33.4" || m.Catalog().Version != 1 {
		t.Fatalf("catalog %v", m.Catalog())
	}
	a, ok := m.Pool("acme", "a")
	if !ok || a.Org != "acme" || a.Version != 6 || !a.CreatedAt.Equal(time.Unix(5, 0)) || !a.UpdatedAt.Equal(time.Unix(6, 0)) || len(a.State.Revisions) != 1 {
		t.Fatalf("pool a: %+v", a)
	}
	if ps := m.Pools("acme", ""); len(ps) != 1 || ps[0].State.Name != "a" {
		t.Fatalf("live pools of acme: %+v", ps)
	}
	if b, ok := m.Pool("acme", "b"); !ok || !b.State.Deleted {
		t.Fatal("a deleted pool is still found by name")
	}
	if ps := m.Pools("globex", "prod"); len(ps) != 0 {
		t.Fatalf("globex's pools of cluster prod: %+v", ps)
	}
	if _, ok := m.Cluster("globex", "prod"); ok {
		t.Fatal("acme's cluster is visible to globex")
	}
	if cs := m.Clusters("acme"); len(cs) != 1 || cs[0].State.KubernetesVersion.String() != "1.34.1" {
		t.Fatalf("clusters: %+v", cs)
	}
	if orgs := m.Orgs(); len(orgs) != 2 || orgs[0] != "acme" || orgs[1] != "globex" {
		t.Fatalf("orgs: %v", orgs)
	}
	m.Reset()
	if m.Checkpoint() != 0 || len(m.Orgs()) != 0 || m.Catalog().Version != 0 {
		t.Fatal("reset kept state")
	}
}

// A query's copy of a pool keeps its revisions while new ones are applied
// (run with -race).
func TestReadersAndWriter(t *testing.T) {
	m := New()
	_ = m.Apply(env(1, "acme", "pool", "a"), pool.Created{Name: "a", Cluster: "prod"})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 2; i < 300; i++ {
			_ = m.Apply(env(uint64(i), "acme", "pool", "a"), pool.RevisionCreated{Revision: pool.Revision{Number: i - 1, Hash: "h"}})
		}
	}()
	for range 300 {
		p, _ := m.Pool("acme", "a")
		for i, r := range p.State.Revisions {
			if r.Number != i+1 {
				t.Fatalf("revision %d is %d", i, r.Number)
			}
		}
	}
	wg.Wait()
	var _ app.ReadModel = m
}
