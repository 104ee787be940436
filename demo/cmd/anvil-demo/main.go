// Command anvil-demo tells anvil's seed story against the real control
// plane, with live progress in the terminal: what `make demo` runs. See
// docs/e2e.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/demo/story"
)

func main() {
	var (
		dir, gatewayAddr, bootAddr, logFile string
		pre, booted, remediation            int
		maxUnavailable                      string
		keep, noWait                        bool
	)
	flag.StringVar(&dir, "dir", "", "working directory for the event log, the Kubernetes control plane and the machines (default: a new temporary directory, removed at exit)")
	flag.StringVar(&gatewayAddr, "gateway-addr", "127.0.0.1:8080", "gateway listen address (empty: a free port)")
	flag.StringVar(&bootAddr, "boot-addr", "127.0.0.1:8081", "boot service listen address (empty: a free port)")
	flag.IntVar(&pre, "preregistered", 5, "machines pre-registered before they boot")
	flag.IntVar(&booted, "booted", 20, "machines that boot and register themselves")
	flag.StringVar(&maxUnavailable, "max-unavailable", "3", "the pool's maxUnavailable")
	flag.IntVar(&remediation, "remediation-max-in-flight", -1,
		"the pool's remediation: give a machine that booted but never came back one more reboot, at most this many at a time; 0: off; -1: the rollout service's default (off)")
	flag.StringVar(&logFile, "log-file", "", "services' logs (default: <dir>/services.log)")
	flag.BoolVar(&keep, "keep", false, "keep the working directory at exit")
	flag.BoolVar(&noWait, "exit", false, "stop after the story instead of waiting for Ctrl-C")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, runOpts{dir, gatewayAddr, bootAddr, logFile, pre, booted, remediation, maxUnavailable, keep, noWait}); err != nil {
		fmt.Fprintln(os.Stderr, "\nanvil-demo:", err)
		os.Exit(1)
	}
}

type runOpts struct {
	dir, gatewayAddr, bootAddr, logFile string
	pre, booted, remediation            int
	maxUnavailable                      string
	keep, noWait                        bool
}

// ui prints the story: step headers, lines, and one progress line that is
// redrawn in place on a terminal.
type ui struct {
	mu     sync.Mutex
	out    io.Writer
	tty    bool
	line   string // the progress line now shown
	key    string // without a terminal, a progress line is printed only when its key changes
	start  time.Time
	step   int
	steps  int
	timing []string
}

func (u *ui) header(title string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.clearLocked()
	u.step++
	fmt.Fprintf(u.out, "\n%s\n", u.bold(fmt.Sprintf("[%d/%d] %s", u.step, u.steps, title)))
}

func (u *ui) printf(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.clearLocked()
	fmt.Fprintf(u.out, "  "+format+"\n", args...)
	u.redrawLocked()
}

func (u *ui) progress(format string, args ...any) {
	u.progressKey(fmt.Sprintf(format, args...), format, args...)
}

// progressKey redraws the progress line; without a terminal it prints it
// only when key changed.
func (u *ui) progressKey(key, format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := fmt.Sprintf(format, args...)
	if l == u.line {
		return
	}
	if !u.tty {
		if key != u.key {
			u.key = key
			fmt.Fprintln(u.out, "  "+l)
		}
		return
	}
	u.clearLocked()
	u.line = l
	u.redrawLocked()
}

func (u *ui) done() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tty && u.line != "" {
		fmt.Fprintln(u.out)
	}
	u.line = ""
}

func (u *ui) clearLocked() {
	if u.tty && u.line != "" {
		fmt.Fprint(u.out, "\r\033[K")
	}
}

func (u *ui) redrawLocked() {
	if u.tty && u.line != "" {
		fmt.Fprint(u.out, "  "+u.line)
	}
}

func (u *ui) lap(what string, since time.Time) {
	u.timing = append(u.timing, fmt.Sprintf("%-44s %6.1fs", what, time.Since(since).Seconds()))
}

