#!/usr/bin/env bash
# Builds the anvil test OS: a stand-in for Flatcar's PXE image, made of a
# Debian kernel, busybox, the real Ignition and the init in this folder
# (see README.md). The result is a directory holding
#
#   flatcar_production_pxe.vmlinuz        Debian's linux-image-6.1.*-amd64 kernel
#   flatcar_production_pxe_image.cpio.gz  the initramfs
#   manifest.json                         what went in: versions, sizes, sha256
#
# laid out like a Flatcar release, so a boot service can serve it from
# <assets>/flatcar/<channel>/<version>/.
#
# It lands in
#   ${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/testos/<kernel version>-<hash>/
# where <hash> covers the recipe below, the exact Debian package versions,
# the Ignition version, the Go version and this folder's sources, so a
# change to any of them gets its own directory. A stamp file is written
# last: an interrupted build is redone. The directory is written to
# .../testos/current. Ignition (a 3-minute cgo build) and the downloaded
# .deb files are cached separately under .../testos/ignition and
# .../testos/debs, so a kernel update does not rebuild Ignition.
#
# Missing Debian packages (gcc, libc6-dev, libblkid-dev) are installed
# when running as root; `apt-get update` runs when the package lists lack
# what is needed. Progress goes to stderr, with timings.
#
# Usage: bash tools/testos/build.sh [--variant default|kubernetes] [--print-dir]
#   --variant     default (this image) or kubernetes (this image plus a Debian
#                 root file system with systemd and containerd, which the init
#                 switch_roots into after Ignition; see rootfs/build.sh)
#   --print-dir   print only the result directory on stdout
#
# Environment:
#   ANVIL_CACHE_DIR               cache root (default $HOME/.cache/anvil)
#   ANVIL_TESTOS_KERNEL_PACKAGE   pin the kernel package, e.g. linux-image-6.1.0-56-amd64
#                                 (default: the 6.1 package linux-image-amd64 depends on)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

usage() {
	echo "usage: bash tools/testos/build.sh [--variant default|kubernetes] [--print-dir]" >&2
	exit 2
}
print_dir=false
variant=default
while (($#)); do
	case "$1" in
	--print-dir) print_dir=true ;;
	--variant)
		(($# > 1)) || usage
		variant=$2
		shift
		;;
	--variant=*) variant=${1#*=} ;;
	*) usage ;;
	esac
	shift
done
case "$variant" in
default) ;;
# The kubernetes variant adds a Debian root file system to this one; it
# has its own script, cache and current pointer (rootfs/build.sh), and
# runs this script for the kernel and initramfs.
kubernetes)
	if $print_dir; then
		exec bash "$here/rootfs/build.sh" --print-dir
	fi
	exec bash "$here/rootfs/build.sh"
	;;
*) usage ;;
esac

t0=$SECONDS
say() { echo "testos: $*" >&2; }
die() {
	echo "testos: error: $*" >&2
	exit 1
}
took() { echo "$((SECONDS - $1))s"; }

# Bump when the way the image is put together changes (layout, flags,
# module list), so that images built the old way are not reused.
recipe=1
ignition_module=github.com/coreos/ignition/v2
ignition_version=v2.27.0
# Ignition's link-time settings: SELinux relabelling off (there is no
# SELinux policy; with it on, the files stage fails), its version string,
# and a static link (no glibc in the initramfs).
ignition_ldflags="-s -w -linkmode external -extldflags -static -X ${ignition_module}/internal/distro.selinuxRelabel=false -X ${ignition_module}/internal/version.Raw=${ignition_version}"
# Kernel modules loaded at boot, in dependency order: virtio networking
# (the test VMs' NIC), virtio disks, and what phase 2's root file system
# needs (squashfs, loop, overlay). DMI (/sys/class/dmi/id, the machine
# UUID) and devtmpfs are built into Debian's kernel; the build checks
# every module's depends= against this order.
modules=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net virtio_blk squashfs loop overlay)

command -v go >/dev/null 2>&1 || die "the Go toolchain is not on PATH"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: the test OS is built from Debian packages (a Debian or Ubuntu host is needed)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"

