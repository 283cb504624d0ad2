#!/usr/bin/env bash
# The release, from a fresh clone on Debian 12, as root (CI runs it for a
# tagged commit, .ci/run): everything lands in target/dist/.
#
#   bash scripts/release.sh
#
# - gdrtrace-VERSION-ARCH-linux-gnu.tar.gz: bin/gdrtrace (cargo build
#   --release; the eBPF object is embedded), the man pages, bash/zsh/fish
#   completions, README, CHANGELOG and both licenses;
# - gdrtrace-image-VERSION.tar: the container image (docker-archive, for
#   `podman load`, `docker load`, `ctr -n k8s.io images import`), also left
#   in podman's store as localhost/gdrtrace:VERSION: deploy/Containerfile on
#   a root filesystem of the Debian packages the binary links
#   (scripts/container-rootfs.sh), no toolchain inside;
# - SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet -p tracer
bin=target/release/gdrtrace

# 0.1.0+<commit>: the tarball and the image are named by the release.
version=$("$bin" --version | awk '{print $2}')
release=${version%%+*}
revision=${version#*+}
arch=$(uname -m)
dist=target/dist
rm -rf "$dist"
mkdir -p "$dist"

# What the binary needs at run time: glibc, libgcc_s, and libibverbs
# (rdma-core: `drive verbs`, and what makes a workload a discovery target).
deps=$(ldd "$bin" | awk '/=>/ {print $1} /^\t\/lib/ {print $1}' | sed 's|.*/||' | sort -u)
for d in $deps; do
    case "$d" in
        linux-vdso.so.1 | ld-linux-*.so.* | libc.so.6 | libm.so.6 | libgcc_s.so.1) ;;
        libibverbs.so.1 | libnl-3.so.200 | libnl-route-3.so.200) ;;
        *)
            echo "release: $bin links $d, which the release does not list (README: Install)" >&2
            exit 1
            ;;
    esac
done

name=gdrtrace-$release-$arch-linux-gnu
stage=$dist/$name
mkdir -p "$stage/bin" "$stage/share/man/man1" "$stage/share/bash-completion/completions" \
    "$stage/share/zsh/site-functions" "$stage/share/fish/vendor_completions.d"
install -m 0755 "$bin" "$stage/bin/gdrtrace"
"$bin" man --out-dir "$stage/share/man/man1"
"$bin" completions bash >"$stage/share/bash-completion/completions/gdrtrace"
"$bin" completions zsh >"$stage/share/zsh/site-functions/_gdrtrace"
"$bin" completions fish >"$stage/share/fish/vendor_completions.d/gdrtrace.fish"
cp README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/"
# Reproducible metadata: the commit's time, root-owned, sorted.
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$dist" -czf "$dist/$name.tar.gz" "$name"
rm -rf "$stage"

# The image: a rootfs from Debian packages (cached under target/container).
# Its own directory: tests/it/container.rs unpacks target/container.
bash scripts/container-rootfs.sh target/container-release "$bin" >/dev/null
context=$dist/image
mkdir -p "$context"
tar --sort=name --numeric-owner -C target/container-release/rootfs -cf "$context/rootfs.tar" .
image=localhost/gdrtrace:$release
podman --cgroup-manager cgroupfs build -q -f deploy/Containerfile -t "$image" \
    --label "org.opencontainers.image.title=gdrtrace" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.licenses=MIT OR Apache-2.0" \
    "$context" >/dev/null
rm -rf "$context"
podman save -q --format docker-archive -o "$dist/gdrtrace-image-$release.tar" "$image"

(cd "$dist" && sha256sum -- *.tar.gz *.tar >SHA256SUMS)
echo "release: gdrtrace $version ($arch): $dist/$name.tar.gz, $dist/gdrtrace-image-$release.tar ($image)"
