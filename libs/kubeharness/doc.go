// Package kubeharness runs a real Kubernetes control plane for tests:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler as child
// processes on loopback, with kwok playing the kubelet of nodes that exist
// only as API objects.
//
// It exists because a fake clientset cannot test a drain: the Eviction API's
// refusal (HTTP 429) comes from the real API server, from budget status that
// the real controller manager computes.
//
// WithKubeadm turns it into a control plane that a real `kubeadm join`
// (from a VM) can join, and LoadNodeArtifacts finds what such a node runs
// (kubelet, kubeadm, the Kubernetes sysext, the pause and workload images).
//
// The binaries are built by tools/kubebins/build.sh and
// tools/kubebins/node/build.sh; see docs/kube-harness.md.
package kubeharness
