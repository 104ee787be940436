// Command kwok is the kwok controller from sigs.k8s.io/kwok, which plays the
// kubelet for nodes that do not exist.
//
// The upstream binary ships no stages of its own (kwokctl writes them into
// its config), so "kwok default-stages" prints the node and pod stages that
// the pinned kwok release embeds. Pass that output back with --config.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "default-stages" {
		printDefaultStages()
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// kwok reads its logging and --config flags before cobra parses the
	// rest, so they live in a separate set that tolerates unknown flags.
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	global.ParseErrorsAllowlist.UnknownFlags = true
	global.Usage = func() {}

	ctx, logger := log.InitFlags(ctx, global)
	ctx, err := config.InitFlags(ctx, global)
	if err != nil {
		logger.Error("Loading config", "err", err)
		os.Exit(1)
	}

	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(global)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok exited", "err", err)
		os.Exit(1)
	}
}

// printDefaultStages writes the stages as one multi-document YAML stream:
// nodes become Ready and keep a lease, pods become Running and Ready, and
// pods that are being deleted go away, as a kubelet would do.
func printDefaultStages() {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, d := range docs {
		if i > 0 {
			fmt.Println("---")
		}
		fmt.Println(strings.TrimSpace(d))
	}
}
