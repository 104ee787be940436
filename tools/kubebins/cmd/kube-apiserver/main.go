// Command kube-apiserver is the upstream API server, built from
// k8s.io/kubernetes at the version pinned in go.mod.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // accept --logging-format=json like the release binary

	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
