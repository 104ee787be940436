package ports

import (
	"context"
	"reflect"
	"testing"

	"github.com/anvil-fleet/anvil/services/gateway/domain"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

func TestWrittenVersion(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want uint64
	}{
		{"a cluster carries its version", rev.Cluster{Version: 7}, 7},
		{"a pool change carries its pool's", rev.PoolChange{Pool: rev.Pool{Version: 12}, Changed: true}, 12},
		{"nothing to mark", struct{ N int }{3}, 0},
		{"not a struct", 5, 0},
	} {
		if got := writtenVersion(reflect.ValueOf(c.v)); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSetMinVersion(t *testing.T) {
	get := rev.GetPoolRequest{Org: "acme", Name: "workers"}
	setMinVersion(reflect.ValueOf(&get).Elem(), 41)
	if get.MinVersion != 41 {
		t.Errorf("GetPoolRequest.MinVersion = %d, want 41", get.MinVersion)
	}
	setMinVersion(reflect.ValueOf(&get).Elem(), 0) // no mark: what the caller asked stays
	if get.MinVersion != 41 {
		t.Errorf("a zero mark changed MinVersion to %d", get.MinVersion)
	}
	diff := rev.DiffRevisionsRequest{Org: "acme", Pool: "workers", From: 1, To: 2}
	before := diff
	setMinVersion(reflect.ValueOf(&diff).Elem(), 41)
	if diff != before {
		t.Errorf("a request without min_version changed: %+v", diff)
	}
}

func TestWriteMarksPerCallerAndService(t *testing.T) {
	var w writeMarks
	alice := withPrincipal(t, "tok-a", "alice")
	bob := withPrincipal(t, "tok-b", "bob")
	w.note(alice, marksRevisions, 10)
	w.note(alice, marksRevisions, 8) // an older answer arriving late does not go back
	w.note(alice, marksRegistry, 3)
	if got := w.last(alice, marksRevisions); got != 10 {
		t.Errorf("alice revisions mark %d, want 10", got)
	}
	if got := w.last(alice, marksRegistry); got != 3 {
		t.Errorf("alice registry mark %d, want 3", got)
	}
	if got := w.last(bob, marksRevisions); got != 0 {
		t.Errorf("bob sees alice's mark: %d", got)
	}
}

func withPrincipal(t *testing.T, tokenID, name string) context.Context {
	t.Helper()
	return context.WithValue(context.Background(), principalKey, domain.Principal{TokenID: tokenID, Name: name})
}