hash_cmd() { sha256sum; }

cache_root="${ANVIL_CACHE_DIR:-$HOME/.cache/anvil}/testos"
mkdir -p "$cache_root/debs"

# Serialise concurrent builds (two test runs, say): the second one waits and
# then finds the stamp.
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
	say "another build holds $cache_root/.lock; waiting"
	flock 9
fi

# --- Debian packages -------------------------------------------------------

apt_updated=false
apt_update() {
	$apt_updated && return 0
	[[ "$(id -u)" == 0 ]] || die "the apt package lists lack what is needed and this is not root; run apt-get update as root"
	local t=$SECONDS
	say "apt-get update"
	apt-get update -qq >&2 || die "apt-get update failed"
	apt_updated=true
	say "apt-get update done ($(took $t))"
}

# candidates <package>...: prints "<package> <candidate version>" per package
# that apt can install (one apt-cache call: each takes about a second).
candidates() {
	apt-cache policy "$@" 2>/dev/null | awk '
		/^[^ ].*:$/ { pkg = substr($1, 1, length($1) - 1) }
		$1 == "Candidate:" && $2 != "(none)" { print pkg, $2 }'
}

ensure_installed() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	[[ "$(id -u)" == 0 ]] || die "missing Debian packages: ${missing[*]}; install them as root: apt-get install ${missing[*]}"
	local t=$SECONDS
	say "installing ${missing[*]} from Debian"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
		apt_update
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
			die "apt-get install ${missing[*]} failed"
	fi
	say "installed ${missing[*]} ($(took $t))"
}

resolve_kernel() {
	if [[ -n "${ANVIL_TESTOS_KERNEL_PACKAGE:-}" ]]; then
		echo "$ANVIL_TESTOS_KERNEL_PACKAGE"
		return
	fi
	local p
	p="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-6\.1\.[0-9.+~-]*-amd64$/ { print $2; exit }')"
	if [[ -z "$p" ]]; then
		# linux-image-amd64 may point at another series; take the newest 6.1.
		p="$(apt-cache search --names-only '^linux-image-6\.1\.[0-9.+~-]*-amd64$' 2>/dev/null | awk '{ print $1 }' | sort -V | tail -n 1)"
	fi
	echo "$p"
}

resolve_versions() {
	kernel_pkg="$(resolve_kernel)"
	kernel_ver="" busybox_ver=""
	[[ -n "$kernel_pkg" ]] || return 0
	local pkg ver
	while read -r pkg ver; do
		case "$pkg" in
		"$kernel_pkg") kernel_ver=$ver ;;
		busybox-static) busybox_ver=$ver ;;
		esac
	done < <(candidates "$kernel_pkg" busybox-static)
}
resolve_versions
if [[ -z "$kernel_ver" || -z "$busybox_ver" ]]; then
	apt_update
	resolve_versions
fi
[[ -n "$kernel_pkg" ]] || die "no linux-image-6.1.*-amd64 package in the apt sources (bookworm's main has one)"
[[ -n "$kernel_ver" ]] || die "apt has no candidate version of $kernel_pkg"
[[ -n "$busybox_ver" ]] || die "apt has no candidate version of busybox-static"
go_version="$(go env GOVERSION)"

ca_bundle=/etc/ssl/certs/ca-certificates.crt
ca_hash=none
[[ -r "$ca_bundle" ]] && ca_hash="$(hash_cmd <"$ca_bundle" | cut -c1-16)"

# --- the cache key ---------------------------------------------------------

