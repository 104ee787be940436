package kubeharness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
)

// defaultStages caches "kwok default-stages" per binary, since every
// control plane in a test binary would ask for the same text.
var defaultStages sync.Map // binary path -> []byte

func kwokDefaultStages(ctx context.Context, kwok string) ([]byte, error) {
	if b, ok := defaultStages.Load(kwok); ok {
		return b.([]byte), nil
	}
	out, err := exec.CommandContext(ctx, kwok, "default-stages").Output()
	if err != nil {
		return nil, fmt.Errorf("%s default-stages (is it built by tools/kubebins?): %w", kwok, err)
	}
	defaultStages.Store(kwok, out)
	return out, nil
}

// writeComponentConfigs writes the scheduler's configuration and kwok's
// stages, and returns their paths.
func (s *starter) writeComponentConfigs(ctx context.Context) (scheduler, kwok string, err error) {
	scheduler = filepath.Join(s.cp.Dir, "kube-scheduler.yaml")
	schedulerConfig := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + strconv.Quote(s.cp.KubeconfigPath) + `
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`
	if err := os.WriteFile(scheduler, []byte(schedulerConfig), 0o600); err != nil {
		return "", "", err
	}

	stages, err := kwokDefaultStages(ctx, filepath.Join(s.binDir, Kwok))
	if err != nil {
		return "", "", err
	}
	stages, err = leaveRebootingNodes(stages)
	if err != nil {
		return "", "", err
	}
	kwok = filepath.Join(s.cp.Dir, "kwok.yaml")
	if err := os.WriteFile(kwok, stages, 0o600); err != nil {
		return "", "", err
	}
	return scheduler, kwok, nil
}

// initializeSelector is the selector of kwok's node-initialize stage, the
// one that makes any node whose Ready condition is not True Ready.
const initializeSelector = `  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
`

// leaveRebootingNodes narrows kwok's node-initialize stage to nodes whose
// Ready condition's reason is not RebootingReason, so that a kubelet's
// "rebooting" report stands until the kubelet reports Ready again, and adds
// a stage for such nodes that does nothing.
func leaveRebootingNodes(stages []byte) ([]byte, error) {
	if bytes.Count(stages, []byte(initializeSelector)) != 1 {
		return nil, fmt.Errorf("kwok's default stages have no node-initialize stage selecting on the Ready status as expected (has kwok changed?)")
	}
	narrowed := initializeSelector + `    - key: '.status.conditions.[] | select( .type == "Ready" ) | .reason'
      operator: 'NotIn'
      values:
      - '` + RebootingReason + `'
`
	stages = bytes.Replace(stages, []byte(initializeSelector), []byte(narrowed), 1)
	// kwok replaces a node's queued job only when the node matches another
	// stage: without this one, the heartbeat queued while the node was Ready
	// (10 to 20 minutes later) would still run during the reboot and replay
	// the node's Ready condition. This stage does nothing, a day later.
	rebooting := `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-rebooting
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .reason'
      operator: 'In'
      values:
      - '` + RebootingReason + `'
  delay:
    durationMilliseconds: 86400000
  next: {}
`
	if !bytes.HasSuffix(stages, []byte("\n")) {
		stages = append(stages, '\n')
	}
	return append(stages, rebooting...), nil
}
