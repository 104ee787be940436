# anvil — see README.md. Every target works on a fresh machine with only Go
# (and, for the harness and firmware tests, what `make test` installs).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go

# Every module in the workspace, from go.work's use block.
MODULES := $(shell sed -n '/^use (/,/^)/{s/^[[:space:]]*\.\///p}' go.work)
PKGS := $(addprefix ./,$(addsuffix /...,$(MODULES)))

# The packages make test starts first, longest first: go test runs them
# two at a time (-p is the core count) in the order it is given them, and
# the rollout service's scenarios (about 280 s, mostly waiting on their
# machines) came last and ran alone for minutes after everything else.
# Listed again in PKGS, each runs once.
TEST_FIRST ?= ./e2e/... ./services/rollout/service/... ./faults/... ./deploy/helm/charttest/...

TEST_TIMEOUT ?= 35m
TESTFLAGS ?=
BENCH ?= .
BENCHTIME ?= 1x
BENCH_TIMEOUT ?= 180m
STATICCHECK_VERSION ?= v0.8.2

.PHONY: run assets sysext demo test bench bench-check lint fmt tidy deps kube-bins node-bins testos chromium qemu ipxe-artifact images real-machine

# The dev stack's data, and the boot service's assets directory in it:
# assets/ (the agent, make assets), sysext/ (Kubernetes sysexts), flatcar/.
ANVIL_DATA_DIR ?= .anvil
ASSETS_DIR := $(abspath $(ANVIL_DATA_DIR))/assets
AGENT_ARCHES := amd64 arm64
VERSION_TAG := $(shell tr -d ' \n' < VERSION)

run: assets ## start the control plane on an embedded JetStream (serves the agent make assets built; set ANVIL_BOOT_PUBLIC_URL for real machines)
	ANVIL_BOOT_ASSETS_DIR="$${ANVIL_BOOT_ASSETS_DIR:-$(ASSETS_DIR)}" $(GO) run ./devstack/cmd/anvil-dev

# The agent for every architecture machines may have, static, stamped with
# VERSION, into $(ASSETS_DIR)/assets/anvil-agent-linux-<arch>. A binary
# that did not change is left alone (same mtime), so the boot service does
# not hash it again.
assets: ## build the agent (linux amd64 and arm64) into $(ANVIL_DATA_DIR)/assets/assets/, which the boot service serves
	@mkdir -p "$(ASSETS_DIR)/assets"
	@for arch in $(AGENT_ARCHES); do \
		out="$(ASSETS_DIR)/assets/anvil-agent-linux-$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -buildid= -X main.version=$(VERSION_TAG)" -o "$$out.tmp" ./agent/cmd/anvil-agent; \
		if cmp -s "$$out.tmp" "$$out"; then rm -f "$$out.tmp"; else mv -f "$$out.tmp" "$$out"; echo "assets: built $$out ($(VERSION_TAG))"; fi; \
	done

# A real Kubernetes sysext (kubelet, kubeadm, kubectl and the CNI plugins,
# laid out as Flatcar's sysext-bakery does), built from k8s.io/kubernetes
# through the Go module proxy by tools/kubebins/node and cached there, then
# put where the boot service serves it:
# $(ASSETS_DIR)/sysext/kubernetes-v$(KUBERNETES_VERSION)-x86-64.raw. A cold
# build of a version takes 10 to 35 minutes on 2 cores. Alternatively, set
# ANVIL_BOOT_SYSEXT_MIRROR (docs/boot.md).
KUBERNETES_VERSION ?= 1.37.1
sysext: ## build the Kubernetes sysext of KUBERNETES_VERSION=x.y.z (default 1.37.1) into $(ANVIL_DATA_DIR)/assets/sysext/
	@dir=$$(bash tools/kubebins/node/build.sh --kube-version v$(KUBERNETES_VERSION) --print-dir); \
	name=kubernetes-v$(KUBERNETES_VERSION)-x86-64.raw; \
	mkdir -p "$(ASSETS_DIR)/sysext"; \
	if cmp -s "$$dir/sysext/$$name" "$(ASSETS_DIR)/sysext/$$name"; then echo "sysext: $(ASSETS_DIR)/sysext/$$name is up to date"; \
	else cp "$$dir/sysext/$$name" "$(ASSETS_DIR)/sysext/.$$name.tmp" && mv -f "$(ASSETS_DIR)/sysext/.$$name.tmp" "$(ASSETS_DIR)/sysext/$$name" && echo "sysext: $(ASSETS_DIR)/sysext/$$name"; fi

demo: kube-bins ## the seed story with live progress on a real control plane, then the stack stays up until Ctrl-C (DEMOFLAGS=-h lists its flags)
	$(GO) run ./demo/cmd/anvil-demo $(DEMOFLAGS)

test: deps ## go test -race over every module, then every benchmark once at its tiny size (bench-check)
	bash tools/contracts/check.sh
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(TEST_FIRST) $(PKGS)
	$(MAKE) --no-print-directory bench-check

deps: qemu chromium kube-bins node-bins testos ## what the tests need beyond Go, installed or built once and cached

node-bins: kube-bins ## kubelet, kubeadm, kubectl, the Kubernetes sysext and the pause and workload images (tools/kubebins/node), built once into ~/.cache/anvil/kube-node
	bash tools/kubebins/node/build.sh

