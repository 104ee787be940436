#!/usr/bin/env bash
# Builds what a real Kubernetes worker node needs, for tests that boot one:
#
#   kubelet, kubeadm, kubectl   from k8s.io/kubernetes (Go module proxy), CGO_ENABLED=0,
#                               version-stamped like the release binaries
#   CNI plugins                 bridge, host-local, loopback, portmap, ptp from
#                               github.com/containernetworking/plugins
#   sysext/kubernetes-<v>-x86-64.raw (+ .sha512)
#                               a squashfs systemd-sysext image laid out as Flatcar's
#                               sysext-bakery lays out its Kubernetes extension
#   images/pause.tar, images/sleeper.tar
#                               FROM-scratch images built with `docker build` and
#                               `docker save`d, for `ctr -n k8s.io images import`
#                               (no registry can be reached)
#
# Each part is cached on its own under ${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/kube-node/<part>/<key>,
# keyed by a hash of its inputs, with a stamp file written last (an interrupted build
# is redone). Changing the sleeper image does not rebuild kubelet, and nothing here
# touches the control-plane cache of tools/kubebins/build.sh (<cache>/kube/).
#
# The parts are then gathered (symlinks) into one directory, the "node dir":
#   kubelet kubeadm kubectl
#   sysext/kubernetes-v<version>-x86-64.raw  sysext/kubernetes-v<version>-x86-64.raw.sha512
#   images/pause.tar  images/sleeper.tar
#   cni/10-anvil-bridge.conflist             an example CNI config for /etc/cni/net.d
#   manifest.json                            versions, image references, sizes, digests
# whose path is written to <cache>/kube-node/current (libs/kubeharness reads it).
#
# Usage:
#   bash tools/kubebins/node/build.sh [--print-dir] [--kube-version vX.Y.Z]
#
#   --print-dir            print only the node dir, on stdout (progress goes nowhere)
#   --kube-version vX.Y.Z  build another Kubernetes release (default: the one pinned in
#                          kube/go.mod, also settable as $ANVIL_KUBE_VERSION). Other
#                          versions get a go.mod generated from k8s.io/kubernetes's own and
#                          `go mod tidy`d through the module proxy, cached per version.
#
# Needs: Go, Docker (for the images), and mksquashfs (squashfs-tools, installed from
# Debian when missing and running as root).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

quiet=false
want_version="${ANVIL_KUBE_VERSION:-}"
while (($#)); do
	case "$1" in
	--print-dir) quiet=true ;;
	--kube-version)
		want_version="${2:?--kube-version needs a value such as v1.37.1}"
		shift
		;;
	--kube-version=*) want_version="${1#*=}" ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "kube-node: unknown argument $1 (see --help)" >&2
		exit 2
		;;
	esac
	shift
done

say() {
	if ! $quiet; then
		echo "kube-node: $*" >&2
	fi
}
die() {
	echo "kube-node: $*" >&2
	exit 1
}

command -v go >/dev/null 2>&1 || die "the Go toolchain is not on PATH"

hash_cmd() {
	if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi
}
# key_of prints a 16-hex-digit hash of its stdin.
key_of() { hash_cmd | cut -c1-16; }

# Bump when the way a part is built changes, so caches built the old way are
# not reused.
recipe_bin=1
recipe_cni=1
recipe_sysext=1
recipe_images=1
recipe_nodedir=1

arch=x86-64 # Flatcar's name; the only one built so far
goarch=amd64
cni_plugins=(bridge host-local loopback portmap ptp)
sleeper_ref="anvil.test/sleeper:1"
# The sandbox images that containerd asks for when its config sets none:
# 1.6 (Debian bookworm's containerd 1.6.20) and 1.7 ask for these. kubeadm's
# own pause reference is added below, read from the kubeadm just built.
containerd_default_pause_refs=(registry.k8s.io/pause:3.6 registry.k8s.io/pause:3.8)

