#!/usr/bin/env bash
# Contracts between services: a service's production code may import another
# service only through services/<svc>/api (docs/architecture.md), and an api
# package imports no service's internals, its own included. This check
# fails on any import of another service's domain, app, adapters, ports,
# service or readmodel packages (or of any of them from an api package)
# that is not in known-violations.txt, and on
# a listed import that is gone (so the list only shrinks). Tests may wire
# other services' service packages to start a stack; they are not checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
known=tools/contracts/known-violations.txt
found=$(mktemp)
trap 'rm -f "$found"' EXIT
find services -name '*.go' ! -name '*_test.go' | sort | while read -r f; do
	own=$(cut -d/ -f2 <<<"$f")
	grep -oE '"github.com/anvil-fleet/anvil/services/[a-z]+/(domain|app|adapters|ports|service|readmodel)(/[a-z0-9_/]*)?"' "$f" |
		tr -d '"' | sed 's|^github.com/anvil-fleet/anvil/||' | while read -r imp; do
		# A contract (services/<svc>/api) is plain types: it may not lean
		# on its own service's internals either, or they would become
		# everyone's wire format.
		if [[ $(cut -d/ -f2 <<<"$imp") != "$own" || $(cut -d/ -f3 <<<"$f") == api ]]; then
			echo "$f $imp"
		fi
	done || true
done | sort -u >"$found"
new=$(comm -13 <(grep -v '^#' "$known" | sort -u) "$found")
gone=$(comm -23 <(grep -v '^#' "$known" | sort -u) "$found")
rc=0
if [[ -n $new ]]; then
	echo "contracts: these imports reach into another service; use services/<svc>/api and translate in adapters:" >&2
	sed 's/^/  /' <<<"$new" >&2
	rc=1
fi
if [[ -n $gone ]]; then
	echo "contracts: these known violations are gone; remove them from $known:" >&2
	sed 's/^/  /' <<<"$gone" >&2
	rc=1
fi
[[ $rc == 0 ]] && echo "contracts: no new import of another service's internals ($(grep -vc '^#' "$known") known, to be removed; issue #20)"
exit $rc
