// Command anvil-sim runs a fleet of simulated machines against a running
// anvil boot service: each one iPXE-boots over the real endpoints, applies
// its Ignition config, runs the real agent and reboots when told to. With a
// kubeconfig, each machine also registers its Node (kwok keeps it Ready).
// See docs/simulator.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/sim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "anvil-sim:", err)
		os.Exit(1)
	}
}

// options are the command line; every flag also reads ANVIL_SIM_<NAME>.
type options struct {
	n               int
	prefix          string
	bootURL         string
	token           string
	kubeconfig      string
	rebootTime      time.Duration
	rebootJitter    time.Duration
	failRate        float64
	rebootErrorRate float64
	maxWait         time.Duration
	heartbeat       time.Duration
	pollWait        time.Duration
	seed            int64
	progress        time.Duration
	logLevel        string
	agentLogLevel   string
	stateDir        string
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("anvil-sim", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 10, "number of machines (env ANVIL_SIM_N)")
	fs.StringVar(&o.prefix, "uuid-prefix", "5a5a", "UUID prefix: up to 20 hex digits start every UUID, anything else is hashed (env ANVIL_SIM_UUID_PREFIX)")
	fs.StringVar(&o.bootURL, "boot-url", "http://127.0.0.1:8081", "the boot service's base URL (env ANVIL_SIM_BOOT_URL)")
	fs.StringVar(&o.token, "token", "", "enrollment token, required (env ANVIL_SIM_TOKEN)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster the nodes join; empty: no nodes (env ANVIL_SIM_KUBECONFIG)")
	fs.DurationVar(&o.rebootTime, "reboot-time", 5*time.Second, "how long a reboot keeps a machine down (env ANVIL_SIM_REBOOT_TIME)")
	fs.DurationVar(&o.rebootJitter, "reboot-jitter", 2*time.Second, "reboot time spread, ± (env ANVIL_SIM_REBOOT_JITTER)")
	fs.Float64Var(&o.failRate, "fail-rate", 0, "probability that a reboot never comes back, 0-1 (env ANVIL_SIM_FAIL_RATE)")
	fs.Float64Var(&o.rebootErrorRate, "reboot-error-rate", 0, "probability that the reboot command fails, 0-1 (env ANVIL_SIM_REBOOT_ERROR_RATE)")
	fs.DurationVar(&o.maxWait, "max-wait", 2*time.Second, "cap on the waits iPXE scripts ask for; 0 honours them (env ANVIL_SIM_MAX_WAIT)")
	fs.DurationVar(&o.heartbeat, "heartbeat", 0, "agent heartbeat interval; 0: the agent's default, 30s (env ANVIL_SIM_HEARTBEAT)")
	fs.DurationVar(&o.pollWait, "poll-wait", 0, "agent long-poll wait; 0: the agent's default, 30s (env ANVIL_SIM_POLL_WAIT)")
	fs.Int64Var(&o.seed, "seed", 1, "random seed for reboot times and failures (env ANVIL_SIM_SEED)")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "how often progress is printed (env ANVIL_SIM_PROGRESS)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "simulator log level: debug, info, warn, error (env ANVIL_SIM_LOG_LEVEL)")
	fs.StringVar(&o.agentLogLevel, "agent-log-level", "off", "agents' log level: debug, info, warn, error, off (env ANVIL_SIM_AGENT_LOG_LEVEL)")
	fs.StringVar(&o.stateDir, "state-dir", "", "agent state files and fake /proc, /sys; empty: a temporary directory (env ANVIL_SIM_STATE_DIR)")

	// Environment first, so that flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "ANVIL_SIM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil {
				envErr = errors.Join(envErr, fmt.Errorf("%s=%q: %v", name, v, err))
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.n < 0 {
		return o, errors.New("-n must not be negative")
	}
	if o.token == "" {
		return o, errors.New("-token (ANVIL_SIM_TOKEN) is required: issue an enrollment token through the gateway")
	}
	return o, nil
}

func level(s string) (slog.Level, bool, error) {
	switch strings.ToLower(s) {
	case "off", "none":
		return 0, false, nil
	case "debug":
		return slog.LevelDebug, true, nil
	case "info":
		return slog.LevelInfo, true, nil
	case "warn", "warning":
		return slog.LevelWarn, true, nil
	case "error":
		return slog.LevelError, true, nil
	}
	return 0, false, fmt.Errorf("log level %q: want debug, info, warn, error or off", s)
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	lvl, on, err := level(o.logLevel)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if on {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	}
	alvl, aon, err := level(o.agentLogLevel)
	if err != nil {
		return err
	}
	agentLogger := slog.New(slog.DiscardHandler)
	if aon {
		agentLogger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: alvl}))
	}

	var kube kubernetes.Interface
	if o.kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		// A thousand machines booting at once each create a node; client-side
		// throttling at client-go's default 5 QPS would take minutes.
		if kube, err = sim.KubeletClient(rc, 200, 400); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
	}

	fleet, err := sim.New(sim.Config{
		BootURL: o.bootURL, EnrollmentToken: o.token, Kube: kube,
		RebootTime: o.rebootTime, RebootJitter: o.rebootJitter,
		FailRate: o.failRate, RebootErrorRate: o.rebootErrorRate, Seed: o.seed, MaxWait: o.maxWait,
		AgentIntervals: sim.AgentIntervals{Heartbeat: o.heartbeat, PollWait: o.pollWait},
		Logger:         logger, AgentLogger: agentLogger, StateDir: o.stateDir,
	})
	if err != nil {
		return err
	}
	fleet.AddN(o.n, o.prefix)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("anvil-sim: %d machines booting from %s (nodes: %s)\n", o.n, o.bootURL, orNone(o.kubeconfig))
	start := time.Now()
	if err := fleet.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(max(o.progress, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("anvil-sim: stopping")
			fleet.Stop()
			fmt.Println(progress(fleet, start))
			return nil
		case <-tick.C:
			fmt.Println(progress(fleet, start))
		}
	}
}

// progress is one line: how many machines are in each phase, how many
// booted at least once, and how many reboots the fleet carried out.
func progress(f *sim.Fleet, start time.Time) string {
	c := f.Counts()
	booted := 0
	for _, m := range f.Machines() {
		if m.Boots() > 0 {
			booted++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%7s  booted %d/%d", time.Since(start).Round(time.Second), booted, len(f.Machines()))
	for _, p := range sim.Phases {
		if c[p] > 0 {
			b.WriteString("  " + string(p) + " " + strconv.Itoa(c[p]))
		}
	}
	fmt.Fprintf(&b, "  reboots %d", f.TotalReboots())
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
