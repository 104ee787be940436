package service_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

// TestReplicaStartsFromTheSnapshot: a registry that starts after another
// wrote a snapshot of its machines restores it, catches up with the
// machines registered since, and holds what the writer holds.
func TestReplicaStartsFromTheSnapshot(t *testing.T) {
	f := start(t, service.Config{EnrollmentRate: -1})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	var last uint64
	register := func(from, to int) {
		for i := from; i < to; i++ {
			r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuidN(i), MAC: fmt.Sprintf("aa:bb:cc:dd:%02x:%02x", i>>8, i&0xff)})
			if err != nil {
				t.Fatal(err)
			}
			last = r.Version
		}
		f.waitMachine(t, last)
	}
	register(0, 20)
	if err := f.svc.Machines.WriteSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	register(20, 25)

	// A replica of its own, to read its log.
	var logs eventstest.SyncBuffer
	cfg := service.Config{EnrollmentRate: -1}
	cfg.Config = svc.Config{Service: "registry", StreamReplicas: 1}
	rctx, stop := context.WithCancel(ctx)
	ready, done := make(chan *service.Service, 1), make(chan error, 1)
	go func() {
		done <- service.Start(rctx, cfg, svc.Options{Conn: f.env.Conn, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, service.Hooks{Ready: ready})
	}()
	t.Cleanup(func() { stop(); <-done })
	var replica *service.Service
	select {
	case replica = <-ready:
	case err := <-done:
		t.Fatalf("replica did not start: %v", err)
	}
	if !strings.Contains(logs.String(), `msg="restored from snapshot" projection=registry-machines`) {
		t.Fatalf("the replica did not restore the snapshot:\n%s", logs.Tail(20))
	}
	if err := replica.Machines.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.App.Machines.Model().Get("acme", uuidN(24)); err != nil {
		t.Fatalf("a machine registered after the snapshot: %v", err)
	}
	if replica.App.Machines.Model().Hash() != f.svc.App.Machines.Model().Hash() {
		t.Fatal("the replica's machines differ from the writer's")
	}
}

// TestSnapshotEveryFlag: 0 is refused (it could mean "off" or "the
// default"); the default and a negative value are not.
func TestSnapshotEveryFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		refused bool
	}{{nil, false}, {[]string{"--snapshot-every=-1"}, false}, {[]string{"--snapshot-every=5000"}, false}, {[]string{"--snapshot-every=0"}, true}} {
		var cfg service.Config
		fs := flag.NewFlagSet("registry", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := cfg.Validate()
		if refused := err != nil && strings.Contains(err.Error(), "--snapshot-every (env ANVIL_REGISTRY_SNAPSHOT_EVERY) = 0"); refused != c.refused {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}
