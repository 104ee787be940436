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

.PHONY: run test bench lint fmt tidy demo

run: ## start the control plane on an embedded JetStream
	$(GO) run ./devstack/cmd/anvil-dev

test: ## go test -race over every module
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

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
