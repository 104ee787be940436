#!/usr/bin/env bash
# Contracts between services: a service's production code may import another
# service only through services/<svc>/api (docs/architecture.md), and an api
# package imports no service's internals, its own included: its types are
# plain, so that a service's domain never becomes another's wire format.
# This check fails on any import of another service's domain, app,
# adapters, ports, service or readmodel packages, and on any such import
# from an api package. Tests may wire other services' service packages to
# start a stack; they are not checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
found=$(find services -name '*.go' ! -name '*_test.go' | sort | while read -r f; do
	own=$(cut -d/ -f2 <<<"$f")
	grep -oE '"github.com/anvil-fleet/anvil/services/[a-z]+/(domain|app|adapters|ports|service|readmodel)(/[a-z0-9_/]*)?"' "$f" |
		tr -d '"' | sed 's|^github.com/anvil-fleet/anvil/||' | while read -r imp; do
		if [[ $(cut -d/ -f2 <<<"$imp") != "$own" || $(cut -d/ -f3 <<<"$f") == api ]]; then
			echo "$f $imp"
		fi
	done || true
done | sort -u)
if [[ -n $found ]]; then
	echo "contracts: these imports reach into a service's internals; use services/<svc>/api (plain types) and translate in adapters:" >&2
	sed 's/^/  /' <<<"$found" >&2
	exit 1
fi
echo "contracts: every service reaches the others only through their api packages, and no api package imports a service's internals"