pinned_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$here/kube/go.mod")"
[[ -n "$pinned_version" ]] || die "no k8s.io/kubernetes requirement in $here/kube/go.mod"
kube_version="${want_version:-$pinned_version}"
[[ "$kube_version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "--kube-version $kube_version is not of the form v1.X.Y"
cni_version="$(awk '$1 == "github.com/containernetworking/plugins" && $2 ~ /^v/ { print $2; exit }' "$here/cni/go.mod")"

cache_root="${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/kube-node"
mkdir -p "$cache_root"

# Serialise concurrent invocations; the second one waits and then finds the
# stamps.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache_root/.lock"
	if ! flock -n 9; then
		say "another build holds $cache_root/.lock; waiting"
		flock 9
	fi
else
	say "flock not found; concurrent builds are not serialised"
fi

export GOWORK=off CGO_ENABLED=0 GOOS=linux GOARCH=$goarch
start=$SECONDS

# fresh DIR: an empty directory for a part whose stamp is missing.
fresh() {
	rm -rf "$1"
	mkdir -p "$1"
}

# ---------------------------------------------------------------- module ----
# The module that builds kubelet, kubeadm and kubectl: the checked-in one for
# the pinned version, else one generated for the version asked for.
kube_mod="$here/kube"
if [[ "$kube_version" != "$pinned_version" ]]; then
	kube_mod="$cache_root/mod/$kube_version"
	if [[ ! -f "$kube_mod/complete" ]]; then
		say "generating a module for Kubernetes $kube_version"
		fresh "$kube_mod"
		upstream_gomod="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$kube_version" |
			awk -F'"' '$2 == "GoMod" { print $4 }')" ||
			die "the module proxy has no k8s.io/kubernetes@$kube_version (a typo, or a release the proxy refuses)"
		staging_version="v0.${kube_version#v1.}"
		{
			echo "module github.com/anvil-fleet/anvil/tools/kubebins/node/kube"
			echo
			echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1.0/')"
			echo
			echo "tool ("
			echo "	k8s.io/kubernetes/cmd/kubeadm"
			echo "	k8s.io/kubernetes/cmd/kubectl"
			echo "	k8s.io/kubernetes/cmd/kubelet"
			echo ")"
			echo
			echo "require k8s.io/kubernetes $kube_version"
			echo
			echo "replace ("
			# Every staging module that k8s.io/kubernetes requires at v0.0.0.
			awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$upstream_gomod" | sort -u |
				while read -r m; do echo "	$m => $m $staging_version"; done
			echo ")"
		} >"$kube_mod/go.mod"
		(cd "$kube_mod" && GOFLAGS=-mod=mod go mod tidy) ||
			die "go mod tidy failed for Kubernetes $kube_version in $kube_mod"
		date -u +%Y-%m-%dT%H:%M:%SZ >"$kube_mod/complete"
	fi
fi

# ------------------------------------------------------------------ bins ----
minor="${kube_version#v1.}"
minor="${minor%%.*}"
bin_key="${kube_version}-$({
	echo "recipe $recipe_bin $goarch"
	cat "$kube_mod/go.mod" "$kube_mod/go.sum"
} | key_of)"
bin_dir="$cache_root/bin/$bin_key"
if [[ ! -f "$bin_dir/complete" ]]; then
	say "building kubelet, kubeadm and kubectl $kube_version into $bin_dir"
	say "a cold build takes 5 to 15 minutes on 2 cores (less when tools/kubebins/build.sh already filled the Go build cache)"
	fresh "$bin_dir"
	t=$SECONDS
	(cd "$kube_mod" && GOFLAGS=-mod=readonly go mod download) || die "downloading modules for $kube_mod failed"
	say "modules ready ($((SECONDS - t))s)"
	# The same stamps as the release build: kubelet --version and kubectl
	# version then say $kube_version, and kubeadm knows which release it is.
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	for b in kubelet kubeadm kubectl; do
		t=$SECONDS
		say "building $b"
		(cd "$kube_mod" && GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false -ldflags "$ldflags" \
			-o "$bin_dir/$b" "k8s.io/kubernetes/cmd/$b") || die "building $b failed"
		say "built $b ($((SECONDS - t))s)"
	done
	got="$("$bin_dir/kubelet" --version)"
	[[ "$got" == "Kubernetes $kube_version" ]] || die "kubelet --version says '$got', want 'Kubernetes $kube_version'"
	printf 'kubernetes %s\nbuilt %s with %s\n' "$kube_version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" >"$bin_dir/complete"
else
	say "kubelet, kubeadm, kubectl up to date ($bin_key)"
fi

