// Command kube-controller-manager is the upstream controller manager, built
// from k8s.io/kubernetes at the version pinned in go.mod. The harness needs it
// because the disruption controller computes PodDisruptionBudget status, and
// the Eviction API refuses evictions from that status.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // accept --logging-format=json like the release binary

	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
