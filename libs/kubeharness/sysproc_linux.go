package kubeharness

import "syscall"

// sysProcAttr puts the child in its own process group, and has the kernel
// kill it if the test binary dies without running its cleanups (a timeout
// panic, say), so no control plane outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
