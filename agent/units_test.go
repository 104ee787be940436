package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/agent/client"
)

func TestParseEnvFile(t *testing.T) {
	env, err := ParseEnvFile([]byte(`# written by Ignition
ANVIL_BOOT_URL=https://boot.example:8443

export ANVIL_MACHINE_UUID = 4C4C4544-0042-3510-8052-B4C04F4E3132
ANVIL_AGENT_CREDENTIAL="s3cret=with=equals"
ANVIL_CA_FILE='/etc/anvil/ca.pem'
ANVIL_HEARTBEAT_SECONDS=15
`))
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := ApplyEnv(&cfg, env); err != nil {
		t.Fatal(err)
	}
	if cfg.BootURL != "https://boot.example:8443" || cfg.Credential != "s3cret=with=equals" ||
		cfg.CAFile != "/etc/anvil/ca.pem" || cfg.HeartbeatInterval != 15*time.Second {
		t.Errorf("cfg = %+v", cfg)
	}
	cfg, err = cfg.withDefaults()
	if err != nil || cfg.MachineUUID != "4c4c4544-0042-3510-8052-b4c04f4e3132" {
		t.Errorf("uuid = %q, %v", cfg.MachineUUID, err)
	}
}

func TestParseEnvFileErrorsHideTheLine(t *testing.T) {
	_, err := ParseEnvFile([]byte("ANVIL_BOOT_URL=x\nANVIL_AGENT_CREDENTIAL: hunter2\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("err = %v", err)
	}
	var cfg Config
	for _, v := range []string{"0", "-3", "thirty"} {
		if err := ApplyEnv(&cfg, map[string]string{EnvHeartbeatSeconds: v}); err == nil {
			t.Errorf("heartbeat seconds %q accepted", v)
		}
	}
}

func TestReadRevisionFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "revision")
	if err := os.WriteFile(p, []byte("  mrev-42 \nignored\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rev, err := ReadRevisionFile(p); err != nil || rev != "mrev-42" {
		t.Errorf("rev = %q, %v", rev, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{BootURL: "https://boot:8443", MachineUUID: testUUID, Credential: "xyzzy-secret", StateFile: filepath.Join(t.TempDir(), "s.json"), BootID: "b"}
	if _, err := New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no url":         func(c *Config) { c.BootURL = "" },
		"bad url":        func(c *Config) { c.BootURL = "boot:8443" },
		"bad uuid":       func(c *Config) { c.MachineUUID = "server-17" },
		"no credential":  func(c *Config) { c.Credential = "" },
		"negative":       func(c *Config) { c.HeartbeatInterval = -time.Second },
		"missing CAFile": func(c *Config) { c.CAFile = "/nonexistent/ca.pem" },
	} {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), c.Credential) && c.Credential != "" {
			t.Errorf("%s: error leaks the credential: %v", name, err)
		}
	}
}

