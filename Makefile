# anvil — see README.md. Every target works on a fresh machine with only Go
# (and, for the harness and firmware tests, what `make test` installs).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go

# Every module in the workspace, from go.work's use block.
MODULES := $(shell sed -n '/^use (/,/^)/{s/^[[:space:]]*\.\///p}' go.work)
PKGS := $(addprefix ./,$(addsuffix /...,$(MODULES)))

TEST_TIMEOUT ?= 35m
TESTFLAGS ?=
BENCH ?= .
BENCHTIME ?= 1x
STATICCHECK_VERSION ?= v0.8.2

.PHONY: run demo test bench lint fmt tidy deps kube-bins qemu ipxe-artifact images

run: ## start the control plane on an embedded JetStream
	$(GO) run ./devstack/cmd/anvil-dev

demo: kube-bins ## the seed story with live progress on a real control plane, then the stack stays up until Ctrl-C (DEMOFLAGS=-h lists its flags)
	$(GO) run ./demo/cmd/anvil-demo $(DEMOFLAGS)

test: deps ## go test -race over every module
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

deps: kube-bins qemu ## what the tests need beyond Go, installed or built once and cached

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

URL ?= http://127.0.0.1:8081/boot.ipxe?token=REPLACE_WITH_ENROLLMENT_TOKEN
ipxe-artifact: ## a bootable iPXE artifact with the chain URL built in: make ipxe-artifact URL=…
	bash services/boot/ipxe/build.sh --url "$(URL)" --out ipxe-out

bench: ## benchmarks, each reported against a baseline measured in the same run
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem -timeout 60m $(PKGS)

lint: ## go vet, gofmt and staticcheck
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fmt: ## gofmt every module
	gofmt -w $(MODULES)

tidy: ## go mod tidy in every module
	@for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy); done

images: ## one FROM-scratch image per binary (anvil-sim once sim/cmd/anvil-sim has its main) and nats-server, tagged anvil/<name>:<VERSION file>
	bash deploy/images/build.sh
