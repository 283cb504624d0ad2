#!/usr/bin/env bash
# A container root filesystem for the node agent, from Debian packages only
# (no image registry): the Debian packages that hold the shared libraries
# BINARY links (as `ldd` resolves them here, found with `dpkg -S`), fetched
# with `apt-get download` into DIR/debs (kept between runs) and unpacked with
# `dpkg -x` into DIR/rootfs, then BINARY copied to /usr/local/bin/gdrtrace
# and the mount points of deploy/kubernetes/daemonset.yaml created.
# tests/it/container.rs runs the result with podman (`--rootfs`).
#
#   bash scripts/container-rootfs.sh DIR BINARY
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: container-rootfs.sh DIR BINARY" >&2
    exit 2
fi
dir=$1
bin=$2
if [ ! -x "$bin" ]; then
    echo "container-rootfs: $bin is not an executable (scripts/test.sh builds target/release/gdrtrace first)" >&2
    exit 1
fi
mkdir -p "$dir/debs"
debs=$(cd "$dir/debs" && pwd)

# The packages owning the libraries the binary loads (and the loader).
libs=$(ldd "$bin" | awk '/=>/ {print $3} /^\t\/lib/ {print $1}' | sort -u)
pkgs=()
for l in $libs; do
    real=$(readlink -f "$l")
    owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$l" 2>/dev/null || true)
    if [ -z "$owner" ]; then
        echo "container-rootfs: no Debian package owns $l (from ldd $bin)" >&2
        exit 1
    fi
    pkgs+=("${owner%%:*}")
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for p in "${pkgs[@]}"; do
    # The installed version, so the rootfs holds what the binary was linked
    # and tested against.
    v=$(dpkg-query -W -f='${Version}' "$p")
    # apt names the file with the epoch's colon as %3a.
    if ! ls "$debs/${p}_${v//:/%3a}_"*.deb >/dev/null 2>&1; then
        # apt-get download writes into the current directory; as root it
        # warns that the _apt sandbox cannot write there (harmless).
        if ! (cd "$debs" && apt-get download -q "$p=$v") >"$log" 2>&1; then
            # No package lists yet on a fresh machine.
            apt-get update -qq >/dev/null 2>&1 || true
            if ! (cd "$debs" && apt-get download -q "$p=$v") >"$log" 2>&1; then
                echo "container-rootfs: apt-get download $p=$v failed:" >&2
                cat "$log" >&2
                exit 1
            fi
        fi
    fi
done

rootfs="$dir/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"
for d in "$debs"/*.deb; do
    dpkg -x "$d" "$rootfs"
done
install -D -m 0755 "$bin" "$rootfs/usr/local/bin/gdrtrace"
# Mount points (the root is read-only in the container, as in the DaemonSet).
mkdir -p "$rootfs"/{proc,sys,dev,tmp,run,etc} "$rootfs/host/var/log/pods"
touch "$rootfs/etc/hosts" "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
echo "container-rootfs: $rootfs from ${pkgs[*]}"
