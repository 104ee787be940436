#!/usr/bin/env bash
# Builds the kubernetes variant of the anvil test OS (see ../README.md,
# "The kubernetes variant"): the default variant's kernel and initramfs,
# plus a Debian bookworm root file system (debootstrap, systemd,
# containerd, ...) packed as a squashfs, into which the init switch_roots
# after Ignition. The result directory holds
#
#   flatcar_production_pxe.vmlinuz        the default variant's kernel, unchanged
#   flatcar_production_pxe_image.cpio.gz  the default variant's gzipped initramfs,
#                                         followed by an uncompressed cpio archive
#                                         holding usr/lib/anvil-testos/rootfs.squashfs
#                                         (as Flatcar's PXE image carries usr.squashfs)
#   manifest.json                         what went in: packages, modules, images, sizes
#
# Run it as `bash tools/testos/build.sh --variant kubernetes [--print-dir]`.
# It needs root (debootstrap, chroot, mount) and debootstrap and
# squashfs-tools, which it installs when missing.
#
# Cache, under ${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/testos/, each with a
# stamp file written last and keyed by a hash of its inputs:
#   rootfs/<key>/root        debootstrap's tree (the slow part): keyed by the
#                            package list, the bookworm versions of those
#                            packages as apt sees them, the mirror and the recipe
#   kubernetes/<key>/        the image: keyed by the rootfs key, the default
#                            variant's key (kernel, init, Ignition), the files
#                            and customisation here, and the container images'
#                            and CNI config's hashes
#   kubernetes/current       the last good image directory
#   debs/debootstrap/        the .deb files debootstrap downloaded
#
# Environment:
#   ANVIL_CACHE_DIR               cache root (default $HOME/.cache/anvil)
#   ANVIL_TESTOS_DEBIAN_MIRROR    Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   ANVIL_TESTOS_KUBE_NODE_DIR    the Kubernetes node artifacts (tools/kubebins/node/build.sh's
#                                 directory; default: the one <cache>/kube-node/current names,
#                                 built with that script when there is none)
#   ANVIL_TESTOS_SQUASHFS_COMP    mksquashfs compressor (default zstd)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
testos="$(dirname "$here")"
repo="$(cd "$testos/../.." && pwd)"

print_dir=false
for a in "$@"; do
	case "$a" in
	--print-dir) print_dir=true ;;
	*)
		echo "usage: bash tools/testos/build.sh --variant kubernetes [--print-dir]" >&2
		exit 2
		;;
	esac
done

t0=$SECONDS
say() { echo "testos[kubernetes]: $*" >&2; }
die() {
	echo "testos[kubernetes]: error: $*" >&2
	exit 1
}
took() { echo "$((SECONDS - $1))s"; }
hash_cmd() { sha256sum; }

# Bump when the way the root file system or the image is put together
# changes, so that old builds are not reused.
rootfs_recipe=1 # debootstrap's invocation
image_recipe=1  # the customisation below, the module selection, the packing
suite=bookworm
mirror="${ANVIL_TESTOS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
comp="${ANVIL_TESTOS_SQUASHFS_COMP:-zstd}"

# Kernel modules for the root file system (all from the kernel package the
# image boots, plus whatever they depend on): Kubernetes networking
# (bridge, br_netfilter, veth, overlay, conntrack, iptables and nftables,
# xt_*, IPVS, tunnels for CNI plugins), file systems a node mounts, and the
# initramfs's own modules, so that modprobe and depmod know them.
module_dirs=(
	kernel/net/bridge kernel/net/netfilter kernel/net/ipv4/netfilter kernel/net/ipv6/netfilter
	kernel/net/sched kernel/net/802 kernel/net/llc kernel/net/8021q kernel/net/ipv4 kernel/net/ipv6
	kernel/drivers/net/vxlan kernel/drivers/net/ipvlan kernel/drivers/net/bonding kernel/drivers/net/wireguard
	kernel/drivers/virtio kernel/fs/overlayfs kernel/fs/squashfs kernel/fs/fuse kernel/fs/ext4 kernel/fs/xfs
)
module_files=(
	kernel/drivers/net/veth.ko kernel/drivers/net/dummy.ko kernel/drivers/net/macvlan.ko kernel/drivers/net/geneve.ko
	kernel/drivers/net/tun.ko kernel/drivers/net/ifb.ko kernel/drivers/net/vrf.ko kernel/drivers/net/virtio_net.ko
	kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/block/loop.ko kernel/drivers/block/virtio_blk.ko
)