# ------------------------------------------------------------------- cni ----
cni_key="${cni_version}-$({
	echo "recipe $recipe_cni $goarch ${cni_plugins[*]}"
	cat "$here/cni/go.mod" "$here/cni/go.sum"
} | key_of)"
cni_dir="$cache_root/cni/$cni_key"
if [[ ! -f "$cni_dir/complete" ]]; then
	say "building CNI plugins $cni_version (${cni_plugins[*]}) into $cni_dir"
	fresh "$cni_dir"
	t=$SECONDS
	for p in "${cni_plugins[@]}"; do
		case "$p" in
		host-local) pkg=plugins/ipam/host-local ;;
		portmap) pkg=plugins/meta/portmap ;;
		*) pkg=plugins/main/$p ;;
		esac
		(cd "$here/cni" && GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false \
			-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
			-o "$cni_dir/$p" "github.com/containernetworking/plugins/$pkg") || die "building CNI plugin $p failed"
	done
	say "built CNI plugins ($((SECONDS - t))s)"
	printf 'cni-plugins %s\nbuilt %s\n' "$cni_version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$cni_dir/complete"
else
	say "CNI plugins up to date ($cni_key)"
fi

# ---------------------------------------------------------------- sysext ----
sysext_name="kubernetes-${kube_version}-${arch}.raw"
# ID=_any: the image merges on any OS whose systemd (>= 252) knows _any, which
# is what Flatcar's sysext-bakery writes today (it writes ID=flatcar plus
# SYSEXT_LEVEL=1.0 only when asked for one OS). ARCHITECTURE must match the
# kernel's. EXTENSION_RELOAD_MANAGER makes systemd >= 255 reload units after a
# merge, so kubelet.service appears; older systemd ignores it.
extension_release="ID=_any
ARCHITECTURE=${arch}
EXTENSION_RELOAD_MANAGER=1"

ensure_mksquashfs() {
	command -v mksquashfs >/dev/null 2>&1 && command -v unsquashfs >/dev/null 2>&1 && return
	if [[ "$(id -u)" != 0 ]]; then
		die "mksquashfs is missing and this is not root: install Debian's squashfs-tools (apt-get install squashfs-tools)"
	fi
	say "installing squashfs-tools from Debian"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends squashfs-tools >/dev/null ||
		die "apt-get install squashfs-tools failed"
}
ensure_mksquashfs
mksquashfs_version="$({ mksquashfs -version 2>/dev/null || true; } | head -n1 | awk '{ print $3 }')"

sysext_key="$({
	echo "recipe $recipe_sysext $sysext_name mksquashfs $mksquashfs_version"
	echo "$bin_key $cni_key"
	echo "$extension_release"
	(cd "$here/sysext/files" && find . -type f | LC_ALL=C sort | while read -r f; do
		echo "$f"
		cat "$f"
	done)
} | key_of)"
sysext_dir="$cache_root/sysext/$sysext_key"
if [[ ! -f "$sysext_dir/complete" ]]; then
	say "building $sysext_name into $sysext_dir"
	fresh "$sysext_dir"
	t=$SECONDS
	root="$sysext_dir/root"
	mkdir -p "$root/usr/bin" "$root/usr/local/bin/cni" "$root/usr/local/share" \
		"$root/usr/lib/extension-release.d" "$root/usr/libexec/kubernetes/kubelet-plugins/volume"
	cp -R "$here/sysext/files/." "$root/"
	install -m 0755 "$bin_dir/kubelet" "$bin_dir/kubeadm" "$bin_dir/kubectl" "$root/usr/bin/"
	for p in "${cni_plugins[@]}"; do install -m 0755 "$cni_dir/$p" "$root/usr/local/bin/cni/"; done
	echo "$kube_version" >"$root/usr/local/share/kubernetes-version"
	echo "$cni_version" >"$root/usr/local/share/kubernetes-cni-version"
	# As the bakery does: /usr is read-only once merged, so the flexvolume
	# directory points into /var (the kubeadm drop-in creates it).
	ln -s /var/kubernetes/kubelet-plugins/volume/exec "$root/usr/libexec/kubernetes/kubelet-plugins/volume/exec"
	# The file's name must be the image's name without .raw as systemd sees it:
	# the node links the image to /etc/extensions/kubernetes.raw.
	echo "$extension_release" >"$root/usr/lib/extension-release.d/extension-release.kubernetes"
	find "$root" -type d -exec chmod 0755 {} +
	find "$root" -type f ! -perm -0100 -exec chmod 0644 {} +
	args=(-all-root -noappend -quiet -no-progress)
	# Fixed timestamps make the image a function of its contents.
	help="$(mksquashfs -help 2>&1 || true)"
	if [[ "$help" == *-all-time* ]]; then
		args+=(-all-time 0 -mkfs-time 0)
	fi
	mksquashfs "$root" "$sysext_dir/$sysext_name" "${args[@]}" >/dev/null || die "mksquashfs failed"
	# Check what a node will see: the files systemd and kubeadm look for.
	listing="$(unsquashfs -l -d '' "$sysext_dir/$sysext_name")"
	for want in /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl \
		/usr/lib/systemd/system/kubelet.service /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf \
		/usr/lib/extension-release.d/extension-release.kubernetes /usr/local/bin/cni/bridge; do
		grep -qx -- "$want" <<<"$listing" || die "$sysext_name lacks $want"
	done
	rm -rf "$root"
	# Hex only, one line: what Ignition's verification.hash takes after "sha512-".
	sha512sum "$sysext_dir/$sysext_name" | awk '{ print $1 }' >"$sysext_dir/$sysext_name.sha512"
	say "built $sysext_name ($((SECONDS - t))s)"
	printf '%s\nbuilt %s with mksquashfs %s\n' "$sysext_name" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mksquashfs_version" >"$sysext_dir/complete"
