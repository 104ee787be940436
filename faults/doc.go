// Package faults holds the fault tests of the event log (docs/faults.md):
// a 3-node nats-server JetStream cluster and the five anvil services, each
// in its own container from the images of `make images`, a real
// kube-apiserver from libs/kubeharness on the host and a simulated fleet of
// 50 machines in the test process. The tests stop the stream leader's
// container, partition one NATS node from the network, and restart every
// service container at once, each during a rollout, and check that no
// acknowledged event is lost or duplicated, that the services recover by
// themselves, that the projections converge and that the rollout completes.
//
// Everything is in the tests; this file only names the package. Where no
// Docker engine answers, the tests skip with one line.
package faults