// newUI prints to out. Only on a terminal is the progress line redrawn in
// place and are titles bold: piped or redirected (a CI log, a file), the
// output is plain lines without escape codes.
func newUI(out io.Writer, steps int) *ui {
	return &ui{out: out, tty: isTerminal(out), start: time.Now(), steps: steps}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb"
}

// bold is s in bold on a terminal, s elsewhere.
func (u *ui) bold(s string) string {
	if !u.tty {
		return s
	}
	return "\033[1m" + s + "\033[0m"
}

func run(ctx context.Context, o runOpts) (err error) {
	u := newUI(os.Stdout, 8)
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "anvil-demo-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(o.dir)
		}
	} else if err := os.MkdirAll(o.dir, 0o750); err != nil {
		return err
	}
	if o.logFile == "" {
		o.logFile = filepath.Join(o.dir, "services.log")
	}
	lf, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	logger := slog.New(slog.NewJSONHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo}))

	fmt.Fprintf(u.out, u.bold("anvil demo")+": the seed story on a real control plane (work dir %s, services' logs in %s)\n", o.dir, o.logFile)

	// 1. The control plane and the dev stack.
	u.header("Start a Kubernetes control plane (etcd, kube-apiserver v1.37.1, controller-manager, scheduler, kwok) and the dev stack")
	t0 := time.Now()
	u.progress("starting… (the first start after `make kube-bins` takes a few seconds)")
	env, err := story.StartEnv(ctx, story.EnvOptions{Dir: o.dir, GatewayAddr: o.gatewayAddr, BootAddr: o.bootAddr, Logger: logger,
		KubeLogger: logger.With("component", "kubeharness")})
	if err != nil {
		return err
	}
	defer func() {
		u.done()
		fmt.Fprintln(u.out, "\nstopping the stack and the control plane…")
		if serr := env.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	u.done()
	u.printf("kube-apiserver %s (kubeconfig %s)", env.Kube.RESTConfig().Host, env.Kube.KubeconfigPath)
	u.printf("dev stack: gateway %s, boot %s, embedded JetStream in %s; Kubernetes catalog %s", env.GatewayURL, env.BootURL, env.Config.DataDir, story.KubernetesVersions)
	u.lap("control plane and dev stack up", t0)

	sopts := story.Options{Preregistered: o.pre, Booted: o.booted, MaxUnavailable: o.maxUnavailable,
		StateDir: filepath.Join(o.dir, "machines"), SimLogger: logger.With("component", "sim")}
	if o.remediation >= 0 {
		sopts.Remediation = &o.remediation
	}
	s := story.New(env, sopts)

	// 2. Organization, cluster, pool.
	u.header("Create an organization, a cluster and a pool (over the gateway's HTTP API)")
	t0 = time.Now()
	if err := s.CreateOrg(ctx); err != nil {
		return err
	}
	u.printf("POST /api/v1/orgs → organization %q; an admin and a viewer API token, an enrollment token for the rack", s.Opts.Org)
	if err := s.CreateCluster(ctx); err != nil {
		return err
	}
	u.printf("POST …/clusters → cluster %q at %s (its kubeconfig sealed at rest)", s.Opts.Cluster, env.Kube.RESTConfig().Host)
	pc, err := s.CreatePool(ctx)
	if err != nil {
		return err
	}
	u.printf("POST …/pools → pool %q, revision %d: Kubernetes %s, Flatcar stable 4230.2.3, maxUnavailable %s (saved, not applied)",
		s.Opts.Pool, pc.RevisionCreated, pc.Pool.KubernetesVersion, s.Opts.MaxUnavailable)
	u.lap("organization, cluster, pool", t0)

	// 3. Machines.
	u.header(fmt.Sprintf("Pre-register %d machines, then power on %d more that nobody registered", s.Opts.Preregistered, s.Opts.Booted))
	t0 = time.Now()
	if err := s.StartFleet(ctx); err != nil {
		return err
	}
	if err := s.PreRegister(ctx); err != nil {
		return err
	}
	u.printf("POST …/machines × %d: %s-01 … %s-%02d pre-registered into pool %s", s.Opts.Preregistered, s.Opts.Pool, s.Opts.Pool, s.Opts.Preregistered, s.Opts.Pool)
	s.Boot(ctx)
	u.printf("%d simulated machines chain-load %s/boot.ipxe?token=<enrollment token> (the real agent runs on each)", s.Opts.Preregistered+s.Opts.Booted, env.BootURL)
	if err := s.WaitRegistered(ctx, func(c map[string]int) { u.progress("registry: %s", story.FormatCounts(c)) }); err != nil {
		return err
	}
	u.done()
	u.lap("machines registered", t0)

	// 4. Assign, provision, workloads.
	u.header("Assign the new machines to the pool, provision all of them (apply revision 1), put workloads with PDBs on them")
	t0 = time.Now()
	if err := s.Assign(ctx); err != nil {
		return err
	}
	u.printf("PATCH …/machines/{uuid} (hostname) and POST …/assign × %d: every machine is pending in %s", s.Opts.Booted, s.Opts.Pool)
	ro, err := s.ApplyRevision(ctx, 1)
	if err != nil {
		return err
	}
	u.printf("POST …/pools/%s/revisions/1/apply → rollout %s provisions %d machines (iPXE, Ignition, join)", s.Opts.Pool, ro.ID, ro.Progress.Total)
	if _, err := watch(ctx, u, s, ro.ID, false); err != nil {
		return err
	}
	u.lap("provisioned (first rollout)", t0)
	t0 = time.Now()
	u.printf("workloads: Deployment shop/web (6 replicas, PDB minAvailable 4) and shop/cart (3 replicas, PDB minAvailable 2)…")
	if err := s.Workloads(ctx); err != nil {
		return err
	}
	ready, _, total, _ := s.NodesReady(ctx)
	u.printf("%d of %d nodes Ready; every pod running", ready, total)
	u.lap("workloads", t0)

	// 5–6. Change the Kubernetes version, Save & Apply, watch.
	u.header(fmt.Sprintf("Change the pool's Kubernetes %s → %s with Save & Apply, and watch the rollout machine by machine", s.Opts.FromMinor, s.Opts.ToMinor))
	t0 = time.Now()
	rev, ro, err := s.ChangeVersion(ctx, s.Opts.ToMinor)
	if err != nil {
		return err
	}
	u.printf("PUT …/pools/%s {\"kubernetes\":{\"minor\":%q},\"apply\":true} → revision %d, rollout %s", s.Opts.Pool, s.Opts.ToMinor, rev, ro.ID)
	u.printf("following GET …/operations/%s/log (Server-Sent Events): cordon, drain (PDBs hold), reboot, wait for boot, Ready, uncordon", ro.ID)
	final, err := watch(ctx, u, s, ro.ID, true)
	if err != nil {
		return err
	}
	u.lap(fmt.Sprintf("rollout to revision %d (%s)", rev, final.Status), t0)
	upgrade := final

	// 7. The operation log.
	u.header("The operation log")
	entries, err := s.Log(ctx, ro.ID)
	if err != nil {
		return err
	}
	showLog(u, entries)

	// 8. Roll back.
	u.header("Roll back to revision 1")
	t0 = time.Now()
	rb, err := s.ApplyRevision(ctx, 1)
	if err != nil {
		return err
	}
	u.printf("POST …/pools/%s/revisions/1/apply → rollout %s (rollback: %t)", s.Opts.Pool, rb.ID, rb.Rollback)
	rbFinal, err := watch(ctx, u, s, rb.ID, false)
	if err != nil {
		return err
	}
	u.lap(fmt.Sprintf("rollback to revision 1 (%s)", rbFinal.Status), t0)

	// 9. Audit.
	u.header("The audit log: every change is an event")
	evs, err := s.Events(ctx, client.EventFilter{})
	if err != nil {
		return err
	}
	showEvents(u, evs)

	// Summary.
	ms, _ := s.Machines(ctx, s.Opts.Pool)
	ready, cordoned, total, _ := s.NodesReady(ctx)
	fmt.Fprintf(u.out, "\n%s (%.0fs in all)\n", u.bold("Summary"), time.Since(u.start).Seconds())
	for _, l := range u.timing {
		fmt.Fprintln(u.out, "  "+l)
	}
	fmt.Fprintf(u.out, "  machines: %s; nodes: %d of %d Ready, %d cordoned; reboots: %d\n", story.FormatCounts(story.Counts(ms)), ready, total, cordoned, s.Fleet.TotalReboots())
	fmt.Fprintf(u.out, "  upgrade %s: %s, %d/%d done; rollback %s: %s, %d/%d done; %d audit events\n",
		upgrade.ID, upgrade.Status, upgrade.Progress.Done, upgrade.Progress.Total, rbFinal.ID, rbFinal.Status, rbFinal.Progress.Done, rbFinal.Progress.Total, len(evs))

	fmt.Fprintf(u.out, "\n%s\n", u.bold("Explore"))
	fmt.Fprintf(u.out, "  gateway (HTTP API):   %s/api/v1/orgs/%s/machines   (OpenAPI: %s/openapi.json)\n", env.GatewayURL, s.Opts.Org, env.GatewayURL)
	fmt.Fprintf(u.out, "  boot (iPXE chain):    %s/boot.ipxe?token=%s\n", env.BootURL, s.Tokens["enrollment"])
	fmt.Fprintf(u.out, "  kubeconfig:           %s\n", env.Kube.KubeconfigPath)
	fmt.Fprintf(u.out, "  admin token (%s):   %s\n", s.Opts.Org, s.Tokens["admin"])
	fmt.Fprintf(u.out, "  bootstrap admin:      %s\n", env.AdminToken)
	fmt.Fprintf(u.out, "\n  export ANVIL_URL=%s ANVIL_ORG=%s ANVIL_TOKEN=%s\n", env.GatewayURL, s.Opts.Org, s.Tokens["admin"])
	fmt.Fprintf(u.out, "  go run ./cli/cmd/anvilctl get machines; go run ./cli/cmd/anvilctl rollout status %s\n", ro.ID)
	fmt.Fprintf(u.out, "  curl -H \"Authorization: Bearer $ANVIL_TOKEN\" %s/api/v1/orgs/%s/rollouts\n", env.GatewayURL, s.Opts.Org)
	fmt.Fprintf(u.out, "  KUBECONFIG=%s kubectl get nodes   (if you have kubectl)\n", env.Kube.KubeconfigPath)
	if o.noWait {
		s.Fleet.Stop()
		return nil
	}
	fmt.Fprintf(u.out, "\nThe stack and the %d machines keep running. Ctrl-C stops everything.\n", len(s.Fleet.Machines()))
	<-ctx.Done()
	s.Fleet.Stop()
	return nil
}