else
	say "$sysext_name up to date ($sysext_key)"
fi

# ---------------------------------------------------------------- images ----
# kubeadm names the pause image it expects (and kubelet pins against GC).
kubeadm_images="$("$bin_dir/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null)" ||
	die "$bin_dir/kubeadm config images list --kubernetes-version $kube_version failed"
kubeadm_pause_ref="$(awk '/\/pause:/ && !found { print; found = 1 }' <<<"$kubeadm_images")"
[[ -n "$kubeadm_pause_ref" ]] || die "$bin_dir/kubeadm config images list printed no pause image"
pause_refs=("$kubeadm_pause_ref")
for r in "${containerd_default_pause_refs[@]}"; do
	[[ "$r" == "$kubeadm_pause_ref" ]] || pause_refs+=("$r")
done

dockerfile() { # dockerfile BINARY USER
	printf 'FROM scratch\nCOPY %s /%s\nUSER %s\nENTRYPOINT ["/%s"]\n' "$1" "$1" "$2" "$1"
}

images_key="$({
	echo "recipe $recipe_images $goarch $(go env GOVERSION)"
	echo "pause ${pause_refs[*]}"
	echo "sleeper $sleeper_ref"
	dockerfile pause 65535:65535
	dockerfile sleeper 65532:65532
	cat "$here/images/go.mod" "$here/images/pause/main.go" "$here/images/sleeper/main.go"
} | key_of)"
images_dir="$cache_root/images/$images_key"
if [[ ! -f "$images_dir/complete" ]]; then
	command -v docker >/dev/null 2>&1 || die "docker is not on PATH: the pause and sleeper images are built with docker build"
	docker info >/dev/null 2>&1 || die "the Docker daemon does not answer (docker info failed): start it, the images are built with docker build"
	say "building images ${pause_refs[*]} and $sleeper_ref into $images_dir"
	fresh "$images_dir"
	t=$SECONDS
	for img in pause sleeper; do
		ctx="$images_dir/ctx-$img"
		mkdir -p "$ctx"
		(cd "$here/images" && GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false -ldflags "-s -w" \
			-o "$ctx/$img" "./$img") || die "building the $img program failed"
		if [[ $img == pause ]]; then
			dockerfile pause 65535:65535 >"$ctx/Dockerfile"
			refs=("${pause_refs[@]}")
		else
			dockerfile sleeper 65532:65532 >"$ctx/Dockerfile"
			refs=("$sleeper_ref")
		fi
		tags=()
		for r in "${refs[@]}"; do tags+=(-t "$r"); done
		# The classic builder: it needs no BuildKit and pulls nothing for
		# FROM scratch.
		DOCKER_BUILDKIT=0 docker build -q "${tags[@]}" "$ctx" >/dev/null 2>"$ctx/docker.log" ||
			{
				cat "$ctx/docker.log" >&2
				die "docker build of $img failed"
			}
		docker save -o "$images_dir/$img.tar" "${refs[@]}" || die "docker save of ${refs[*]} failed"
		members="$(tar -tf "$images_dir/$img.tar")" || die "$img.tar is not a tar archive"
		grep -qx manifest.json <<<"$members" || die "$img.tar has no manifest.json"
		printf '%s\n' "${refs[@]}" >"$images_dir/$img.refs"
		rm -rf "$ctx"
	done
	say "built images ($((SECONDS - t))s)"
	printf 'images\nbuilt %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$images_dir/complete"
