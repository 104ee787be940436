// Package kubeharness runs a real Kubernetes control plane for tests:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler as child
// processes on loopback, with kwok playing the kubelet of nodes that exist
// only as API objects.
//
// It exists because a fake clientset cannot test a drain: the Eviction API's
// refusal (HTTP 429) comes from the real API server, from budget status that
// the real controller manager computes.
//
// The binaries are built by tools/kubebins/build.sh; see
// docs/kube-harness.md.
package kubeharness
