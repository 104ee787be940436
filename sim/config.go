package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DefaultKwokLabel is the label that makes kwok play a node's kubelet in the
// test control plane (libs/kubeharness runs kwok with
// --manage-nodes-with-label-selector=anvil.test/kwok-managed=true).
const DefaultKwokLabel = "anvil.test/kwok-managed"

// DefaultUnreachableWait is how long the firmware waits when the boot
// service does not answer at all and no script says otherwise (before
// MaxWait caps it).
const DefaultUnreachableWait = 30 * time.Second

// Config configures a Fleet. Only BootURL and EnrollmentToken are required.
type Config struct {
	// BootURL is the boot service's base URL as the firmware reaches it,
	// e.g. http://127.0.0.1:8081. The chain URL is
	// <BootURL>/boot.ipxe?token=<EnrollmentToken>; everything after that
	// comes from the scripts and the Ignition config, as on a real machine.
	BootURL         string
	EnrollmentToken string

	// Kube is the workload cluster the machines join. Nil: no nodes. Each
	// machine creates or updates its Node after booting and keeps it Ready
	// (through kwok, see KwokLabel); the Node goes NotReady during a
	// reboot. Give it a generous client-side rate limit (QPS) for large
	// fleets.
	Kube kubernetes.Interface
	// KwokLabel is the node label kwok manages nodes by (value "true").
	// Default DefaultKwokLabel.
	KwokLabel string

	// RebootTime is how long a machine stays down during a reboot, spread
	// uniformly by ±RebootJitter. Both may be 0.
	RebootTime, RebootJitter time.Duration
	// FailRate is the probability that a reboot never comes back: the
	// machine hangs (PhaseHung) until Machine.Hang(false).
	FailRate float64
	// RebootErrorRate is the probability that the reboot command itself
	// fails: the agent acknowledges the instruction "failed" and the
	// machine keeps running its current revision.
	RebootErrorRate float64
	// Seed makes reboot times and failures reproducible (each
	// machine draws from its own generator seeded with Seed and its UUID).
	Seed int64

	// MaxWait caps every wait a script asks for ("sleep N") and the
	// firmware's and Ignition's own retry waits; 0 honours them as they
	// are. Tests set it to a fraction of a second.
	MaxWait time.Duration

	// AgentIntervals are the agent's intervals; zero fields keep the
	// agent's defaults (heartbeat 30s, long poll 30s, …). See TestIntervals.
	AgentIntervals AgentIntervals

	// HTTPClient is shared by every machine's firmware, Ignition and agent.
	// Nil: a client with one transport sized for thousands of machines.
	// Its Timeout must be zero (the agent long-polls).
	HTTPClient *http.Client
	// Logger receives the simulator's logs; the agents log to
	// AgentLogger (each line with sim_machine=<uuid>). Nil: slog.Default(),
	// and no agent logs at all.
	Logger, AgentLogger *slog.Logger
	// StateDir holds each machine's agent state file and fake /proc and
	// /sys. Empty: a temporary directory removed by Stop.
	StateDir string
	// OnEvent, if set, is called for every Event, synchronously from the
	// machine's goroutine: keep it short and safe for concurrent use.
	OnEvent func(Event)
}

// AgentIntervals are the agent.Config intervals a simulated machine runs its
// agent with. Zero means the agent's default.
type AgentIntervals struct {
	Heartbeat       time.Duration // agent.Config.HeartbeatInterval
	Report          time.Duration // agent.Config.ReportInterval
	PollWait        time.Duration // agent.Config.PollWait (long poll)
	MinPollInterval time.Duration // agent.Config.MinPollInterval
	RetryInitial    time.Duration // agent.Config.RetryInitial
	RetryMax        time.Duration // agent.Config.RetryMax
	RequestTimeout  time.Duration // agent.Config.RequestTimeout
}

// TestIntervals are agent intervals for tests: fast heartbeats and retries,
// short long polls.
func TestIntervals() AgentIntervals {
	return AgentIntervals{
		Heartbeat:       500 * time.Millisecond,
		Report:          2 * time.Second,
		PollWait:        5 * time.Second,
		MinPollInterval: 100 * time.Millisecond,
		RetryInitial:    100 * time.Millisecond,
		RetryMax:        time.Second,
		RequestTimeout:  10 * time.Second,
	}
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	u, err := url.Parse(c.BootURL)
	if c.BootURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("boot URL %q: want an absolute http(s) URL", c.BootURL))
	}
	if c.EnrollmentToken == "" {
		errs = append(errs, errors.New("enrollment token is empty"))
	}
	if c.FailRate < 0 || c.FailRate > 1 || c.RebootErrorRate < 0 || c.RebootErrorRate > 1 {
		errs = append(errs, errors.New("failure rates must be between 0 and 1"))
	}
	if c.RebootTime < 0 || c.RebootJitter < 0 || c.MaxWait < 0 {
		errs = append(errs, errors.New("reboot time, jitter and max wait must not be negative"))
	}
	if c.HTTPClient != nil && c.HTTPClient.Timeout != 0 {
		errs = append(errs, errors.New("the HTTP client's Timeout must be zero (the agent long-polls)"))
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	c.BootURL = strings.TrimSuffix(c.BootURL, "/")
	if c.KwokLabel == "" {
		c.KwokLabel = DefaultKwokLabel
	}
	if c.HTTPClient == nil {
		c.HTTPClient = NewHTTPClient()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AgentLogger == nil {
		c.AgentLogger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// NewHTTPClient returns a client whose one transport keeps enough idle
// connections for thousands of machines (each has a long poll, heartbeats and
// reports in flight), without a client Timeout.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no overall limit
	t.MaxIdleConnsPerHost = 4096
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}

// KubeletClient builds the fleet's Kubernetes client from rc as a
// kubelet's is built: protobuf on the wire (what the API server encodes
// and the client decodes most cheaply) and the rate limit given, which a
// fleet of many simulated kubelets sharing one client needs raised.
func KubeletClient(rc *rest.Config, qps float32, burst int) (kubernetes.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = qps, burst
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(rc)
}
