// Package e2e holds anvil's end-to-end tests: the seed story of `make demo`
// told against the real stack (devstack), a real Kubernetes control plane
// (libs/kubeharness) and a simulated fleet running the real agent (sim),
// with each step asserted; the fault cases; tracing; audit by replay; and
// the 1,000-machine benchmark. See docs/e2e.md.
package e2e