[[ "$(id -u)" == 0 ]] || die "the kubernetes variant needs root: debootstrap, chroot and mount (run as root, as CI does)"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: the root file system is built from Debian packages (a Debian host is needed)"

ensure_installed() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	local t=$SECONDS
	say "installing ${missing[*]} from Debian"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
		apt-get update -qq >&2 || die "apt-get update failed"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
			die "apt-get install ${missing[*]} failed"
	fi
	say "installed ${missing[*]} ($(took $t))"
}
ensure_installed debootstrap squashfs-tools

cache_root="${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/testos"
mkdir -p "$cache_root/kubernetes" "$cache_root/rootfs" "$cache_root/debs/debootstrap"

# --- the default variant: kernel, initramfs (init, Ignition, busybox) ---------

base_dir="$(bash "$testos/build.sh" --print-dir)" || die "building the default variant failed (its output is above)"
[[ -s "$base_dir/manifest.json" ]] || die "$base_dir/manifest.json is missing"
base_key="$(sed -n 's/^  "key": "\(.*\)",$/\1/p' "$base_dir/manifest.json")"
kernel_pkg="$(sed -n 's/^  "kernel": {"package": "\([^"]*\)", "version": "\([^"]*\)", "release": "\([^"]*\)"}.*/\1/p' "$base_dir/manifest.json")"
kernel_ver="$(sed -n 's/^  "kernel": {"package": "\([^"]*\)", "version": "\([^"]*\)", "release": "\([^"]*\)"}.*/\2/p' "$base_dir/manifest.json")"
release="$(sed -n 's/^  "kernel": {"package": "\([^"]*\)", "version": "\([^"]*\)", "release": "\([^"]*\)"}.*/\3/p' "$base_dir/manifest.json")"
[[ -n "$base_key" && -n "$kernel_pkg" && -n "$kernel_ver" && -n "$release" ]] ||
	die "cannot read the key and kernel from $base_dir/manifest.json (did its format change?)"
kernel_deb="$cache_root/debs/${kernel_pkg}_${kernel_ver//:/%3a}_amd64.deb"
[[ -s "$kernel_deb" ]] || die "the kernel package $kernel_deb is not in the cache (the default variant's build downloads it)"

# --- the Kubernetes node artifacts: container images, CNI config ---------------

node_dir="${ANVIL_TESTOS_KUBE_NODE_DIR:-}"
if [[ -z "$node_dir" ]]; then
	current="${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/kube-node/current"
	if [[ -s "$current" && -s "$(cat "$current")/manifest.json" ]]; then
		node_dir="$(cat "$current")"
	else
		say "no Kubernetes node artifacts yet ($current): building them with tools/kubebins/node/build.sh"
		node_dir="$(bash "$repo/tools/kubebins/node/build.sh" --print-dir)" || die "tools/kubebins/node/build.sh failed"
	fi
fi
images=()
for name in pause sleeper; do
	f="$node_dir/images/$name.tar"
	[[ -s "$f" ]] || die "$f is missing (set ANVIL_TESTOS_KUBE_NODE_DIR to a tools/kubebins/node/build.sh output)"
	images+=("$f")
done
cni_conf="$node_dir/cni/10-anvil-bridge.conflist"
[[ -s "$cni_conf" ]] || die "$cni_conf is missing (set ANVIL_TESTOS_KUBE_NODE_DIR to a tools/kubebins/node/build.sh output)"

exec 9>"$cache_root/kubernetes/.lock"
if ! flock -n 9; then
	say "another build holds $cache_root/kubernetes/.lock; waiting"
	flock 9
fi

# --- the root file system's cache key -------------------------------------------

mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages" | grep -v '^$')
((${#packages[@]} > 0)) || die "$here/packages lists no package"

# suite_versions: "<package> <version>" of each listed package in the
# suite itself (not -updates or -security: debootstrap installs from the
# suite alone), from apt's lists on this host.
suite_versions() {
	apt-cache madison "${packages[@]}" 2>/dev/null | awk -F'|' -v suite="$suite/main" '
		{ gsub(/ /, "", $1); gsub(/ /, "", $2) }
		index($3, " " suite " ") && !seen[$1]++ { print $1, $2 }' | LC_ALL=C sort
}
versions="$(suite_versions)"
if (($(wc -l <<<"$versions") < ${#packages[@]})); then
	say "apt's lists lack some of the packages in $suite/main; apt-get update"
	apt-get update -qq >&2 || die "apt-get update failed"
	versions="$(suite_versions)"
fi
for p in "${packages[@]}"; do
	grep -q "^$p " <<<"$versions" || die "package $p is not in Debian $suite/main (as apt sees it after apt-get update); fix $here/packages"
done
rootfs_key="$suite-$({
	echo "recipe $rootfs_recipe"
	echo "mirror $mirror"
	echo "$versions"
} | hash_cmd | cut -c1-16)"
rootfs_dir="$cache_root/rootfs/$rootfs_key"

# --- the image's cache key ----------------------------------------------------------

image_hash="$({
	echo "recipe $image_recipe"
	echo "rootfs $rootfs_key"
	echo "base $base_key"
	echo "kernel $kernel_pkg $kernel_ver $release"
	echo "modules ${module_dirs[*]} ${module_files[*]}"
	echo "comp $comp"
	sha256sum "${images[@]}" "$cni_conf" | cut -d' ' -f1
	cat "$here/build.sh" "$testos/cmd/modclosure/main.go"
	(cd "$here/files" && find . -type f -o -type l | LC_ALL=C sort | while read -r f; do
		echo "$f $(stat -c %a "$f")"
		cat "$f"
	done)
} | hash_cmd | cut -c1-16)"
key="${kernel_ver}-${image_hash}"
out_dir="$cache_root/kubernetes/$key"
stamp="$out_dir/complete"
kernel_file=flatcar_production_pxe.vmlinuz
initrd_file=flatcar_production_pxe_image.cpio.gz

publish() {
	printf '%s\n' "$out_dir" >"$cache_root/kubernetes/current.tmp.$$"
	mv -f "$cache_root/kubernetes/current.tmp.$$" "$cache_root/kubernetes/current"
	if $print_dir; then
		echo "$out_dir"
	fi
	say "image in $out_dir ($(took $t0) in all)"
}

if [[ -f "$stamp" && -s "$out_dir/$kernel_file" && -s "$out_dir/$initrd_file" && -s "$out_dir/manifest.json" ]]; then
	say "up to date ($key: root file system $rootfs_key, default variant $base_key)"
	publish
	exit 0
fi

# unmount_under <dir>: unmounts everything mounted at or below dir
# (debootstrap mounts /proc and /sys in its target; a failed build must
# not leave them behind, and rm -rf must never descend into them).
unmount_under() {
	local d
	d="$(realpath -m "$1")"
	awk -v d="$d" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | LC_ALL=C sort -r |
		while read -r m; do umount -l "$m" || true; done
}
safe_rm() {
	unmount_under "$1"
	if awk -v d="$(realpath -m "$1")" '$2 == d || index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
		die "something is still mounted below $1; not removing it"
	fi
	rm -rf "$1"
}

# --- debootstrap (cached) --------------------------------------------------------------

if [[ -f "$rootfs_dir/complete" && -x "$rootfs_dir/root/usr/lib/systemd/systemd" ]]; then
	say "root file system $rootfs_key from the cache"
else
	t=$SECONDS
	say "debootstrap $suite (minbase + ${#packages[@]} packages) from $mirror into $rootfs_dir (a few minutes)"
	safe_rm "$rootfs_dir"
	mkdir -p "$rootfs_dir"
	trap 'unmount_under "$rootfs_dir"' EXIT
	if ! debootstrap --variant=minbase --merged-usr --components=main --include="$(
		IFS=,
		echo "${packages[*]}"
	)" --cache-dir="$cache_root/debs/debootstrap" "$suite" "$rootfs_dir/root" "$mirror" >"$rootfs_dir/debootstrap.log" 2>&1; then
		tail -n 30 "$rootfs_dir/debootstrap.log" >&2
		unmount_under "$rootfs_dir"
		die "debootstrap failed; its log is $rootfs_dir/debootstrap.log (the last lines are above)"
	fi
	unmount_under "$rootfs_dir"
	trap - EXIT
	chroot "$rootfs_dir/root" dpkg-query -W -f='${Package} ${Version}\n' | LC_ALL=C sort >"$rootfs_dir/packages.txt"
	# debootstrap installs from the mirror's suite, apt's view here may be
	# older: say so when they disagree (the key is apt's view).
	while read -r p v; do
		got="$(awk -v p="$p" '$1 == p { print $2 }' "$rootfs_dir/packages.txt")"
		[[ "$got" == "$v" ]] || say "note: $p is $got in the root file system but $v in apt's lists here (apt-get update to key the cache right)"
	done <<<"$versions"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t))s" >"$rootfs_dir/complete"
	say "debootstrap done: $(wc -l <"$rootfs_dir/packages.txt") packages, $(du -sh --exclude=proc --exclude=sys "$rootfs_dir/root" | cut -f1) ($(took $t))"
fi

# --- the image ---------------------------------------------------------------------

say "building $key: root file system $rootfs_key, default variant $base_key, $kernel_pkg $kernel_ver"
safe_rm "$out_dir"
mkdir -p "$out_dir"
work="$out_dir/work"
stage="$work/root"
mkdir -p "$stage"
trap 'unmount_under "$out_dir"' EXIT

t=$SECONDS
cp -a "$rootfs_dir/root/." "$stage/"
say "copied the root file system ($(took $t))"

t=$SECONDS
# Host files debootstrap copies in, and state a first boot must create.
rm -f "$stage/etc/hostname" "$stage/etc/machine-id" "$stage/var/lib/dbus/machine-id" "$stage/etc/resolv.conf"
rm -rf "$stage/var/lib/apt/lists/"* "$stage/var/cache/apt/"* "$stage/var/cache/debconf/"*-old \
	"$stage/var/log/"* "$stage/run/"* "$stage/tmp/"* \
	"$stage/usr/share/doc" "$stage/usr/share/man" "$stage/usr/share/info" "$stage/usr/share/lintian" "$stage/usr/share/locale"
# Leaner: udev's hardware database (device descriptions, not needed to
# name or drive a VM's devices) and containerd's deprecated v1 shims
# (anvil's config uses io.containerd.runc.v2).
rm -rf "$stage/usr/lib/udev/hwdb.bin" "$stage/usr/lib/udev/hwdb.d" \
	"$stage/usr/bin/containerd-shim" "$stage/usr/bin/containerd-shim-runc-v1"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$stage/etc/hosts"
# As on Flatcar, systemd-resolved owns /etc/resolv.conf.
ln -s ../run/systemd/resolve/resolv.conf "$stage/etc/resolv.conf"

# Flatcar's /etc starts empty of enablement links: what runs is either
# enabled in /usr (the base OS) or by a preset on the first boot (what
# Ignition asked for). Debian's postinst scripts enabled units in /etc;
# drop those, and enable the base services in /usr below.
removed_links=()
while IFS= read -r l; do
	removed_links+=("${l#"$stage"}")
	rm -f "$l"
done < <(find "$stage/etc/systemd/system" -mindepth 2 -type l -path '*.wants/*' | LC_ALL=C sort)
find "$stage/etc/systemd/system" -mindepth 1 -type d -empty -delete

cp -a "$here/files/." "$stage/"
wants() { # wants <target> <unit>...: enable units in /usr, as Flatcar's base image does
	local target=$1 u
	shift
	mkdir -p "$stage/usr/lib/systemd/system/$target.wants"
	for u in "$@"; do
		[[ -e "$stage/usr/lib/systemd/system/$u" ]] || die "cannot enable $u: no /usr/lib/systemd/system/$u in the root file system"
		ln -sfn "../$u" "$stage/usr/lib/systemd/system/$target.wants/$u"
	done
}
wants sysinit.target systemd-sysext.service ensure-sysext.service anvil-testos-initrd-log.service
wants multi-user.target systemd-networkd.service systemd-resolved.service
wants network-online.target systemd-networkd-wait-online.service
wants sockets.target systemd-networkd.socket
wants containerd.service anvil-testos-import-images.service
ln -sfn multi-user.target "$stage/usr/lib/systemd/system/default.target"

# Flatcar's core user (uid 500) in the groups Flatcar puts it in.
chroot "$stage" groupadd --system wheel
chroot "$stage" groupadd --system docker
chroot "$stage" groupadd --gid 500 core
chroot "$stage" useradd --key UID_MIN=500 --uid 500 --gid 500 --groups sudo,wheel,docker,systemd-journal \
	--create-home --home-dir /home/core --shell /bin/bash --comment "Flatcar Admin" core

cat >"$stage/usr/lib/os-release" <<EOF
NAME="anvil test OS"
ID=anvil-testos
ID_LIKE="flatcar debian"
VERSION_ID=$image_recipe
VERSION_CODENAME=$suite
SYSEXT_LEVEL=1.0
BUILD_ID=$key
PRETTY_NAME="anvil test OS, kubernetes variant (a Flatcar stand-in on Debian $suite, Linux $release)"
HOME_URL="https://github.com/anvil-fleet/anvil/tree/main/tools/testos"
EOF
ln -sfn ../usr/lib/os-release "$stage/etc/os-release"

# The container images (no registry) and the node's CNI config (on a real
# cluster the CNI DaemonSet writes one).
install -d "$stage/usr/lib/anvil-testos/images" "$stage/etc/cni/net.d"
for f in "${images[@]}"; do
	install -m 0644 "$f" "$stage/usr/lib/anvil-testos/images/$(basename "$f")"
done
install -m 0644 "$cni_conf" "$stage/etc/cni/net.d/$(basename "$cni_conf")"
say "customised the root file system (removed ${#removed_links[@]} enablement links from /etc) ($(took $t))"

# Kernel modules from the same kernel package the image boots, with what
# they depend on, then depmod. Also the kernel's config, which kubeadm's
# preflight (SystemVerification) reads from /usr/lib/modules/<release>/config.
t=$SECONDS
kernel_tree="$work/kernel"
dpkg-deb -x "$kernel_deb" "$kernel_tree"
src="$kernel_tree/lib/modules/$release"
[[ -d "$src/kernel" ]] || die "$kernel_deb has no lib/modules/$release/kernel"
(cd "$testos" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false -o "$work/modclosure" ./cmd/modclosure) ||
	die "building modclosure failed"
for d in "${module_dirs[@]}" "${module_files[@]}"; do
	[[ -e "$src/$d" ]] || die "$kernel_pkg has no $d; fix module_dirs or module_files in $here/build.sh"
done
"$work/modclosure" -dir "$src" "${module_dirs[@]}" "${module_files[@]}" >"$work/modules.txt" ||
	die "selecting the kernel modules failed"
mapfile -t selected <"$work/modules.txt"
((${#selected[@]} > 0)) || die "no kernel modules selected"
dst="$stage/usr/lib/modules/$release"
mkdir -p "$dst"
(cd "$src" && cp --parents "${selected[@]}" "$dst/") || die "copying the kernel modules failed"
for f in modules.builtin modules.builtin.modinfo modules.order; do
	[[ -f "$src/$f" ]] && install -m 0644 "$src/$f" "$dst/$f"
done
install -m 0644 "$kernel_tree/boot/config-$release" "$dst/config"
chroot "$stage" depmod -a "$release" || die "depmod in the root file system failed"
say "added ${#selected[@]} kernel modules of $release and ran depmod ($(du -sh "$dst" | cut -f1), $(took $t))"

chroot "$stage" dpkg-query -W -f='${Package} ${Version}\n' | LC_ALL=C sort >"$work/packages.txt"
unmount_under "$stage"

t=$SECONDS
mkdir -p "$work/sq/usr/lib/anvil-testos"
squashfs="$work/sq/usr/lib/anvil-testos/rootfs.squashfs"
mksquashfs "$stage" "$squashfs" -comp "$comp" -noappend -no-progress -quiet -all-time 0 -mkfs-time 0 \
	-processors "$(nproc)" >&2 || die "mksquashfs failed"
say "packed the root file system: $(du -h "$squashfs" | cut -f1) $comp squashfs of $(du -sh --exclude=proc --exclude=sys "$stage" | cut -f1) ($(took $t))"

# The initramfs: the default variant's gzipped archive, zero-padded to a
# multiple of 4 bytes (the kernel looks for the next archive's header on a
# 4-byte boundary and skips zeros), then an uncompressed archive with the
# squashfs (already compressed; gzip would only cost time at boot).
t=$SECONDS
(cd "$testos" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false -o "$work/mkinitramfs" ./cmd/mkinitramfs) ||
	die "building mkinitramfs failed"
"$work/mkinitramfs" -append -root "$work/sq" -mtime "${SOURCE_DATE_EPOCH:-0}" >"$work/rootfs.cpio" || die "writing the rootfs cpio failed"
base_initrd="$base_dir/$initrd_file"
{
	cat "$base_initrd"
	pad=$(((4 - $(stat -c %s "$base_initrd") % 4) % 4))
	head -c "$pad" /dev/zero
	cat "$work/rootfs.cpio"
} >"$out_dir/$initrd_file.tmp"
mv "$out_dir/$initrd_file.tmp" "$out_dir/$initrd_file"
install -m 0644 "$base_dir/$kernel_file" "$out_dir/$kernel_file"
say "wrote the initramfs ($(took $t))"

size() { stat -c %s "$1"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
json_lines() { # json_lines <file>: its lines as a JSON array of strings
	awk 'BEGIN { printf "[" } { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "%s\"%s\"", (NR > 1 ? ", " : ""), $0 } END { printf "]" }' "$1"
}
printf '%s\n' "${removed_links[@]}" >"$work/removed-links.txt"
{
	for f in "${images[@]}"; do echo "$(basename "$f") $(sha "$f")"; done
} >"$work/images.txt"
cat >"$out_dir/manifest.json" <<EOF
{
  "name": "anvil test OS, kubernetes variant",
  "recipe": $image_recipe,
  "key": "$key",
  "base": {"key": "$base_key", "dir": "$base_dir"},
  "kernel": {"package": "$kernel_pkg", "version": "$kernel_ver", "release": "$release"},
  "rootfs": {
    "key": "$rootfs_key",
    "suite": "$suite",
    "mirror": "$mirror",
    "packages_listed": $(printf '%s\n' "${packages[@]}" >"$work/listed.txt" && json_lines "$work/listed.txt"),
    "packages": $(json_lines "$work/packages.txt"),
    "modules": ${#selected[@]},
    "removed_enablement_links": $(json_lines "$work/removed-links.txt"),
    "images": $(json_lines "$work/images.txt"),
    "cni_config": "/etc/cni/net.d/$(basename "$cni_conf")",
    "squashfs": {"compression": "$comp", "size_bytes": $(size "$squashfs"), "sha256": "$(sha "$squashfs")"}
  },
  "node_artifacts": "$node_dir",
  "files": {
    "$kernel_file": {"size_bytes": $(size "$out_dir/$kernel_file"), "sha256": "$(sha "$out_dir/$kernel_file")"},
    "$initrd_file": {"size_bytes": $(size "$out_dir/$initrd_file"), "initramfs_part_bytes": $(size "$base_initrd"), "rootfs_part_bytes": $(size "$work/rootfs.cpio"), "sha256": "$(sha "$out_dir/$initrd_file")"}
  },
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "build_seconds": $((SECONDS - t0))
}
EOF

summary="kernel $(du -h "$out_dir/$kernel_file" | cut -f1), initramfs $(du -h "$out_dir/$initrd_file" | cut -f1) ($(du -h "$base_initrd" | cut -f1) gzipped initramfs + $(du -h "$squashfs" | cut -f1) root file system)"
safe_rm "$work"
trap - EXIT
echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t0))s" >"$stamp"
say "$summary"
publish
