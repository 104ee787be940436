#!/usr/bin/env bash
# Builds one minimal image per anvil binary, plus nats-server, tagged
# anvil/<name>:<VERSION> (VERSION is the file at the repository root).
#
#   bash deploy/images/build.sh [--no-docker] [name ...]
#   bash deploy/images/build.sh --source-tree   # prints the images' source label
#
# Each image is a static binary (CGO_ENABLED=0, -trimpath) COPYed into
# FROM scratch with the CA bundle, running as 65532:65532; see
# deploy/images/Dockerfile and docs/deploy.md. The Docker engine never
# pulls anything. --no-docker only builds the binaries (into
# deploy/images/.build/<name>/rootfs). Names default to every image; the
# simulator (sim/cmd/anvil-sim) is included when that folder exists.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

# The tree the binaries are built from, as the files are now (changes and
# new files included, ignored files not): written from a copy of git's
# index, so the checkout's own index is left alone. It labels the images
# (dev.anvil.source-tree): how a test tells an image that holds the code it
# tests from a stale one (faults/docker_test.go asks for it with
# --source-tree, which prints it and exits).
source_tree() {
	local dir idx
	dir=$(mktemp -d) || return 1
	idx=$(git rev-parse --git-path index 2>/dev/null) || { rm -rf "$dir"; return 1; }
	[[ -f $idx ]] && cp "$idx" "$dir/index"
	GIT_INDEX_FILE=$dir/index git add -A >/dev/null 2>&1 && GIT_INDEX_FILE=$dir/index git write-tree
	local rc=$?
	rm -rf "$dir"
	return $rc
}
if [[ ${1:-} == --source-tree ]]; then
	source_tree
	exit
fi
source_tree=$(source_tree) || source_tree=unknown
GO=${GO:-go}
DOCKER=${DOCKER:-docker}
version=$(tr -d ' \n' <VERSION)
[[ -n $version ]] || { echo "images: VERSION is empty" >&2; exit 1; }
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
out=deploy/images/.build
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -r $ca ]] || { echo "images: no CA bundle at $ca (install ca-certificates or set CA_BUNDLE)" >&2; exit 1; }

docker=1
want=()
for a in "$@"; do
	case $a in
	--no-docker) docker=0 ;;
	-h | --help) sed -n '2,12p' "$0"; exit 0 ;;
	*) want+=("$a") ;;
	esac
done

# name|package|description
images=(
	"anvil-registry|./services/registry/cmd/anvil-registry|anvil registry service: organizations, tokens, the machine inventory"
	"anvil-revisions|./services/revisions/cmd/anvil-revisions|anvil revisions service: clusters, machine pools, revisions, Ignition rendering"
	"anvil-rollout|./services/rollout/cmd/anvil-rollout|anvil rollout service: rollouts and operations"
	"anvil-boot|./services/boot/cmd/anvil-boot|anvil boot service: iPXE, Ignition and the agent API (serves the agent binary)"
	"anvil-gateway|./services/gateway/cmd/anvil-gateway|anvil gateway: the operators' HTTP API"
	"anvil-agent|./agent/cmd/anvil-agent|anvil-agent, the program on each machine"
)
# The simulator only once its main package exists.
if compgen -G 'sim/cmd/anvil-sim/*.go' >/dev/null; then
	images+=("anvil-sim|./sim/cmd/anvil-sim|anvil-sim, a simulated fleet of machines")
fi
images+=("nats-server|nats|NATS server with JetStream, built from github.com/nats-io/nats-server/v2")

selected() {
	((${#want[@]} == 0)) && return 0
	local w
	for w in "${want[@]}"; do [[ $w == "$1" ]] && return 0; done
	return 1
}

export CGO_ENABLED=0 GOOS=linux GOARCH=${GOARCH:-amd64}

# build_go <pkg> <out> [ldflags]: a static, reproducible binary.
build_go() {
	local pkg=$1 dst=$2 ld="-s -w -buildid="
	# -X only where the binary has a version variable (the linker would
	# silently ignore a missing one; this keeps the intent visible).
	if grep -qE '^var version( string)? =' "$pkg"/*.go 2>/dev/null; then
		ld+=" -X main.version=$version"
	fi
	# Every service reports its release in anvil_build_info and (the
	# gateway) GET /version; a binary without the package ignores it.
	ld+=" -X github.com/anvil-fleet/anvil/libs/events/buildinfo.version=$version"
	if commit=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
		ld+=" -X github.com/anvil-fleet/anvil/libs/events/buildinfo.gitCommit=$commit"
	fi
	"$GO" build -trimpath -ldflags "$ld" -o "$dst" "$pkg"
}

# nats-server's main package, from the module cache at the version the
# workspace resolves (what the services are tested against). Nothing of it
# is copied into this repository.
build_nats() {
	local dst=$1 mod=github.com/nats-io/nats-server/v2 v dir
	v=$("$GO" list -m -f '{{.Version}}' "$mod")
	dir=$(GOWORK=off GOFLAGS=-mod=mod "$GO" mod download -json "$mod@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir ]] || { echo "images: $mod@$v is not in the module cache" >&2; exit 1; }
	(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "-s -w -buildid=" -o "$root/$dst" .)
	echo "$v"
}

built=()
for spec in "${images[@]}"; do
	IFS='|' read -r name pkg desc <<<"$spec"
	selected "$name" || continue
	ctx=$out/$name
	rm -rf "$ctx"
	fs=$ctx/rootfs
	mkdir -p "$fs/usr/local/bin" "$fs/etc/ssl/certs"
	start=$SECONDS
	if [[ $pkg == nats ]]; then
		nv=$(build_nats "$fs/usr/local/bin/$name")
		desc+=" $nv"
	else
		build_go "$pkg" "$fs/usr/local/bin/$name"
	fi
	if [[ $name == anvil-boot ]]; then
		# The boot service serves the agent of the same version, for every
		# architecture machines may have, from its assets directory
		# (/srv/anvil, the chart's boot.assetsDir): it hashes them, and
		# the revisions service points Ignition at them with that hash.
		mkdir -p "$fs/srv/anvil/assets"
		for agent_arch in amd64 arm64; do
			(export GOARCH=$agent_arch && build_go ./agent/cmd/anvil-agent "$fs/srv/anvil/assets/anvil-agent-linux-$agent_arch")
		done
	fi
	cp "$ca" "$fs/etc/ssl/certs/ca-certificates.crt"
	chmod 0644 "$fs/etc/ssl/certs/ca-certificates.crt"
	sed "s/@NAME@/$name/g" deploy/images/Dockerfile >"$ctx/Dockerfile"
	echo "images: built $name ($((SECONDS - start))s, $(du -h "$fs/usr/local/bin/$name" | cut -f1))"
	if ((docker)); then
		# The engine may be too old for BuildKit; the legacy builder is
		# enough for FROM scratch (its deprecation notice is dropped).
		DOCKER_BUILDKIT=0 "$DOCKER" build -q \
			--build-arg NAME="$name" --build-arg VERSION="$version" \
			--build-arg REVISION="$revision" --build-arg SOURCE_TREE="$source_tree" --build-arg CREATED="$created" \
			--build-arg TITLE="$name" --build-arg DESCRIPTION="$desc" \
			-t "anvil/$name:$version" "$ctx" >/dev/null 2>"$ctx/docker.log" ||
			{ grep -v -e DEPRECATED -e BuildKit -e environment-variable "$ctx/docker.log" >&2; exit 1; }
		built+=("anvil/$name:$version")
	fi
done
if ((docker)); then
	echo "images: tagged"
	printf '  %s\n' "${built[@]}"
fi
