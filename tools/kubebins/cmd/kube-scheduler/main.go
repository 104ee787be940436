// Command kube-scheduler is the upstream scheduler, built from
// k8s.io/kubernetes at the version pinned in go.mod. Without it, pods of a
// Deployment stay Pending: kwok only plays the kubelet for pods that are
// already bound to a node, and a drain test needs evicted pods to be
// replaced on the nodes that are left.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // accept --logging-format=json like the release binary

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
