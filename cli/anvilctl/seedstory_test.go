package anvilctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	"github.com/anvil-fleet/anvil/sim"
)

// The seed story, through anvilctl only, against the whole control plane
// (devstack: all five services), a real kube-apiserver (kubeharness) and
// a simulated machine running the real agent: pre-register a machine,
// boot it, create a pool, change its Kubernetes version with Save &
// Apply, watch the rollout finish, roll back, then read the audit events
// and the machine as it was before the rollout.
func TestSeedStory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane, the whole stack and a simulated machine")
	}
	cp := kubeharness.Start(t)
	s, bootURL := startStoryStack(t)
	start := time.Now().UTC().Add(-time.Second)

	var enroll struct{ Token string }
	if st := s.http("POST", "/api/v1/orgs/acme/enrollment-tokens", s.adminTok, `{"name":"rack-1"}`, &enroll); st != 201 || enroll.Token == "" {
		t.Fatalf("enrollment token: %d", st)
	}

	// the harness's API server as cluster prod (JSON: the kubeconfig is
	// a multi-line string)
	cluster, _ := json.Marshal(map[string]any{"kind": "Cluster", "name": "prod", "api_endpoint": cp.RESTConfig().Host,
		"kubernetes_version": "1.37.1", "kubeconfig": string(cp.Kubeconfig), "bootstrap_token": "abcdef.0123456789abcdef",
		"ca_cert_hash": "sha256:" + strings.Repeat("ab", 32)})
	if out := s.must("apply", "-f", writeFile(t, "cluster.json", string(cluster))); !strings.Contains(out, "cluster/prod created") {
		t.Fatalf("apply cluster: %s", out)
	}

	// 1. pre-register the machine into the pool it will join
	const id = "4c4c4544-0035-4b10-8056-c7c04f4e5eed"
	machineYAML := "kind: Machine\nuuid: " + strings.ToUpper(id) + "\nhostname: seed-w1\nlabels: {rack: r1}\npool: workers\n"
	if out := s.must("apply", "-f", writeFile(t, "machine.yaml", machineYAML)); !strings.Contains(out, "machine/"+id+" created (pre-registered)") {
		t.Fatalf("pre-register: %s", out)
	}
	s.waitMachine(id, "preregistered", 0)

	// 2. boot it: the simulated firmware chains to the boot service with
	// the enrollment token; with no pool yet the machine waits, pending
	fleet, err := sim.New(sim.Config{BootURL: bootURL, EnrollmentToken: enroll.Token, Kube: cp.Client,
		RebootTime: 300 * time.Millisecond, RebootJitter: 100 * time.Millisecond, MaxWait: 200 * time.Millisecond,
		AgentIntervals: sim.TestIntervals(), Logger: quietLogger(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := fleet.Add(id, "52:54:00:5e:ed:01")
	if err := fleet.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	s.waitMachine(id, "pending", 0)

	// 3. create the pool with Save & Apply: its first rollout provisions
	// the machine to revision 1 (Kubernetes 1.36)
	pool := func(minor string) string {
		return writeFile(t, "pool-"+minor+".yaml", "kind: Pool\nname: workers\ncluster: prod\ndisplay_name: Workers\n"+
			"kubernetes: {minor: \""+minor+"\"}\nflatcar: {channel: stable, version: 4230.2.3}\nrollout: {max_unavailable: 1}\n")
	}
	out := s.must("apply", "-f", pool("1.36"), "--apply")
	if !strings.Contains(out, "pool/workers created (revision 1, rolling out revision 1 as rollout/ro-") {
		t.Fatalf("save & apply the new pool: %s", out)
	}
	first := s.newRollout("workers", 1, nil)
	out = s.watchRollout(first)
	if !strings.Contains(out, "rollout "+first+": pool workers, revision 1") || !strings.Contains(out, "1/1 done, 0 in progress, 0 failed: succeeded") {
		t.Fatalf("watch the first rollout:\n%s", out)
	}
	s.waitMachine(id, "ready", 1)
	if out := s.must("get", "machine", id); !strings.Contains(out, "seed-w1") || !strings.Contains(out, "ready") {
		t.Fatalf("get machine: %s", out)
	}

	// the machine as it is before the Kubernetes change
	var before struct {
		Version         uint64 `json:"version"`
		CurrentRevision uint64 `json:"current_revision"`
		Status          string `json:"status"`
	}
	if err := json.Unmarshal([]byte(s.must("get", "machine", id, "-o", "json")), &before); err != nil || before.CurrentRevision != 1 {
		t.Fatalf("machine before the change: %+v %v", before, err)
	}
	time.Sleep(20 * time.Millisecond)
	beforeChange := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	rebootsBefore := len(m.Reboots())

	// 4. change its Kubernetes version, Save & Apply, watch it finish
	out = s.must("apply", "-f", pool("1.37"), "--apply")
	if !strings.Contains(out, "pool/workers configured (revision 2, rolling out revision 2 as rollout/ro-") {
		t.Fatalf("save & apply 1.37: %s", out)
	}
	out = s.must("get", "revision", "2", "--pool", "workers", "-o", "json")
	if !strings.Contains(out, `"kubernetes_version": "1.37.1"`) {
		t.Fatalf("revision 2: %s", out)
	}
	second := s.newRollout("workers", 2, []string{first})
	out = s.watchRollout(second)
	for _, want := range []string{"rollout " + second + ": pool workers, revision 2", "cordon", "drain", "uncordon",
		"1/1 done, 0 in progress, 0 failed: succeeded"} {
		if !strings.Contains(out, want) {
			t.Fatalf("watch the Kubernetes change lacks %q:\n%s", want, out)
		}
	}
	s.waitMachine(id, "ready", 2)
	if n := len(m.Reboots()); n != rebootsBefore+1 {
		t.Fatalf("the change rebooted the machine %d times", n-rebootsBefore)
	}
	time.Sleep(20 * time.Millisecond)
	afterChange := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)

	// 5. roll back to revision 1, and watch that too
	// (undo --watch follows the rollout it started until it ends).
	out = s.must("rollout", "undo", "workers", "--to-revision", "1", "--watch")
	if !strings.Contains(out, "pool/workers rolling back to revision 1 as rollout/ro-") {
		t.Fatalf("undo: %s", out)
	}
	back := s.newRollout("workers", 1, []string{first, second})
	if !strings.Contains(out, "rolling back to revision 1 as rollout/"+back) ||
		!strings.Contains(out, "rollout "+back+": pool workers, revision 1") || !strings.Contains(out, "succeeded") {
		t.Fatalf("undo --watch of the rollback %s:\n%s", back, out)
	}
	s.waitMachine(id, "ready", 1)
	if n := len(m.Reboots()); n != rebootsBefore+2 {
		t.Fatalf("change and rollback rebooted the machine %d times, want 2", n-rebootsBefore)
	}
	out = s.must("get", "rollouts", "--pool", "workers")
	for _, ro := range []string{first, second, back} {
		if !strings.Contains(out, ro) {
			t.Fatalf("get rollouts lacks %s:\n%s", ro, out)
		}
	}
	if out := s.must("get", "revisions", "--pool", "workers"); len(strings.Split(strings.TrimSpace(out), "\n")) != 3 {
		t.Fatalf("a rollback makes no revision:\n%s", out)
	}

	// 6. the audit log of the machine
	out = s.must("events", "--aggregate", "machine/"+id, "--since", start.Format(time.RFC3339))
	t.Logf("anvilctl events --aggregate machine/%s:\n%s", id, out)
	for _, want := range []string{"machine.preregistered", "machine.registered", "machine.target_revision_set", "machine.revision_booted", "machine.became_ready"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the machine's events lack %s:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "cli-admin") {
		t.Fatalf("the pre-registration does not name its actor:\n%s", out)
	}
	first1, last1 := strings.Index(out, "machine.preregistered"), strings.LastIndex(out, "machine.revision_booted")
	if first1 > last1 {
		t.Fatalf("events not oldest first:\n%s", out)
	}
	// --since excludes what came before
	if out := s.must("events", "--aggregate", "machine/"+id, "--since", afterChange.Format(time.RFC3339Nano)); strings.Contains(out, "machine.preregistered") {
		t.Fatalf("--since: %s", out)
	}

	// 7. the machine as it was before the rollout: at revision 1, at the
	// version it had then; after it, at revision 2; now, back at 1
	var then struct {
		UUID            string `json:"uuid"`
		Hostname        string `json:"hostname"`
		Status          string `json:"status"`
		Version         uint64 `json:"version"`
		CurrentRevision uint64 `json:"current_revision"`
	}
	if err := json.Unmarshal([]byte(s.must("get", "machine", id, "--at", beforeChange.Format(time.RFC3339Nano), "-o", "json")), &then); err != nil {
		t.Fatal(err)
	}
	if then.UUID != id || then.Hostname != "seed-w1" || then.CurrentRevision != 1 || then.Version != before.Version || then.Status != before.Status {
		t.Fatalf("the machine before the rollout: %+v, want %+v", then, before)
	}
	if err := json.Unmarshal([]byte(s.must("get", "machine", id, "--at", afterChange.Format(time.RFC3339Nano), "-o", "json")), &then); err != nil || then.CurrentRevision != 2 {
		t.Fatalf("the machine after the rollout: %+v %v", then, err)
	}
	if out := s.must("get", "machine", id, "--at", beforeChange.Format(time.RFC3339Nano)); !strings.Contains(out, "seed-w1") {
		t.Fatalf("get machine --at (table): %s", out)
	}
	if out := s.must("get", "machine", id, "--at", fmt.Sprint(before.Version), "-o", "json"); !strings.Contains(out, `"current_revision": 1`) {
		t.Fatalf("get machine --at <sequence>: %s", out)
	}
}

func quietLogger() *slog.Logger {
	if os.Getenv("ANVIL_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startStoryStack runs devstack with the harness's Kubernetes versions in
// the catalog and quick rollout and boot timings, and makes org acme with
// an admin token; it returns the boot service's URL.
func startStoryStack(t *testing.T) (*cliStack, string) {
	t.Helper()
	addr, bootAddr := freeAddr(t), freeAddr(t)
	// two versions the harness's v1.37.1 API server allows kubelets of
	const versions = "1.36.4,1.37.1"
	assets, err := simassets.Dir(t.TempDir(), versions)
	if err != nil {
		t.Fatal(err)
	}
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: t.TempDir(), GatewayAddr: addr, BootAddr: bootAddr,
		AdminToken: adminToken, Logger: quietLogger(), AssetsDir: assets,
		KubernetesVersions: versions,
		RolloutLeaseTTL:    3 * time.Second, RolloutPoll: 500 * time.Millisecond, RolloutReplan: 5 * time.Second,
		BootRetryInitial: 200 * time.Millisecond, BootRetryMax: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
	})
	s := &cliStack{t: t, base: "http://" + addr, st: st}
	s.setUp()
	return s, "http://" + bootAddr
}

// waitMachine waits until anvilctl shows the machine with status and (when
// not 0) current revision.
func (s *cliStack) waitMachine(id, status string, revision uint64) {
	s.t.Helper()
	var m struct {
		Status          string `json:"status"`
		CurrentRevision uint64 `json:"current_revision"`
	}
	s.eventuallyFor(3*time.Minute, fmt.Sprintf("machine %s %s at revision %d", id, status, revision), func() (bool, string) {
		out, errOut, err := s.run("get", "machine", id, "-o", "json")
		if err != nil {
			return false, err.Error() + errOut
		}
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			return false, err.Error()
		}
		return m.Status == status && (revision == 0 || m.CurrentRevision == revision), out
	})
}