testos: node-bins ## the test OS images that stand in for Flatcar in the real-machine tests (tools/testos; the kubernetes variant adds a Debian root file system with systemd and containerd), built once into ~/.cache/anvil/testos
	bash tools/testos/build.sh
	bash tools/testos/build.sh --variant kubernetes

# Chromium for the console's browser test; installed only when missing,
# which needs root, as on CI.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		echo "chromium is installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing chromium from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "chromium is missing and this is not root: the console's browser test will say so and skip"; \
	fi

kube-bins: ## etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built once into ~/.cache/anvil
	bash tools/kubebins/build.sh

# QEMU with iPXE option ROMs and Debian's iPXE images, for the real-firmware
# boot tests (ipxe.lkrn boots the built artifact); installed only when
# missing, which needs root, as on CI.
QEMU_PKGS := qemu-system-x86 ipxe-qemu ipxe
qemu:
	@if command -v qemu-system-x86_64 >/dev/null 2>&1 && [ -d /usr/lib/ipxe/qemu ] && [ -e /usr/lib/ipxe/ipxe.lkrn ]; then \
		echo "qemu, ipxe-qemu and ipxe are installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing $(QEMU_PKGS) from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(QEMU_PKGS) >/dev/null; \
	else \
		echo "$(QEMU_PKGS) are missing and this is not root: the real-firmware tests will say so and skip"; \
	fi

real-machine: deps ## boot QEMU machines with real iPXE firmware, a real kernel, Ignition, the agent and kubelet against the dev stack, and roll them out (docs/real-machines.md)
	ANVIL_TEST_CONSOLE=1 $(GO) test -count=1 -timeout 70m -v -run 'TestRealMachine|TestRealKubelet' ./e2e/

URL ?= http://127.0.0.1:8081/boot.ipxe?token=REPLACE_WITH_ENROLLMENT_TOKEN
ipxe-artifact: ## a bootable iPXE artifact with the chain URL built in: make ipxe-artifact URL=…
	bash services/boot/ipxe/build.sh --url "$(URL)" --out ipxe-out

# Every benchmark's size comes from the environment variable
# ANVIL_BENCH_SCALE: full (unset), tiny, or a factor of the full size
# (docs/performance.md).
# The packages that hold benchmarks (bench-check runs only these).
BENCH_PKGS = $(shell grep -rl --include='*_test.go' '^func Benchmark' $(MODULES) | xargs -n1 dirname | sort -u | sed 's|^|./|')
BENCH_CHECK_TIMEOUT ?= 10m

# The raw output goes to BENCH_OUT as it runs; the table of every
# benchmark's ratios and figures, with the load average before and after,
# is printed at the end (docs/performance.md). -p 1: go test builds the
# next packages' test binaries while a benchmark runs, on the cores it
# measures; one action at a time keeps the builds out of the figures.
BENCH_OUT ?= bench.out
bench: ## benchmarks, each reported against a baseline measured in the same run, then one table of them all (ANVIL_BENCH_SCALE=tiny|full|0.1 sets their size)
	@echo "load average before: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$(BENCH_OUT)"
	@# The table is printed whatever happened, a failed benchmark marked
	@# FAILED in it; make bench fails after it if a benchmark did.
	@rc=0; (set -x; $(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem -timeout $(BENCH_TIMEOUT) $(PKGS)) 2>&1 | tee -a "$(BENCH_OUT)" || rc=$$?; \
	echo "load average after: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$(BENCH_OUT)"; \
	echo; $(GO) run ./libs/events/eventstest/benchtable/cmd/anvil-benchtable < "$(BENCH_OUT)" || rc=1; \
	exit $$rc

# The end-to-end benchmark (mostly building binaries and waiting for its
# processes) runs beside the others: go test runs benchmarks one package
# at a time.
bench-check: ## every benchmark once at its tiny size (ANVIL_BENCH_SCALE=tiny), so that a broken one fails; part of make test
	@start=$$(date +%s); out=$$(mktemp -d); \
	run() { ANVIL_BENCH_SCALE=tiny $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout $(BENCH_CHECK_TIMEOUT) "$$@"; }; \
	run $(filter ./e2e,$(BENCH_PKGS)) >"$$out/e2e" 2>&1 & e2e=$$!; \
	rc=0; run $(filter-out ./e2e,$(BENCH_PKGS)) >"$$out/rest" 2>&1 || rc=1; \
	wait $$e2e || rc=1; cat "$$out/rest" "$$out/e2e"; rm -rf "$$out"; \
	if [ $$rc != 0 ]; then echo "bench-check: a benchmark failed (above)"; exit 1; fi; \
	echo "bench-check: every benchmark ran once at the tiny size in $$(( $$(date +%s) - start ))s"

lint: ## go vet, gofmt, staticcheck and the contracts between services (tools/contracts)
	bash tools/contracts/check.sh
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fmt: ## gofmt every module
	gofmt -w $(MODULES)

tidy: ## go mod tidy in every module
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy); done

images: ## one FROM-scratch image per binary (anvil-sim once sim/cmd/anvil-sim has its main) and nats-server, tagged anvil/<name>:<VERSION file>
	bash deploy/images/build.sh