else
	say "images up to date ($images_key)"
fi

# -------------------------------------------------------------- node dir ----
node_key="${kube_version}-$(echo "$recipe_nodedir $bin_key $cni_key $sysext_key $images_key $(cat "$here/cni/10-anvil-bridge.conflist")" | key_of)"
node_dir="$cache_root/$node_key"
if [[ ! -f "$node_dir/complete" ]]; then
	fresh "$node_dir"
	mkdir -p "$node_dir/sysext" "$node_dir/images" "$node_dir/cni"
	for b in kubelet kubeadm kubectl; do ln -s "$bin_dir/$b" "$node_dir/$b"; done
	ln -s "$sysext_dir/$sysext_name" "$node_dir/sysext/$sysext_name"
	ln -s "$sysext_dir/$sysext_name.sha512" "$node_dir/sysext/$sysext_name.sha512"
	ln -s "$images_dir/pause.tar" "$node_dir/images/pause.tar"
	ln -s "$images_dir/sleeper.tar" "$node_dir/images/sleeper.tar"
	cp "$here/cni/10-anvil-bridge.conflist" "$node_dir/cni/"

	json_list() { # json_list ITEM... -> ["a","b"]
		local out="" x
		for x in "$@"; do out+="${out:+,}\"$x\""; done
		printf '[%s]' "$out"
	}
	size() { stat -L -c %s "$1"; }
	sha256() { sha256sum "$1" | awk '{ print $1 }'; }
	cat >"$node_dir/manifest.json" <<EOF
{
  "kubernetesVersion": "$kube_version",
  "arch": "$arch",
  "goarch": "$goarch",
  "binaries": {
    "kubelet": {"path": "kubelet", "size": $(size "$node_dir/kubelet")},
    "kubeadm": {"path": "kubeadm", "size": $(size "$node_dir/kubeadm")},
    "kubectl": {"path": "kubectl", "size": $(size "$node_dir/kubectl")}
  },
  "cni": {"version": "$cni_version", "plugins": $(json_list "${cni_plugins[@]}"), "sysextDir": "/usr/local/bin/cni", "exampleConfig": "cni/10-anvil-bridge.conflist"},
  "sysext": {
    "name": "$sysext_name",
    "path": "sysext/$sysext_name",
    "sha512Path": "sysext/$sysext_name.sha512",
    "sha512": "$(cat "$sysext_dir/$sysext_name.sha512")",
    "size": $(size "$node_dir/sysext/$sysext_name"),
    "extensionRelease": $(json_list $extension_release)
  },
  "images": {
    "pause": {"path": "images/pause.tar", "refs": $(json_list "${pause_refs[@]}"), "sha256": "$(sha256 "$node_dir/images/pause.tar")", "size": $(size "$node_dir/images/pause.tar")},
    "sleeper": {"path": "images/sleeper.tar", "refs": $(json_list "$sleeper_ref"), "sha256": "$(sha256 "$node_dir/images/sleeper.tar")", "size": $(size "$node_dir/images/sleeper.tar")}
  },
  "pauseImage": "$kubeadm_pause_ref",
  "sleeperImage": "$sleeper_ref"
}
EOF
	printf 'node dir %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$node_dir/complete"
fi

# Written through a temporary file so a reader never sees half a path.
printf '%s\n' "$node_dir" >"$cache_root/current.tmp.$$"
mv -f "$cache_root/current.tmp.$$" "$cache_root/current"

if $quiet; then
	echo "$node_dir"
else
	say "sizes:"
	for f in kubelet kubeadm kubectl "sysext/$sysext_name" images/pause.tar images/sleeper.tar; do
		say "$(printf '  %-40s %6s' "$f" "$(du -hL "$node_dir/$f" | cut -f1)")"
	done
	say "done in $((SECONDS - start))s; node dir $node_dir"
fi