// newRollout waits for a rollout of pool to revision other than those
// known, and returns its id.
func (s *cliStack) newRollout(pool string, revision int, known []string) string {
	s.t.Helper()
	var id string
	s.eventuallyFor(time.Minute, fmt.Sprintf("a rollout of %s to revision %d", pool, revision), func() (bool, string) {
		out, errOut, err := s.run("get", "rollouts", "--pool", pool, "-o", "json")
		if err != nil {
			return false, err.Error() + errOut
		}
		var list struct {
			Items []struct {
				ID       string `json:"id"`
				Revision int    `json:"revision"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, err.Error()
		}
		for _, ro := range list.Items {
			if ro.Revision == revision && !contains(known, ro.ID) {
				id = ro.ID
				return true, ""
			}
		}
		return false, out
	})
	return id
}

// watchRollout runs rollout status --watch until the rollout ends and
// wants it to succeed (exit 0); it returns what the watch printed.
func (s *cliStack) watchRollout(id string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, errOut, err := s.runCtx(ctx, nil, "rollout", "status", id, "--watch")
	if err != nil {
		s.t.Fatalf("rollout status %s --watch: %v\n%s%s", id, err, out, errOut)
	}
	return out
}

func (s *cliStack) eventuallyFor(d time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not within %s; last: %s", what, d, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
