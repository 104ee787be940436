package service_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// instantPassed returns the current instant once the clock has moved past
// it, for an ?at= that must name everything recorded before it and
// nothing recorded after it, whatever the clock's resolution.
func instantPassed(t testing.TB) time.Time {
	t.Helper()
	at := time.Now()
	eventstest.Eventually(t, "the clock to move past "+at.Format(time.RFC3339Nano), 10*time.Second, time.Millisecond,
		func() (bool, string) { return time.Now().After(at), time.Now().Format(time.RFC3339Nano) })
	return at
}

// waitTokenCaching waits until the gateway caches verified tokens again
// after the quiet period that follows an organization event: the second
// of two requests in a row with tok is no longer verified by the
// registry. It watches the registry's verify subject on a connection of
// its own; a flush on it delivers every request the server routed before.
func (s *stack) waitTokenCaching(tok string) {
	s.t.Helper()
	nc := s.env.Connect(s.t)
	sub, err := nc.SubscribeSync(regapi.SubjectTokenVerify)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	verified := func() int {
		if err := nc.Flush(); err != nil {
			s.t.Fatal(err)
		}
		n := 0
		for {
			m, err := sub.NextMsg(time.Nanosecond)
			if err != nil {
				return n
			}
			var v regapi.TokenVerify
			if json.Unmarshal(m.Data, &v) == nil && v.Token == tok {
				n++
			}
		}
	}
	verified()
	s.eventually("the gateway to cache verified tokens again", func() (bool, string) {
		s.do("GET", "/api/v1/orgs/acme/machines", tok, nil, nil, nil) // verified, and cached unless quiet
		verified()
		r := s.do("GET", "/api/v1/orgs/acme/machines", tok, nil, nil, nil)
		n := verified()
		return r.status == 200 && n == 0, fmt.Sprintf("%d: the second request was verified %d times", r.status, n)
	})
}
