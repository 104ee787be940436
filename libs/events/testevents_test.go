package events_test

import "github.com/anvil-fleet/anvil/libs/events"

type counted struct {
	N int `json:"n"`
}

func (counted) EventType() string { return "test.counted" }

type renamed struct {
	Name string `json:"name"`
}

func (renamed) EventType() string { return "test.renamed" }

func testRegistry() *events.Registry {
	r := events.NewRegistry()
	r.RegisterAll([]any{counted{}, renamed{}})
	return r
}
