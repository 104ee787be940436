// Package vmtest is what the test OS's self-tests share: a QEMU VM under
// TCG booting an image directly, a minimal boot service (Ignition config,
// files, the agent API) on the host's loopback, Ignition configs shaped
// like anvil's rendered ones, and the probe that reports from inside a
// kubernetes-variant VM what systemd did.
//
// It is a package rather than _test files so that tests in other modules
// (one that needs libs/kubeharness for a real kubeadm join) can use it.
package vmtest
