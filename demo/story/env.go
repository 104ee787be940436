// Package story is anvil's seed story, told against the real control plane:
// a Kubernetes control plane from libs/kubeharness, the dev stack (an
// embedded JetStream and the five services), a simulated fleet running the
// real agent, and every operator step through the gateway's HTTP API.
// `make demo` (demo/cmd/anvil-demo) tells it with live progress; the e2e
// suite (e2e/) tells it again and asserts each step.
package story

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
)

// KubernetesVersions is the stack's catalog: two versions whose skew with
// the harness's v1.37.1 API server is allowed, so that a pool moves from
// the first to the second.
const KubernetesVersions = "1.36.4,1.37.1"

// EnvOptions configure the control plane and the stack.
type EnvOptions struct {
	// Dir holds everything: the event log (Dir/data), the Kubernetes
	// control plane (Dir/kube). Required.
	Dir string
	// GatewayAddr and BootAddr: empty picks free loopback ports.
	GatewayAddr, BootAddr string
	// NATSAddr also exposes the embedded NATS server (empty: in-process).
	NATSAddr string
	// AdminToken is the bootstrap admin token; empty generates one.
	AdminToken string
	// Logger receives the services' logs (nil: discarded).
	Logger *slog.Logger
	// KubeLogger receives the harness's own progress lines (nil: discarded).
	KubeLogger *slog.Logger
	// RegistryOfflineAfter etc. tune the services (zero: the stack's tuning
	// for demos, below).
	RegistryOfflineAfter time.Duration
	// SkipKube starts no Kubernetes control plane (Kube stays nil).
	SkipKube bool
}

// Env is a running control plane and dev stack.
type Env struct {
	Kube       *kubeharness.ControlPlane
	Stack      *devstack.Stack
	Config     devstack.Config
	GatewayURL string
	BootURL    string
	AdminToken string
	opts       EnvOptions
}

// FreeAddr returns a free loopback address.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartEnv starts the Kubernetes control plane, then the dev stack, and
// waits until the gateway answers and every service has caught up.
func StartEnv(ctx context.Context, o EnvOptions) (_ *Env, err error) {
	if o.Dir == "" {
		return nil, errors.New("story: EnvOptions.Dir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.KubeLogger == nil {
		o.KubeLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, a := range []*string{&o.GatewayAddr, &o.BootAddr} {
		if *a == "" {
			if *a, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
	}
	if o.AdminToken == "" {
		o.AdminToken = "anvil_admin_demo_" + fmt.Sprint(time.Now().UnixNano())
	}
	if o.RegistryOfflineAfter == 0 {
		o.RegistryOfflineAfter = 10 * time.Minute // machines stay online across a whole-stack restart
	}
	e := &Env{opts: o, GatewayURL: "http://" + o.GatewayAddr, BootURL: "http://" + o.BootAddr, AdminToken: o.AdminToken}
	if !o.SkipKube {
		kdir := filepath.Join(o.Dir, "kube")
		if err := os.MkdirAll(kdir, 0o750); err != nil {
			return nil, err
		}
		if e.Kube, err = kubeharness.StartProcess(ctx, kdir, kubeharness.WithLogger(o.KubeLogger)); err != nil {
			return nil, fmt.Errorf("starting the Kubernetes control plane: %w", err)
		}
		defer func() {
			if err != nil {
				e.Kube.Stop()
			}
		}()
	}
	// The story's machines are simulated: they run the agent in-process and
	// have no kubelet, so the boot service serves the simulator's stand-in
	// agent and sysexts (hashed like real ones, never executed).
	assets := filepath.Join(o.Dir, "assets")
	if err := simassets.Write(assets, KubernetesVersions); err != nil {
		return nil, fmt.Errorf("writing the simulator's assets: %w", err)
	}
	e.Config = devstack.Config{
		DataDir: filepath.Join(o.Dir, "data"), GatewayAddr: o.GatewayAddr, BootAddr: o.BootAddr, NATSAddr: o.NATSAddr,
		AdminToken: o.AdminToken, Logger: o.Logger, AssetsDir: assets,
		KubernetesVersions:   KubernetesVersions,
		RegistryOfflineAfter: o.RegistryOfflineAfter,
		BootRetryInitial:     200 * time.Millisecond, BootRetryMax: 2 * time.Second,
		RolloutLeaseTTL: 5 * time.Second, RolloutPoll: 500 * time.Millisecond, RolloutReplan: 5 * time.Second,
	}
	if err := e.startStack(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Env) startStack(ctx context.Context) error {
	st, err := devstack.Start(context.WithoutCancel(ctx), e.Config)
	if err != nil {
		return fmt.Errorf("starting the dev stack: %w", err)
	}
	e.Stack = st
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := st.Ready(wctx); err != nil {
		_ = st.Stop()
		return fmt.Errorf("the dev stack did not become ready: %w", err)
	}
	for {
		res, err := http.Get(e.GatewayURL + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			_ = st.Stop()
			return fmt.Errorf("the gateway is not ready: %w", wctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RestartStack stops every service and the embedded server, then starts
// them again on the same data directory: every in-memory projection is
// rebuilt from the log.
func (e *Env) RestartStack(ctx context.Context) error {
	if err := e.Stack.Stop(); err != nil {
		return fmt.Errorf("stopping the dev stack: %w", err)
	}
	return e.startStack(ctx)
}

// Stop stops the stack and the control plane.
func (e *Env) Stop() error {
	var errs []error
	if e.Stack != nil {
		errs = append(errs, e.Stack.Stop())
	}
	if e.Kube != nil {
		errs = append(errs, e.Kube.Stop())
	}
	return errors.Join(errs...)
}
