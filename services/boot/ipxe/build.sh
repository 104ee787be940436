#!/usr/bin/env bash
# Build a bootable iPXE artifact that chains to anvil's boot service, from
# the iPXE binaries Debian ships (apt-get install ipxe). See docs/boot.md.
#
#   services/boot/ipxe/build.sh --url 'http://boot.example:8081/boot.ipxe?token=anvil_enroll_…' [--out DIR]
#
# It writes into DIR (default ./ipxe-out):
#   anvil.ipxe      the embedded script: DHCP, chain to the URL, retry forever
#   ipxe.lkrn       Debian's iPXE as a Linux kernel image (BIOS); boot it with
#                   anvil.ipxe as its initrd (GRUB, syslinux, QEMU -kernel/-initrd)
#   ipxe.efi        Debian's iPXE for UEFI, to chainload from DHCP (see docs/boot.md)
#   grub.cfg        a GRUB menu entry that boots ipxe.lkrn with anvil.ipxe
#   anvil-ipxe.iso  a BIOS-bootable ISO (also for USB sticks), when grub-mkrescue,
#                   xorriso and mtools are installed (grub-pc-bin xorriso mtools)
#   run-qemu.sh     boots ipxe.lkrn with anvil.ipxe in QEMU, to try it
#
# Debian's prebuilt iPXE cannot take an embedded script (that needs a build from
# source: make bin/ipxe.lkrn EMBED=anvil.ipxe), but ipxe.lkrn runs an initrd that
# is an iPXE script, which is what this uses.
set -euo pipefail

url=""
out="./ipxe-out"
ipxe_dir="${IPXE_DIR:-/usr/lib/ipxe}"

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [[ $# -gt 0 ]]; do
	case "$1" in
	--url) url="${2:-}"; shift 2 ;;
	--out) out="${2:-}"; shift 2 ;;
	-h | --help) usage 0 ;;
	*) echo "build.sh: unknown argument $1" >&2; usage 2 ;;
	esac
done

if [[ -z "$url" ]]; then
	echo "build.sh: --url is required: the chain URL, http(s)://<boot service>/boot.ipxe?token=<enrollment token>" >&2
	exit 2
fi
# The URL goes into an iPXE script verbatim: refuse anything iPXE would
# interpret (${...} settings, spaces, quotes, command separators).
url_re='^https?://[][A-Za-z0-9.:-]+(/[A-Za-z0-9._~:/?=&%+,@-]*)?$'
if [[ ! "$url" =~ $url_re ]] || [[ "$url" == *"&&"* ]]; then
	echo "build.sh: --url must be an http(s) URL without spaces, quotes, '\$', braces, '#' or '|'" >&2
	exit 2
fi
if [[ "$url" != *"/boot.ipxe?token="* ]]; then
	echo "build.sh: warning: --url does not look like a chain URL (…/boot.ipxe?token=<enrollment token>)" >&2
fi
if [[ "$url" == https://* ]]; then
	echo "build.sh: warning: Debian's iPXE build may lack HTTPS support; the boot service's chain URL is plain HTTP (docs/boot.md)" >&2
fi

lkrn=""
for f in "$ipxe_dir/ipxe.lkrn" /boot/ipxe.lkrn; do
	[[ -f "$f" ]] && { lkrn="$f"; break; }
done
if [[ -z "$lkrn" ]]; then
	echo "build.sh: no ipxe.lkrn found in $ipxe_dir or /boot; install Debian's ipxe package (apt-get install ipxe) or set IPXE_DIR" >&2
	exit 1
fi

mkdir -p "$out"
host="${url#*://}"
host="${host%%/*}"
cat >"$out/anvil.ipxe" <<EOF
#!ipxe
echo anvil: starting the network
:retry
dhcp || goto nonet
chain --replace --autofree $url || goto unreachable
:nonet
echo anvil: no DHCP answer; trying again in 10 seconds
sleep 10
goto retry
:unreachable
echo anvil: the boot service at $host did not answer; trying again in 30 seconds
sleep 30
goto retry
EOF
cp "$lkrn" "$out/ipxe.lkrn"
for f in "$ipxe_dir/ipxe.efi" /boot/ipxe.efi; do
	[[ -f "$f" ]] && { cp "$f" "$out/ipxe.efi"; break; }
done

cat >"$out/grub.cfg" <<'EOF'
set timeout=0
menuentry "anvil: network boot (iPXE)" {
	linux16 /boot/ipxe.lkrn
	initrd16 /boot/anvil.ipxe
}
EOF

cat >"$out/run-qemu.sh" <<'EOF'
#!/usr/bin/env bash
# Boots this artifact in QEMU (software emulation, serial console on stdio).
# The boot service must be reachable from the VM: with QEMU's user network,
# 10.0.2.2 is the host's loopback.
cd "$(dirname "$0")"
exec qemu-system-x86_64 -machine accel=tcg -m 2048 -nographic \
	-kernel ipxe.lkrn -initrd anvil.ipxe \
	-netdev user,id=n0 -device virtio-net-pci,netdev=n0 "$@"
EOF
chmod +x "$out/run-qemu.sh"

if command -v grub-mkrescue >/dev/null && command -v xorriso >/dev/null; then
	iso_root="$(mktemp -d)"
	trap 'rm -rf "$iso_root"' EXIT
	mkdir -p "$iso_root/boot/grub"
	cp "$out/ipxe.lkrn" "$out/anvil.ipxe" "$iso_root/boot/"
	cp "$out/grub.cfg" "$iso_root/boot/grub/grub.cfg"
	if grub-mkrescue -o "$out/anvil-ipxe.iso" "$iso_root" >/dev/null 2>&1; then
		echo "build.sh: wrote $out/anvil-ipxe.iso"
	else
		echo "build.sh: grub-mkrescue failed; the ISO was not built (is grub-pc-bin installed?)" >&2
	fi
else
	echo "build.sh: grub-mkrescue or xorriso missing: no ISO (apt-get install grub-pc-bin xorriso mtools)" >&2
fi
echo "build.sh: wrote $out/anvil.ipxe, $out/ipxe.lkrn, $out/grub.cfg and $out/run-qemu.sh"
