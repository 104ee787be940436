package command_test

import (
	"context"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

type assignReq struct {
	Machine string `json:"machine"`
	Pool    string `json:"pool"`
	Index   int    `json:"index,omitempty"`
}

type assignResp struct {
	Actor string `json:"actor"`
}

func TestErrorsCrossTheWire(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "registry", 4, nil)
	t.Cleanup(srv.Close)
	err := command.Handle(srv, "cmd.registry.assign", func(ctx context.Context, r assignReq) (assignResp, error) {
		switch r.Machine {
		case "":
			var f errs.Fields
			f.Add("machine", "is required")
			if r.Pool == "" {
				f.Add("pool", "is required")
			}
			return assignResp{}, f.Err()
		case "deleting":
			return assignResp{}, errs.Conflict("machine is being deleted")
		case "missing":
			return assignResp{}, errs.NotFound("no machine %q", r.Machine)
		case "boom":
			panic("handler bug")
		}
		return assignResp{Actor: events.Actor(ctx)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := events.WithActor(context.Background(), "token:t1 (ops)")
	call := func(r any) (assignResp, error) {
		return command.Call[any, assignResp](ctx, env.Conn, "cmd.registry.assign", r)
	}

	resp, err := call(assignReq{Machine: "m1", Pool: "p"})
	if err != nil || resp.Actor != "token:t1 (ops)" {
		t.Fatalf("ok call: %+v %v", resp, err)
	}
	cases := []struct {
		name   string
		req    any
		kind   errs.Kind
		fields []string
	}{
		{"validation", assignReq{}, errs.KindValidation, []string{"machine", "pool"}},
		{"conflict", assignReq{Machine: "deleting"}, errs.KindConflict, nil},
		{"not found", assignReq{Machine: "missing"}, errs.KindNotFound, nil},
		{"panic is internal", assignReq{Machine: "boom"}, errs.KindInternal, nil},
		{"unknown field", map[string]any{"machine": "m", "colour": "red"}, errs.KindValidation, []string{"colour"}},
		{"wrong type", map[string]any{"machine": "m", "index": "three"}, errs.KindValidation, []string{"index"}},
	}
	for _, c := range cases {
		_, err := call(c.req)
		e := errs.As(err)
		if e == nil || e.Kind != c.kind {
			t.Errorf("%s: got %v, want kind %s", c.name, err, c.kind)
			continue
		}
		for i, f := range c.fields {
			if i >= len(e.Fields) || e.Fields[i].Field != f {
				t.Errorf("%s: fields %+v, want %v", c.name, e.Fields, c.fields)
			}
		}
	}
	_, err = command.Call[assignReq, assignResp](ctx, env.Conn, "cmd.nobody.home", assignReq{})
	if !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("no responders: %v", err)
	}
}
