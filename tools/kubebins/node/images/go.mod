// The programs inside the two images that nodes import instead of pulling:
// the pod sandbox (pause) and a small workload (sleeper). Standard library
// only.
module github.com/anvil-fleet/anvil/tools/kubebins/node/images

go 1.26.0
