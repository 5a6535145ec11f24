#!/bin/sh
# Builds Debian 12's current 6.1 kernel (linux-source-6.1) with the stable backport of mainline
# 628bd3e49cba ("netfilter: nf_tables: drop map element references from preparation phase",
# 6.4; 6.1.36) taken back out, so that the chain-deletion EBUSY verdict defers for can be seen.
# Run by `cargo xtask kernels --build-unfixed-6.1`; usable alone: build-6.1-unfixed.sh DIR.
# Leaves DIR/bzImage (everything built in: no modules). Needs root for apt-get.
set -eu
dir=$(realpath -m "$1")
jobs=${JOBS:-2}
mkdir -p "$dir"
cd "$dir"
for p in build-essential flex bison bc libelf-dev libssl-dev xz-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || need="${need:-} $p"
done
[ -z "${need:-}" ] || apt-get install -y -q $need
if [ ! -f src/.unpacked ]; then
  rm -rf src deb && mkdir -p src deb
  (cd deb && apt-get download -q linux-source-6.1)
  dpkg-deb --fsys-tarfile deb/linux-source-6.1_*.deb | tar -xO ./usr/src/linux-source-6.1.tar.xz \
    | tar -xJ -C src --strip-components=1
  touch src/.unpacked
fi
cd src
nf=net/netfilter

# The backport in 6.1.36 did two things (the same two as mainline's 628bd3e49cba):
# 1. In the preparation phase (deleting a rule that holds an anonymous map, or deleting a map)
#    it drops the references the map's elements hold on chains, with nft_map_deactivate(), and
#    restores them on abort with nft_map_activate(). Both become no-ops again.
# 2. So set backends no longer drop those references when a set is destroyed after the commit:
#    their .destroy calls nf_tables_set_elem_destroy() (frees only) instead of
#    nft_set_elem_destroy(..., true) (drops the references, then frees). That goes back too.
# Each edit must match exactly as often as counted, or the source moved and this script is wrong.
edit() { # file expected-count pattern replacement
  n=$(perl -0ne "\$n = () = m#$3#g; print \$n" "$1")
  [ "$n" = "$2" ] || { echo "build-6.1-unfixed: $1: '$3' matches $n times, not $2" >&2; exit 1; }
  perl -0pi -e "s#$3#$4#g" "$1"
}
if [ ! -f .reverted ]; then
  edit $nf/nf_tables_api.c 1 \
    'static void nft_map_deactivate(\(const struct nft_ctx \*ctx, struct nft_set \*set\)\n\{\n)' \
    'static void nft_map_deactivate${1}}\n\nstatic void __maybe_unused nft_map_deactivate_628bd3e${1}'
  edit $nf/nf_tables_api.c 1 \
    'static void nft_map_activate(\(const struct nft_ctx \*ctx, struct nft_set \*set\)\n\{\n)' \
    'static void nft_map_activate${1}}\n\nstatic void __maybe_unused nft_map_activate_628bd3e${1}'
  edit $nf/nf_tables_api.c 1 'nf_tables_set_elem_destroy\(ctx, set, catchall->elem\)' \
    'nft_set_elem_destroy(set, catchall->elem, true)'
  edit $nf/nft_set_bitmap.c 1 'nf_tables_set_elem_destroy\(ctx, set, be\)' 'nft_set_elem_destroy(set, be, true)'
  edit $nf/nft_set_hash.c 1 'nf_tables_set_elem_destroy\(&rhash_ctx->ctx, rhash_ctx->set, ptr\)' \
    'nft_set_elem_destroy(rhash_ctx->set, ptr, true)'
  edit $nf/nft_set_hash.c 1 'nf_tables_set_elem_destroy\(ctx, set, he\)' 'nft_set_elem_destroy(set, he, true)'
  edit $nf/nft_set_pipapo.c 1 'nf_tables_set_elem_destroy\(ctx, set, e\)' 'nft_set_elem_destroy(set, e, true)'
  edit $nf/nft_set_rbtree.c 1 'nf_tables_set_elem_destroy\(ctx, set, rbe\)' 'nft_set_elem_destroy(set, rbe, true)'
  touch .reverted
fi

# x86_64 defconfig (virtio, 9p, serial console, devtmpfs) without what a VM with no devices
# spends build time on, and every netfilter option built in, as `cargo xtask kernels` loads every
# netfilter module of Debian's kernels; plus what the tests' topologies use.
{
  for k in $nf/Kconfig $nf/ipset/Kconfig net/ipv4/netfilter/Kconfig net/ipv6/netfilter/Kconfig \
    net/bridge/netfilter/Kconfig; do
    # bool and tristate symbols only (IP_SET_MAX is a number)
    awk '/^(menu)?config /{s=$2} s && $1~/^(bool|tristate)$/{print "CONFIG_" s "=y"} $1~/^(bool|tristate|int|hex|string)$/{s=""}' "$k"
  done
  for y in NETFILTER NETFILTER_ADVANCED BRIDGE BRIDGE_NETFILTER VETH DUMMY IP_SCTP IPV6 NET_NS \
    OVERLAY_FS TMPFS DEVTMPFS BLK_DEV_INITRD 9P_FS NET_9P NET_9P_VIRTIO VIRTIO_PCI; do
    echo "CONFIG_$y=y"
  done
  for n in DRM SOUND USB_SUPPORT WLAN WIRELESS CFG80211 MAC80211 RFKILL ETHERNET NFS_FS ROOT_NFS \
    MEDIA_SUPPORT AGP HID INPUT_JOYSTICK INPUT_TABLET INPUT_TOUCHSCREEN SECURITY_SELINUX; do
    echo "# CONFIG_$n is not set"
  done
  echo 'CONFIG_LOCALVERSION="-unfixed628bd3e"'
  echo '# CONFIG_LOCALVERSION_AUTO is not set'
} > ../fragment.config
[ -f .config ] || make -s defconfig
scripts/kconfig/merge_config.sh -m .config ../fragment.config >/dev/null
make -s olddefconfig
for want in NF_TABLES NF_TABLES_INET NFT_NAT NFT_CT NFT_NUMGEN NFT_HASH NFT_REJECT NFT_MASQ NFT_FIB_INET \
  NF_CT_NETLINK NFT_COMPAT IP_SET BRIDGE_NETFILTER VETH IP_SCTP 9P_FS OVERLAY_FS; do
  grep -q "^CONFIG_$want=y" .config || { echo "build-6.1-unfixed: CONFIG_$want is not built in" >&2; exit 1; }
done
make -s -j"$jobs" bzImage
cp arch/x86/boot/bzImage ../bzImage
echo "$(make -s kernelrelease) ../bzImage" > ../release
echo "build-6.1-unfixed: $(cat ../release)"
