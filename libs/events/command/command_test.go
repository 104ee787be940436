package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

type page struct {
	Items []string `json:"items"`
	Next  string   `json:"next,omitempty"`
}

// A handler may answer with pre-encoded JSON, and a caller may take the
// result's bytes without decoding them; either side can be mixed with
// the ordinary ones.
func TestPreEncodedResults(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "registry", 4, nil)
	t.Cleanup(srv.Close)
	const encoded = `{"items":["a","b"],"next":"c"}`
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(command.Handle(srv, "cmd.t.raw", func(_ context.Context, r assignReq) (command.JSON, error) {
		switch r.Machine {
		case "missing":
			return nil, errs.NotFound("no machine %q", r.Machine)
		case "empty":
			return nil, nil
		}
		return command.JSON(encoded), nil
	}))
	must(command.Handle(srv, "cmd.t.typed", func(_ context.Context, r assignReq) (page, error) {
		if r.Machine == "missing" {
			return page{}, errs.NotFound("no machine %q", r.Machine)
		}
		return page{Items: []string{"a", "b"}, Next: "c"}, nil
	}))
	must(command.Handle(srv, "cmd.t.nested", func(_ context.Context, r assignReq) (map[string]command.JSON, error) {
		return map[string]command.JSON{"page": command.JSON(encoded), "none": nil}, nil
	}))
	ctx := context.Background()

	// pre-encoded, decoded by Call as any other result
	p, err := command.Call[assignReq, page](ctx, env.Conn, "cmd.t.raw", assignReq{Machine: "m"})
	if err != nil || len(p.Items) != 2 || p.Items[1] != "b" || p.Next != "c" {
		t.Fatalf("Call of a pre-encoded result: %+v %v", p, err)
	}
	// the bytes as they were, from either kind of handler
	for _, subject := range []string{"cmd.t.raw", "cmd.t.typed"} {
		raw, err := command.CallJSON(ctx, env.Conn, subject, assignReq{Machine: "m"})
		if err != nil || string(raw) != encoded {
			t.Fatalf("CallJSON %s: %q %v", subject, raw, err)
		}
		// the caller owns them: appending does not write into anything else
		if got := string(append(raw, '\n')); got != encoded+"\n" {
			t.Fatalf("append: %q", got)
		}
		_, err = command.CallJSON(ctx, env.Conn, subject, assignReq{Machine: "missing"})
		if !errs.Is(err, errs.KindNotFound) {
			t.Fatalf("CallJSON %s refused: %v", subject, err)
		}
		_, err = command.Call[assignReq, page](ctx, env.Conn, subject, assignReq{Machine: "missing"})
		if !errs.Is(err, errs.KindNotFound) {
			t.Fatalf("Call %s refused: %v", subject, err)
		}
	}
	// an empty pre-encoded result is no result: the zero value, or nil bytes
	p, err = command.Call[assignReq, page](ctx, env.Conn, "cmd.t.raw", assignReq{Machine: "empty"})
	if err != nil || p.Items != nil || p.Next != "" {
		t.Fatalf("Call of an empty result: %+v %v", p, err)
	}
	if raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.raw", assignReq{Machine: "empty"}); err != nil || raw != nil {
		t.Fatalf("CallJSON of an empty result: %q %v", raw, err)
	}
	// JSON inside a result encodes as itself
	var nested map[string]page
	raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.nested", assignReq{})
	if err != nil || json.Unmarshal(raw, &nested) != nil || nested["page"].Next != "c" || !strings.Contains(string(raw), `"none":null`) {
		t.Fatalf("nested: %s %v", raw, err)
	}
	// request validation still comes first
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.t.raw", map[string]any{"colour": "red"}); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.nobody.home", assignReq{}); !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("no responders: %v", err)
	}
}

// Replies framed otherwise than Server frames them (another
// implementation, spacing) still decode.
func TestRepliesFramedOtherwise(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	answers := map[string]string{
		"cmd.t.spaced": `{ "result" : {"items":["x"]} }`,
		"cmd.t.error":  `{"error":{"kind":"conflict","message":"busy"}}`,
		"cmd.t.empty":  `{}`,
		"cmd.t.junk":   `not json`,
	}
	for subject, body := range answers {
		sub, err := env.Conn.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(body)) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	ctx := context.Background()
	if p, err := command.Call[assignReq, page](ctx, env.Conn, "cmd.t.spaced", assignReq{}); err != nil || len(p.Items) != 1 {
		t.Fatalf("spaced: %+v %v", p, err)
	}
	if raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.spaced", assignReq{}); err != nil || string(raw) != `{"items":["x"]}` {
		t.Fatalf("spaced raw: %q %v", raw, err)
	}
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.t.error", assignReq{}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("error: %v", err)
	}
	if raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.empty", assignReq{}); err != nil || raw != nil {
		t.Fatalf("empty: %q %v", raw, err)
	}
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.t.junk", assignReq{}); !errs.Is(err, errs.KindInternal) {
		t.Fatalf("junk: %v", err)
	}
}

// A handler may append its encoded result to a pooled reply buffer; many
// at once each get their own answer.
func TestHandleAppend(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "registry", 8, nil)
	t.Cleanup(srv.Close)
	err := command.HandleAppend(srv, "cmd.t.append", func(_ context.Context, r assignReq, dst []byte) ([]byte, error) {
		switch r.Machine {
		case "missing":
			return dst, errs.NotFound("no machine %q", r.Machine)
		case "empty":
			return dst, nil
		}
		dst = append(dst, `{"items":[`...)
		for i := range r.Index {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `"`+r.Machine+`"`...)
		}
		return append(dst, `]}`...), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				name, n := fmt.Sprintf("m%d-%d", g, i), 1+(g*50+i)%300
				p, err := command.Call[assignReq, page](ctx, env.Conn, "cmd.t.append", assignReq{Machine: name, Index: n})
				if err != nil || len(p.Items) != n || p.Items[0] != name || p.Items[n-1] != name {
					t.Errorf("Call %s: %d items %v", name, len(p.Items), err)
					return
				}
				raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.append", assignReq{Machine: name, Index: 1})
				if err != nil || string(raw) != `{"items":["`+name+`"]}` {
					t.Errorf("CallJSON %s: %s %v", name, raw, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.append", assignReq{Machine: "empty"}); err != nil || raw != nil {
		t.Fatalf("empty: %q %v", raw, err)
	}
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.t.append", assignReq{Machine: "missing"}); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("refused: %v", err)
	}
	if _, err := command.CallJSON(ctx, env.Conn, "cmd.t.append", map[string]any{"colour": 1}); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("unknown field: %v", err)
	}
}

// A call no service answers is unavailable, and says so apart from one
// that timed out.
func TestNoResponder(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx := context.Background()
	_, err := command.Call[struct{}, struct{}](ctx, env.Conn, "cmd.nobody.here", struct{}{})
	if !command.IsNoResponder(err) || !errs.Is(err, errs.KindUnavailable) || errs.As(err).Kind != errs.KindUnavailable {
		t.Fatalf("no responder: %v (IsNoResponder %v)", err, command.IsNoResponder(err))
	}
	sub, err := env.Conn.Subscribe("cmd.slow", func(*nats.Msg) {}) // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = command.Call[struct{}, struct{}](short, env.Conn, "cmd.slow", struct{}{})
	if err == nil || command.IsNoResponder(err) || !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("timed out: %v (IsNoResponder %v)", err, command.IsNoResponder(err))
	}
}