sources=(build.sh go.mod image/udhcpc.script)
while IFS= read -r f; do sources+=("$f"); done < <(find cmd internal -name '*.go' ! -name '*_test.go' ! -path 'cmd/modclosure/*' | LC_ALL=C sort) # modclosure: kubernetes variant only
content_hash="$({
	echo "recipe $recipe"
	echo "kernel $kernel_pkg $kernel_ver"
	echo "busybox-static $busybox_ver"
	echo "ignition $ignition_version $ignition_ldflags"
	echo "modules ${modules[*]}"
	echo "go $go_version"
	echo "ca $ca_hash"
	cat "${sources[@]}"
} | hash_cmd | cut -c1-16)"
key="${kernel_ver}-${content_hash}"
out_dir="$cache_root/$key"
stamp="$out_dir/complete"
kernel_file=flatcar_production_pxe.vmlinuz
initrd_file=flatcar_production_pxe_image.cpio.gz

publish() {
	printf '%s\n' "$out_dir" >"$cache_root/current.tmp.$$"
	mv -f "$cache_root/current.tmp.$$" "$cache_root/current"
	if $print_dir; then
		echo "$out_dir"
	fi
	say "image in $out_dir ($(took $t0) in all)"
}

if [[ -f "$stamp" && -s "$out_dir/$kernel_file" && -s "$out_dir/$initrd_file" && -s "$out_dir/manifest.json" ]]; then
	say "up to date ($key: $kernel_pkg $kernel_ver, busybox-static $busybox_ver, Ignition $ignition_version)"
	publish
	exit 0
fi

say "building $key: $kernel_pkg $kernel_ver, busybox-static $busybox_ver, Ignition $ignition_version, $go_version"
rm -rf "$out_dir"
mkdir -p "$out_dir"
work="$out_dir/work"
mkdir -p "$work"