func TestDefaultsAreRootRelative(t *testing.T) {
	cfg, err := Config{BootURL: "http://b", MachineUUID: testUUID, Credential: "c", Root: "/sim/m1"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateFile != "/sim/m1/var/lib/anvil-agent/state.json" || cfg.HeartbeatInterval != DefaultHeartbeatInterval {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestJitterStaysWithinTwentyPercent(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := jitter(30*time.Second, cadenceJitter)
		if d < 24*time.Second || d > 36*time.Second {
			t.Fatalf("jitter gave %v", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("jitter is hardly random: %d distinct values", len(seen))
	}
}

func TestBackoffGrowsToItsCap(t *testing.T) {
	b := &backoff{initial: time.Second, max: time.Minute}
	for i := range 40 {
		d := b.next()
		ceiling := min(time.Second<<min(i, 30), time.Minute)
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, d, ceiling/2, ceiling)
		}
	}
	b.reset()
	if d := b.next(); d > time.Second {
		t.Errorf("after reset: %v", d)
	}
}

func TestRetryDelayHonoursRetryAfter(t *testing.T) {
	b := &backoff{initial: time.Millisecond, max: time.Second}
	err := &client.Error{Op: "heartbeat", StatusCode: 429, RetryAfter: 2 * time.Minute}
	if d := retryDelay(err, b); d < 2*time.Minute || d > 2*time.Minute+12*time.Second {
		t.Errorf("delay %v does not honour Retry-After 2m", d)
	}
	err.RetryAfter = 24 * time.Hour
	if d := retryDelay(err, b); d > maxRetryAfter+maxRetryAfter/10 {
		t.Errorf("delay %v: an absurd Retry-After must be capped", d)
	}
	if d := retryDelay(errors.New("connection refused"), b); d > time.Second {
		t.Errorf("delay %v above the cap", d)
	}
}

func TestRecentAcksEvictsOldest(t *testing.T) {
	r := newRecentAcks()
	for i := range recentCapacity + 10 {
		r.put(string(rune('a'))+strings.Repeat("x", i), api.Ack{Status: api.AckDone})
	}
	if _, ok := r.get("a"); ok {
		t.Error("oldest id not evicted")
	}
	if _, ok := r.get("a" + strings.Repeat("x", recentCapacity+9)); !ok {
		t.Error("newest id missing")
	}
	if len(r.acks) != recentCapacity {
		t.Errorf("%d ids kept", len(r.acks))
	}
	r.put("a"+strings.Repeat("x", recentCapacity+9), api.Ack{Status: api.AckFailed})
	if a, _ := r.get("a" + strings.Repeat("x", recentCapacity+9)); a.Status != api.AckFailed || len(r.acks) != recentCapacity {
		t.Error("updating an id must replace its ack in place")
	}
}

func TestSaveStateIsAtomicReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "dir")
	p := filepath.Join(dir, "state.json")
	for _, id := range []string{"i-1", "i-2"} {
		if err := saveState(p, persistedState{LastInstruction: &actedInstruction{ID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := loadState(p)
	if err != nil || st.LastInstruction.ID != "i-2" {
		t.Fatalf("state = %+v, %v", st, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
	if err := os.WriteFile(p, []byte(`{"version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(p); err == nil {
		t.Error("unknown state version accepted")
	}
}

// writeScript installs a fake command that appends its arguments to a file.
func writeScript(t *testing.T, name, body string) (path, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	path = filepath.Join(dir, name)
	script := "#!/bin/sh\necho \"$@\" >> " + argsFile + "\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, argsFile
}

func TestSystemctlRebooter(t *testing.T) {
	path, argsFile := writeScript(t, "systemctl", "exit 0")
	if err := (SystemctlRebooter{Path: path}).Reboot(context.Background(), "instruction i-1"); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(argsFile)
	if got := strings.TrimSpace(string(args)); got != "reboot --message=anvil-agent: instruction i-1" {
		t.Errorf("systemctl called with %q", got)
	}

	path, _ = writeScript(t, "systemctl", "echo 'Failed to connect to bus' >&2; exit 1")
	err := (SystemctlRebooter{Path: path}).Reboot(context.Background(), "r")
	if err == nil || !strings.Contains(err.Error(), "Failed to connect to bus") {
		t.Errorf("err = %v", err)
	}
}

func TestJournalctl(t *testing.T) {
	path, argsFile := writeScript(t, "journalctl", "printf 'l1\\nl2\\nl3\\n'")
	lines, err := Journalctl{Path: path}.Tail(context.Background(), 2)
	if err != nil || strings.Join(lines, ",") != "l2,l3" {
		t.Errorf("lines = %v, %v", lines, err)
	}
	args, _ := os.ReadFile(argsFile)
	if got := strings.TrimSpace(string(args)); got != "-b --no-pager -o short-iso -n 2" {
		t.Errorf("journalctl called with %q", got)
	}
	if _, err := (Journalctl{Path: "/nonexistent/journalctl"}).Tail(context.Background(), 2); err == nil {
		t.Error("a missing journalctl did not report an error")
	}
}

func TestMissingJournalStillReports(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f, func(c *Config) { c.Journal = Journalctl{Path: "/nonexistent/journalctl"} })
	h.start(t)
	f.waitFor("a report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })
	_, reps, _ := f.snapshot()
	if reps[0].StartupLog == nil || len(reps[0].StartupLog) != 0 || reps[0].Hardware.CPUs != 16 {
		t.Errorf("report = %+v", reps[0])
	}
}

// The revisions service's renderer writes ANVIL_URL, ANVIL_MACHINE_REVISION
// and the credential, and no UUID; the agent must run from exactly that.
func TestApplyEnvAcceptsTheRenderersKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		url  string
	}{
		{"renderer", map[string]string{EnvURL: "https://boot.example:8443"}, "https://boot.example:8443"},
		{"documented", map[string]string{EnvBootURL: "https://a:1"}, "https://a:1"},
		{"both: ANVIL_BOOT_URL wins", map[string]string{EnvBootURL: "https://a:1", EnvURL: "https://b:2"}, "https://a:1"},
		{"empty ANVIL_BOOT_URL falls back", map[string]string{EnvBootURL: "", EnvURL: "https://b:2"}, "https://b:2"},
	} {
		var cfg Config
		if err := ApplyEnv(&cfg, tc.env); err != nil || cfg.BootURL != tc.url {
			t.Errorf("%s: BootURL = %q, %v; want %q", tc.name, cfg.BootURL, err, tc.url)
		}
	}
	var cfg Config
	if err := ApplyEnv(&cfg, map[string]string{EnvMachineRevision: " mr-0123456789abcdef0123 "}); err != nil || cfg.BootedRevision != "mr-0123456789abcdef0123" {
		t.Errorf("BootedRevision = %q, %v", cfg.BootedRevision, err)
	}
}

func writeDMI(t *testing.T, root, content string) {
	t.Helper()
	dir := filepath.Join(root, "sys/class/dmi/id")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "product_uuid"), []byte(content), 0o400); err != nil {
		t.Fatal(err)
	}
}

func TestMachineUUIDComesFromSMBIOSWhenNotConfigured(t *testing.T) {
	root := t.TempDir()
	writeDMI(t, root, "4C4C4544-0035-4B10-8056-B7C04F4E3532\n")
	cfg, err := Config{BootURL: "http://b", Credential: "c", Root: root}.withDefaults()
	if err != nil || cfg.MachineUUID != "4c4c4544-0035-4b10-8056-b7c04f4e3532" {
		t.Fatalf("uuid = %q, %v", cfg.MachineUUID, err)
	}
	// An explicit ANVIL_MACHINE_UUID wins over the firmware's.
	cfg, err = Config{BootURL: "http://b", Credential: "c", Root: root, MachineUUID: testUUID}.withDefaults()
	if err != nil || cfg.MachineUUID != testUUID {
		t.Fatalf("uuid = %q, %v", cfg.MachineUUID, err)
	}
	for name, content := range map[string]string{
		"missing": "",
		"nil":     "00000000-0000-0000-0000-000000000000\n",
		"all F":   "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF\n",
		"garbage": "Not Settable\n",
	} {
		root := t.TempDir()
		if name != "missing" {
			writeDMI(t, root, content)
		}
		if _, err := New(Config{BootURL: "http://b", Credential: "xyzzy-secret", Root: root, BootID: "b"}); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), EnvMachineUUID) {
			t.Errorf("%s: error does not say how to fix it: %v", name, err)
		}
	}
}
