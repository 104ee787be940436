package command_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

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

type deadlineResp struct {
	Deadline time.Time `json:"deadline"`
	Has      bool      `json:"has"`
}

// The caller's deadline crosses the wire (as the time left, so clocks
// need not agree) and bounds the handler's context; a call without one
// has DefaultTimeout's.
func TestHandlerHasTheCallersDeadline(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "deadline", 4, nil)
	t.Cleanup(srv.Close)
	const subject = "cmd.t.deadline"
	err := command.Handle(srv, subject, func(ctx context.Context, _ struct{}) (deadlineResp, error) {
		d, ok := ctx.Deadline()
		return deadlineResp{Deadline: d, Has: ok}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	got, err := command.Call[struct{}, deadlineResp](ctx, env.Conn, subject, struct{}{})
	if err != nil || !got.Has || got.Deadline.After(want.Add(time.Second)) {
		t.Fatalf("handler's deadline %v (has %v), caller's %v: %v", got.Deadline, got.Has, want, err)
	}
	want = time.Now().Add(command.DefaultTimeout)
	got, err = command.Call[struct{}, deadlineResp](context.Background(), env.Conn, subject, struct{}{})
	if err != nil || !got.Has || got.Deadline.After(want.Add(time.Second)) {
		t.Fatalf("handler's deadline %v (has %v), DefaultTimeout's %v: %v", got.Deadline, got.Has, want, err)
	}
}

// gate serves subject with a single slot, which a request for machine
// "hold" keeps until release is closed (or its deadline passes); it
// counts the handler's calls by machine.
type gate struct {
	env     *eventstest.Env
	subject string
	held    chan struct{}
	release chan struct{}
	freed   sync.Once
	mu      sync.Mutex
	calls   map[string]int
}

func startGate(t *testing.T, subject string) *gate {
	t.Helper()
	g := &gate{env: eventstest.Start(t, events.NewRegistry()), subject: subject,
		held: make(chan struct{}), release: make(chan struct{}), calls: map[string]int{}}
	srv := command.NewServer(g.env.Conn, "gate", 1, nil)
	t.Cleanup(srv.Close)
	t.Cleanup(g.free) // before Close, which waits for the held slot
	err := command.Handle(srv, subject, func(ctx context.Context, r assignReq) (assignResp, error) {
		g.mu.Lock()
		g.calls[r.Machine]++
		g.mu.Unlock()
		if r.Machine != "hold" {
			return assignResp{}, nil
		}
		g.held <- struct{}{}
		select {
		case <-g.release:
			return assignResp{}, nil
		case <-ctx.Done():
			return assignResp{}, ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// free releases the held slot.
func (g *gate) free() { g.freed.Do(func() { close(g.release) }) }

// hold sends the request that takes the slot and returns once its
// handler runs; its answer comes on the channel.
func (g *gate) hold(t *testing.T) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := command.Call[assignReq, assignResp](context.Background(), g.env.Conn, g.subject, assignReq{Machine: "hold"})
		done <- err
	}()
	select {
	case <-g.held:
	case err := <-done:
		t.Fatalf("the request to hold the slot: %v", err)
	}
	return done
}

func (g *gate) count(machine string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[machine]
}

// series is the series of metric name for subject and outcome in the
// default registry (nil: none yet).
func series(t *testing.T, name, subject, outcome string) *dto.Metric {
	t.Helper()
	return eventstest.Metric(t, name, map[string]string{"subject": subject, "outcome": outcome})
}

// handledTotal is anvil_commands_handled_total for subject and outcome.
func handledTotal(t *testing.T, subject, outcome string) float64 {
	t.Helper()
	return series(t, "anvil_commands_handled_total", subject, outcome).GetCounter().GetValue()
}

// A request whose caller gives up while it waits for a slot is dropped
// unhandled, and counted as expired.
func TestExpiredWhileQueuedIsDropped(t *testing.T) {
	const subject = "cmd.t.expired"
	g := startGate(t, subject)
	expired := handledTotal(t, subject, "expired")
	first := g.hold(t)

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := command.Call[assignReq, assignResp](short, g.env.Conn, subject, assignReq{Machine: "late"})
	cancel()
	if !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("a call whose deadline passed while its request waited: %v", err)
	}
	// The server drops it once its deadline passes, the slot still held.
	eventstest.Eventually(t, "expired outcome", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := handledTotal(t, subject, "expired") - expired
		return n == 1, fmt.Sprintf("%v expired, want 1", n)
	})
	g.free()
	if err := <-first; err != nil {
		t.Fatalf("the request that held the slot: %v", err)
	}
	// Requests are taken in order: once a later one is handled, the
	// dropped one had its turn.
	if _, err := command.Call[assignReq, assignResp](context.Background(), g.env.Conn, subject, assignReq{Machine: "after"}); err != nil {
		t.Fatalf("a request after the slot was freed: %v", err)
	}
	if n, m := g.count("late"), g.count("after"); n != 0 || m != 1 {
		t.Fatalf("handled the expired request %d times (want 0), the later one %d (want 1)", n, m)
	}
}

// A request without a deadline (an older caller's, or one whose timeout
// header is not a positive number of milliseconds) waits for a slot as
// long as it takes, and is handled.
func TestRequestsWithoutDeadlineWait(t *testing.T) {
	const subject = "cmd.t.nodeadline"
	g := startGate(t, subject)
	first := g.hold(t)

	inbox := nats.NewInbox()
	replies, err := g.env.Conn.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Unsubscribe()
	timeouts := []string{"", "soon", "0", "-5"}
	for i, timeout := range timeouts {
		m := &nats.Msg{Subject: subject, Reply: inbox, Data: fmt.Appendf(nil, `{"machine":"raw%d"}`, i)}
		if timeout != "" {
			m.Header = nats.Header{}
			m.Header.Set(command.HeaderTimeout, timeout)
		}
		if err := g.env.Conn.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// The requests have reached the server's subscription, behind the
	// held slot, before it is released.
	if err := g.env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	g.free()
	if err := <-first; err != nil {
		t.Fatalf("the request that held the slot: %v", err)
	}
	for range timeouts {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("a reply: %v", err)
		}
		var rep struct {
			Result json.RawMessage `json:"result"`
			Error  *errs.Error     `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error != nil || rep.Result == nil {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
	}
	for i, timeout := range timeouts {
		if n := g.count(fmt.Sprintf("raw%d", i)); n != 1 {
			t.Errorf("request with timeout %q handled %d times, want 1", timeout, n)
		}
	}
}

// A handler cut short by its caller's deadline (its ctx ends) is counted as
// expired, not as an internal error.
func TestHandlerCutShortByTheDeadlineIsExpired(t *testing.T) {
	const subject = "cmd.t.cutshort"
	g := startGate(t, subject)
	expired, internal := handledTotal(t, subject, "expired"), handledTotal(t, subject, string(errs.KindInternal))
	go func() { <-g.held }() // the handler runs; nothing releases it
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := command.Call[assignReq, assignResp](short, g.env.Conn, subject, assignReq{Machine: "hold"}); !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("a call whose handler outlived its deadline: %v", err)
	}
	eventstest.Eventually(t, "expired outcome", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := handledTotal(t, subject, "expired") - expired
		return n == 1, fmt.Sprintf("%v expired, want 1", n)
	})
	if n := handledTotal(t, subject, string(errs.KindInternal)) - internal; n != 0 {
		t.Fatalf("%v internal errors counted, want 0", n)
	}
}

// Past WaitingPerSlot requests waiting per slot, a request is answered
// "busy" (unavailable) at once instead of joining a queue that would
// outlast its caller; the waiting ones are still handled.
func TestBusyWhenTooManyWait(t *testing.T) {
	const subject = "cmd.t.busy"
	g := startGate(t, subject)
	busy := handledTotal(t, subject, "busy")
	first := g.hold(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waited := make(chan error, command.WaitingPerSlot)
	for i := range command.WaitingPerSlot {
		go func() {
			_, err := command.Call[assignReq, assignResp](ctx, g.env.Conn, subject, assignReq{Machine: fmt.Sprintf("w%d", i)})
			waited <- err
		}()
	}
	// The queue is full once every one of them waits at the server.
	eventstest.Eventually(t, "the queue full", 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := eventstest.Metric(t, "anvil_command_requests_waiting", map[string]string{"queue": "gate"}).GetGauge().GetValue()
		return n == command.WaitingPerSlot, fmt.Sprintf("%v waiting", n)
	})
	_, err := command.Call[assignReq, assignResp](ctx, g.env.Conn, subject, assignReq{Machine: "extra"})
	var e *errs.Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, "is busy") || e.RetryAfter < 1 {
		t.Fatalf("a request past the queue: %#v, want busy with a RetryAfter", err)
	}
	if !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("busy answer %v, want unavailable", err)
	}
	if n := handledTotal(t, subject, "busy") - busy; n < 1 {
		t.Fatalf("%v busy answers counted", n)
	}
	g.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range command.WaitingPerSlot {
		if err := <-waited; err != nil {
			t.Fatalf("a request that waited for the slot: %v", err)
		}
	}
	if n := g.count("extra"); n != 0 {
		t.Fatalf("the request refused as busy was handled %d times", n)
	}
}

type bulk struct {
	Rows []string `json:"rows"`
}

// A reply larger than NATS carries in one message (1 MiB here) reaches
// its caller gzipped, whole; one too large even so is answered with an
// error that says why, not left for the caller to time out on.
func TestLargeReplies(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "large", 4, nil)
	t.Cleanup(srv.Close)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	err := command.Handle(srv, "cmd.t.large", func(_ context.Context, req struct{ Rows, Random int }) (bulk, error) {
		out := bulk{Rows: make([]string, req.Rows)}
		for i := range out.Rows {
			if req.Random > 0 {
				b := make([]byte, req.Random)
				for j := range b {
					b[j] = byte(rng.IntN(256))
				}
				out.Rows[i] = base64.StdEncoding.EncodeToString(b)
			} else {
				out.Rows[i] = fmt.Sprintf("machine bd772e58-0000-4000-8000-%012x phase done outcome succeeded", i)
			}
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// About 4 MiB of JSON, like a rollout of 10,000 machines.
	got, err := command.Call[struct{ Rows, Random int }, bulk](ctx, env.Conn, "cmd.t.large", struct{ Rows, Random int }{Rows: 50000})
	if err != nil || len(got.Rows) != 50000 || got.Rows[49999] != fmt.Sprintf("machine bd772e58-0000-4000-8000-%012x phase done outcome succeeded", 49999) {
		t.Fatalf("large reply: %d rows, %v", len(got.Rows), err)
	}
	raw, err := command.CallJSON(ctx, env.Conn, "cmd.t.large", struct{ Rows, Random int }{Rows: 50000})
	if err != nil || len(raw) < 3<<20 {
		t.Fatalf("large reply as JSON: %d bytes, %v", len(raw), err)
	}
	// 2 MiB of random bytes does not compress below 1 MiB.
	_, err = command.Call[struct{ Rows, Random int }, bulk](ctx, env.Conn, "cmd.t.large", struct{ Rows, Random int }{Rows: 2, Random: 1 << 20})
	if !errs.Is(err, errs.KindInternal) || !strings.Contains(err.Error(), "more than NATS carries") {
		t.Fatalf("a reply too large even gzipped: %v", err)
	}
}