// watch follows a rollout over SSE with a progress line, prints each
// machine as it finishes, and returns the rollout once it ended.
func watch(ctx context.Context, u *ui, s *story.Story, id string, perMachine bool) (client.Rollout, error) {
	r, err := s.Rollout(ctx, id)
	if err != nil {
		return r, err
	}
	total := r.Progress.Total
	steps := map[string]string{} // node → current step
	done, failed := 0, 0
	var order []string
	start := time.Now()
	draw := func(status string) {
		n := 30
		filled := 0
		if total > 0 {
			filled = done * n / total
		}
		var inflight []string
		for _, node := range order {
			if st := steps[node]; st != "" && st != "done" && st != "failed" {
				inflight = append(inflight, node+" "+st)
			}
		}
		u.progressKey(fmt.Sprint(id, done, failed, status), "[%s%s] %d/%d done, %d failed  %-9s %4.0fs  %s", strings.Repeat("#", filled), strings.Repeat("-", n-filled), done, total, failed,
			status, time.Since(start).Seconds(), strings.Join(inflight, ", "))
	}
	status := string(r.Status)
	draw(status)
	_, err = s.Watch(ctx, id, func(e client.LogEntry) {
		if e.Node == "" {
			return
		}
		if !slices.Contains(order, e.Node) {
			order = append(order, e.Node)
		}
		switch {
		case e.Outcome == "done":
			steps[e.Node] = "done"
			done++
			if perMachine {
				u.printf("✓ %-12s done at %s (%d/%d)", e.Node, e.At.Local().Format("15:04:05"), done, total)
			}
		case e.Outcome == "failed" && e.Step != "":
			steps[e.Node] = "failed"
			failed++
			u.printf("✗ %-12s %s failed: %s", e.Node, e.Step, e.Message)
		case e.Step != "":
			steps[e.Node] = e.Step
			if e.Outcome == "blocked" && perMachine {
				u.printf("  %-12s drain held by a PodDisruptionBudget: %s", e.Node, e.Message)
			}
		}
		draw(status)
	}, func(st string) bool {
		status = st
		draw(status)
		return st == "failed"
	})
	if err != nil {
		return r, err
	}
	r, err = s.WaitRolloutStatus(ctx, id, client.RolloutSucceeded, client.RolloutFailed, client.RolloutAborted)
	if err != nil {
		return r, err
	}
	done, total = r.Progress.Done, r.Progress.Total
	draw(string(r.Status))
	u.done()
	if r.Status != client.RolloutSucceeded {
		return r, fmt.Errorf("rollout %s %s: %s", id, r.Status, r.Reason)
	}
	return r, nil
}