# download_deb <package> <version>: prints the path of the cached .deb.
download_deb() {
	local pkg=$1 ver=$2 t=$SECONDS
	local safe_ver=${ver//:/%3a}
	local deb="$cache_root/debs/${pkg}_${safe_ver}_amd64.deb"
	if [[ ! -s "$deb" ]]; then
		say "downloading $pkg $ver"
		local tmp
		tmp="$(mktemp -d "$cache_root/debs/.dl.XXXXXX")"
		# apt drops privileges to _apt for downloads; a root-only cache
		# directory makes it fall back to root with a warning, which is fine.
		(cd "$tmp" && apt-get download -qq "$pkg=$ver" >&2 2> >(grep -v 'unsandboxed' >&2)) || {
			rm -rf "$tmp"
			die "apt-get download $pkg=$ver failed"
		}
		mv "$tmp"/*.deb "$deb"
		rm -rf "$tmp"
		say "downloaded $pkg ($(du -h "$deb" | cut -f1), $(took $t))"
	fi
	echo "$deb"
}

# --- Ignition ----------------------------------------------------------------

ign_key="${ignition_version}-$({ echo "$ignition_ldflags"; echo "$go_version"; } | hash_cmd | cut -c1-12)"
ign_dir="$cache_root/ignition/$ign_key"
if [[ ! -f "$ign_dir/complete" || ! -x "$ign_dir/ignition" ]]; then
	ensure_installed gcc libc6-dev libblkid-dev
	t=$SECONDS
	say "building Ignition $ignition_version from the Go module proxy (cgo, static; about 3 minutes on 2 cores)"
	rm -rf "$ign_dir"
	mkdir -p "$ign_dir/mod"
	# A throw-away module: `go build <module>/internal` builds Ignition's
	# main package from the module cache, outside any workspace.
	printf 'module anvil-testos-ignition-build\n\ngo 1.24\n' >"$ign_dir/mod/go.mod"
	(
		cd "$ign_dir/mod"
		export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=1
		go get "${ignition_module}@${ignition_version}" >&2
		go build -trimpath -buildvcs=false -tags netgo,osusergo -ldflags "$ignition_ldflags" \
			-o "$ign_dir/ignition" "${ignition_module}/internal" 2> >(grep -v -e 'statically linked applications requires at runtime' -e 'in function' -e '^# github.com/coreos/ignition' >&2)
	) || die "building Ignition failed (it needs gcc, libc6-dev and libblkid-dev, which has libblkid.a)"
	if readelf -l "$ign_dir/ignition" 2>/dev/null | grep -q 'Requesting program interpreter'; then
		die "Ignition was linked dynamically; the image carries no glibc (is libblkid.a missing?)"
	fi
	"$ign_dir/ignition" -version >&2 || die "the Ignition binary does not run"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t))s with $go_version" >"$ign_dir/complete"
	say "built Ignition ($(du -h "$ign_dir/ignition" | cut -f1), $(took $t))"
else
	say "Ignition $ignition_version from the cache ($ign_dir)"
fi

# --- kernel and busybox ----------------------------------------------------------

t=$SECONDS
kernel_deb="$(download_deb "$kernel_pkg" "$kernel_ver")"
busybox_deb="$(download_deb busybox-static "$busybox_ver")"
dpkg-deb -x "$kernel_deb" "$work/kernel"
dpkg-deb -x "$busybox_deb" "$work/busybox"
say "extracted the packages ($(took $t))"

moddir="$(find "$work/kernel" -mindepth 3 -maxdepth 4 -type d -path '*/lib/modules/*' -prune | head -n 1)"
[[ -n "$moddir" ]] || die "$kernel_pkg has no lib/modules/<release> directory"
release="$(basename "$moddir")"
vmlinuz="$work/kernel/boot/vmlinuz-$release"
[[ -s "$vmlinuz" ]] || die "$kernel_pkg has no boot/vmlinuz-$release"
busybox="$work/busybox/bin/busybox"
[[ -x "$busybox" ]] || die "busybox-static has no bin/busybox"

# --- the initramfs tree ----------------------------------------------------------

t=$SECONDS
root="$work/root"
mkdir -p "$root"/{dev,proc,sys,run,sysroot,etc/ssl/certs,root,usr/bin,usr/sbin,usr/lib/anvil-testos,usr/share/anvil-testos}
install -d -m 1777 "$root/tmp"
chmod 0700 "$root/root"
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib "$root/lib64"

# The init and its commands: one static Go binary under several names.
(
	export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly
	go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$root/usr/lib/anvil-testos/anvil-testos" ./cmd/anvil-testos
	go build -trimpath -buildvcs=false -o "$work/mkinitramfs" ./cmd/mkinitramfs
) || die "building the init failed"
ln -s usr/lib/anvil-testos/anvil-testos "$root/init"
for n in systemctl journalctl ignition-kargs-helper; do
	ln -s ../lib/anvil-testos/anvil-testos "$root/usr/bin/$n"
done
for n in useradd usermod userdel groupadd groupmod groupdel; do
	ln -s ../lib/anvil-testos/anvil-testos "$root/usr/sbin/$n"
done

install -m 0755 "$ign_dir/ignition" "$root/usr/bin/ignition"
install -m 0755 "$busybox" "$root/usr/bin/busybox"
applets=0
for a in $("$busybox" --list); do
	case "$a" in
	busybox | init | linuxrc) continue ;; # /init is ours
	esac
	[[ -e "$root/usr/bin/$a" || -L "$root/usr/bin/$a" || -e "$root/usr/sbin/$a" ]] && continue
	ln -s busybox "$root/usr/bin/$a"
	applets=$((applets + 1))
done
install -m 0755 image/udhcpc.script "$root/usr/lib/anvil-testos/udhcpc.script"

# Modules: uncompressed (the init loads them with init_module(2)), in the
# order above, each one's dependencies checked.
builtin="$moddir/modules.builtin"
: >"$root/usr/lib/anvil-testos/modules"
declare -A have=()
loaded=()
for m in "${modules[@]}"; do
	f="$(find "$moddir/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n 1)"
	if [[ -z "$f" ]]; then
		if grep -q "/$m\.ko\$" "$builtin" 2>/dev/null; then
			say "module $m is built into $release"
			have[$m]=1
			continue
		fi
		die "module $m is neither in $kernel_pkg nor built into its kernel"
	fi
	rel="${f#"$moddir/"}"
	rel="${rel%.xz}"
	rel="${rel%.zst}"
	mkdir -p "$root/usr/lib/modules/$release/$(dirname "$rel")"
	case "$f" in
	*.xz) command -v xz >/dev/null 2>&1 || ensure_installed xz-utils ;;
	*.zst) command -v zstd >/dev/null 2>&1 || ensure_installed zstd ;;
	esac
	case "$f" in
	*.xz) xz -dc "$f" >"$root/usr/lib/modules/$release/$rel" ;;
	*.zst) zstd -qdc "$f" >"$root/usr/lib/modules/$release/$rel" ;;
	*) cp "$f" "$root/usr/lib/modules/$release/$rel" ;;
	esac
	deps="$(tr '\0' '\n' <"$root/usr/lib/modules/$release/$rel" | sed -n 's/^depends=//p' | head -n 1)"
	for d in ${deps//,/ }; do
		if [[ -z "${have[$d]:-}" ]] && ! grep -q "/$d\.ko\$" "$builtin" 2>/dev/null; then
			die "module $m depends on $d, which is not loaded before it; fix the modules list in build.sh"
		fi
	done
	have[$m]=1
	loaded+=("$m")
	echo "$rel" >>"$root/usr/lib/anvil-testos/modules"
done

cat >"$root/usr/lib/os-release" <<EOF
NAME="anvil test OS"
ID=anvil-testos
ID_LIKE=flatcar
VERSION_ID=$recipe
BUILD_ID=$key
PRETTY_NAME="anvil test OS (a Flatcar PXE stand-in, Linux $release)"
HOME_URL="https://github.com/anvil-fleet/anvil/tree/main/tools/testos"
EOF
ln -s ../usr/lib/os-release "$root/etc/os-release"
ln -s ../run/anvil-testos/resolv.conf "$root/etc/resolv.conf"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$root/etc/hosts"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
if [[ -r "$ca_bundle" ]]; then
	install -m 0644 "$ca_bundle" "$root/usr/share/anvil-testos/ca-certificates.crt"
	ln -s ../../../usr/share/anvil-testos/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
say "laid out the initramfs: ${#loaded[@]} modules, $applets busybox applets ($(took $t))"

t=$SECONDS
"$work/mkinitramfs" -root "$root" -mtime "${SOURCE_DATE_EPOCH:-0}" >"$work/initrd.cpio"
gzip -9 -n -c "$work/initrd.cpio" >"$out_dir/$initrd_file.tmp"
mv "$out_dir/$initrd_file.tmp" "$out_dir/$initrd_file"
install -m 0644 "$vmlinuz" "$out_dir/$kernel_file"
say "packed the initramfs ($(took $t))"

size() { stat -c %s "$1"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
json_list() {
	local first=true s
	printf '['
	for s in "$@"; do
		$first || printf ', '
		first=false
		printf '"%s"' "$s"
	done
	printf ']'
}
cat >"$out_dir/manifest.json" <<EOF
{
  "name": "anvil test OS",
  "recipe": $recipe,
  "key": "$key",
  "kernel": {"package": "$kernel_pkg", "version": "$kernel_ver", "release": "$release"},
  "modules": $(json_list "${loaded[@]}"),
  "busybox": {"package": "busybox-static", "version": "$busybox_ver"},
  "ignition": {"module": "$ignition_module", "version": "$ignition_version", "static": true, "go": "$go_version", "size_bytes": $(size "$ign_dir/ignition")},
  "init": {"size_bytes": $(size "$root/usr/lib/anvil-testos/anvil-testos")},
  "files": {
    "$kernel_file": {"size_bytes": $(size "$out_dir/$kernel_file"), "sha256": "$(sha "$out_dir/$kernel_file")"},
    "$initrd_file": {"size_bytes": $(size "$out_dir/$initrd_file"), "uncompressed_bytes": $(size "$work/initrd.cpio"), "sha256": "$(sha "$out_dir/$initrd_file")"}
  },
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "build_seconds": $((SECONDS - t0))
}
EOF

rm -rf "$work"
echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t0))s" >"$stamp"
say "kernel $(du -h "$out_dir/$kernel_file" | cut -f1), initramfs $(du -h "$out_dir/$initrd_file" | cut -f1) gzipped"
publish
