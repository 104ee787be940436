// Command pause is the pod sandbox's only process: it holds the pod's
// namespaces open, reaps the zombies that other containers in a shared PID
// namespace leave behind (it is PID 1 there), and exits when told to stop.
// It stands in for registry.k8s.io/pause, which cannot be pulled here.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what -v prints; the image is tagged with the reference that
// kubeadm and containerd ask for, not with this.
const version = "anvil-pause-1"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.go version:", version)
		return
	}
	// Handlers first: whoever reads the line below may signal at once.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child; one SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
