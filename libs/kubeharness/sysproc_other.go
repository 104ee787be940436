//go:build unix && !linux

package kubeharness

import "syscall"

// sysProcAttr puts the child in its own process group. Only Linux can tie
// the child's life to ours; elsewhere a killed test may leave it running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
