#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# kwok from the Go module proxy, so that tests get a real control plane
# without downloading release tarballs or container images.
#
# The binaries land in
#   ${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/kube/<kubernetes-version>-<hash>/bin
# where <hash> covers go.mod, go.sum, the main packages and $recipe below, so
# a change to any of them gets its own directory and old builds are never
# half-overwritten.
# A stamp file is written last: a build that was interrupted is redone.
# The bin directory is written to .../kube/current, which is where
# libs/kubeharness looks (after $ANVIL_KUBE_BIN_DIR).
#
# Usage: bash tools/kubebins/build.sh [--print-bin-dir]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

quiet=false
if [[ "${1:-}" == "--print-bin-dir" ]]; then
	quiet=true
fi

say() {
	if ! $quiet; then
		echo "kubebins: $*" >&2
	fi
}

if ! command -v go >/dev/null 2>&1; then
	echo "kubebins: the Go toolchain is not on PATH" >&2
	exit 1
fi

hash_cmd() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum
	else
		shasum -a 256
	fi
}

kube_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)"
if [[ -z "$kube_version" ]]; then
	echo "kubebins: no k8s.io/kubernetes requirement in $here/go.mod" >&2
	exit 1
fi
kwok_version="$(awk '$1 == "sigs.k8s.io/kwok" && $2 ~ /^v/ { print $2; exit }' go.mod)"

# Bump when the way binaries are built below changes (flags, ldflags), so
# that caches built the old way are not reused.
recipe=1

# The key is the single source of truth for where binaries live; the harness
# reads the result from .../kube/current instead of recomputing it.
content_hash="$({ echo "recipe $recipe"; cat go.mod go.sum $(find cmd -name '*.go' | LC_ALL=C sort); } | hash_cmd | cut -c1-16)"
key="${kube_version}-${content_hash}"

cache_root="${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/kube"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"
stamp="$key_dir/complete"
binaries=(etcd kwok kube-scheduler kube-controller-manager kube-apiserver)

mkdir -p "$cache_root"

publish() {
	# Written through a temporary file so a reader never sees half a path.
	printf '%s\n' "$bin_dir" >"$cache_root/current.tmp.$$"
	mv -f "$cache_root/current.tmp.$$" "$cache_root/current"
	if $quiet; then
		echo "$bin_dir"
	else
		say "binaries in $bin_dir"
	fi
}

# Serialise concurrent invocations (two `make test` in parallel, say): the
# second one waits and then finds the stamp.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache_root/.lock"
	if ! flock -n 9; then
		say "another build holds $cache_root/.lock; waiting"
		flock 9
	fi
else
	say "flock not found; concurrent builds are not serialised"
fi

if [[ -f "$stamp" ]]; then
	missing=false
	for b in "${binaries[@]}"; do
		[[ -x "$bin_dir/$b" ]] || missing=true
	done
	if ! $missing; then
		say "up to date ($key)"
		publish
		exit 0
	fi
fi

say "building Kubernetes $kube_version, kwok $kwok_version and etcd into $key_dir"
say "a cold build takes 10 to 20 minutes on 2 cores; later runs reuse the result"
rm -rf "$key_dir"
mkdir -p "$bin_dir"

export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly

minor="${kube_version#v1.}"
minor="${minor%%.*}"
# Stamp the version so /version and kubectl report v1.X.Y, not v0.0.0-master.
kv=k8s.io/component-base/version
kube_ldflags="-s -w -X $kv.gitVersion=$kube_version -X $kv.gitMajor=1 -X $kv.gitMinor=$minor -X $kv.gitTreeState=clean"

start=$SECONDS
say "downloading modules"
go mod download
say "modules ready ($((SECONDS - start))s)"

for b in "${binaries[@]}"; do
	t=$SECONDS
	say "building $b"
	ldflags="-s -w"
	case "$b" in
	kube-*) ldflags="$kube_ldflags" ;;
	esac
	go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$bin_dir/$b" "./cmd/$b"
	say "built $b ($((SECONDS - t))s)"
done

printf 'kubernetes %s\nkwok %s\nbuilt %s in %ss with %s\n' \
	"$kube_version" "$kwok_version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((SECONDS - start))" "$(go version)" >"$stamp"
say "done in $((SECONDS - start))s"
publish