func showLog(u *ui, entries []client.LogEntry) {
	u.printf("GET …/operations/{id}/log: %d entries; the first machine's steps and the last lines:", len(entries))
	first := ""
	shown := 0
	for _, e := range entries {
		if e.Node == "" {
			u.printf("  %s", e.String())
			shown++
			continue
		}
		if first == "" {
			first = e.Node
		}
		if e.Node == first {
			u.printf("  %s", e.String())
			shown++
		}
	}
	if len(entries) > shown+5 {
		u.printf("  … %d more …", len(entries)-shown-5)
		for _, e := range entries[len(entries)-5:] {
			if e.Node != "" && e.Node != first {
				u.printf("  %s", e.String())
			}
		}
	}
}

func showEvents(u *ui, evs []client.Event) {
	byType := map[string]int{}
	actors := map[string]int{}
	for _, e := range evs {
		byType[e.Type]++
		if e.Actor != "" {
			actors[e.Actor]++
		}
	}
	var types []string
	for t := range byType {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		return byType[types[i]] > byType[types[j]] || byType[types[i]] == byType[types[j]] && types[i] < types[j]
	})
	u.printf("GET …/events: %d events of %d types by %d actors; the most frequent:", len(evs), len(types), len(actors))
	for i, t := range types {
		if i == 12 {
			u.printf("  … %d more types", len(types)-i)
			break
		}
		u.printf("  %5d  %s", byType[t], t)
	}
	u.printf("who did what (operators' writes):")
	for _, e := range evs {
		if strings.HasPrefix(e.Actor, "token:") && (strings.HasPrefix(e.Type, "pool.") || strings.HasPrefix(e.Type, "cluster.") || strings.HasPrefix(e.Type, "org.")) {
			u.printf("  #%-6d %s  %-28s %-22s %s", e.Sequence, e.Time.Local().Format("15:04:05"), e.Type, e.Aggregate, e.Actor)
		}
	}
}
