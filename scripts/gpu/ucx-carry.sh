#!/usr/bin/env bash
# Prepares, on a developer machine (the GPU machine cannot download), what
# scripts/gpu/ucx.sh needs there, in ignored folders the device call carries:
#   dist/gdrtrace          the release binary;
#   .whl/ucx-gpu.zip       from PyPI's libucx-cu12 1.22.0 wheel: ucx_perftest,
#                          ucx_info, libucp/uct/ucs/ucm, the transport modules
#                          (libuct_cuda with cuda_copy/cuda_ipc, libuct_cma),
#                          the perftest's CUDA memory module and the CUDA
#                          runtime it bundles;
#   .whl/nixl-gpu.zip      from nixl-cu13 1.5.1: the Python package, libnixl,
#                          the UCX backend plugin and the libraries they load
#                          (its own UCX copy among them).
# Only the files those programs load are kept (the NEEDED closure inside each
# wheel): the wheels are 43 MB and 59 MB, and the whole carried tree must stay
# under 64 MiB. Prints the sizes. Idempotent: the whole wheels stay in
# target/wheels/ (not carried).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null ||
    echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p .whl target/wheels dist
plats=()
for n in 17 24 27 28 31 34; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
for w in libucx-cu12==1.22.0 nixl-cu13==1.5.1; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${plats[@]}" --platform manylinux2014_x86_64 -d target/wheels "$w"
done
python3 - target/wheels .whl <<'PY'
import os, re, subprocess, sys, tempfile, zipfile

cache, out = sys.argv[1], sys.argv[2]

def needed(data: bytes) -> list[str]:
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        text = subprocess.run(["readelf", "-d", f.name], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", text)

def trim(wheel: str, roots, extra, dest: str):
    z = zipfile.ZipFile(wheel)
    names = z.namelist()
    by_file = {}
    for n in names:
        by_file.setdefault(os.path.basename(n), []).append(n)
    keep, todo = set(), [n for n in names if any(re.fullmatch(r, n) for r in roots)]
    while todo:
        n = todo.pop()
        if n in keep:
            continue
        keep.add(n)
        for lib in needed(z.read(n)):
            todo.extend(by_file.get(lib, []))
    keep |= {n for n in names if any(re.fullmatch(r, n) for r in extra)}
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as o:
        for n in sorted(keep):
            info = z.getinfo(n)
            o.writestr(info, z.read(n))
    raw = sum(z.getinfo(n).file_size for n in keep)
    print(f"{dest}: {len(keep)} files, {raw / 2**20:.1f} MiB unpacked, {os.path.getsize(dest) / 2**20:.1f} MiB zipped "
          f"(from {os.path.basename(wheel)}, {os.path.getsize(wheel) / 2**20:.1f} MiB)")

wheels = os.listdir(cache)
ucx = os.path.join(cache, next(w for w in wheels if w.startswith("libucx_cu12-1.22.0")))
nixl = os.path.join(cache, next(w for w in wheels if w.startswith("nixl_cu13-1.5.1")))
trim(ucx,
     [r"libucx/bin/ucx_(perftest|info)", r"libucx/lib/ucx/lib(uct|ucm|ucx_perftest)_[a-z_]+\.so\.0"],
     [], os.path.join(out, "ucx-gpu.zip"))
trim(nixl,
     [r"nixl_cu13/_[a-z]+\.cpython-312-x86_64-linux-gnu\.so",
      r"\.nixl_cu13\.mesonpy\.libs/plugins/libplugin_UCX\.so",
      r"nixl_cu13\.libs/ucx/lib(uct_cuda|uct_cma|ucm_cuda)\.so\.0\.0\.0"],
     [r"nixl_cu13/[a-z_]+\.py", r"nixl_cu13/py\.typed"], os.path.join(out, "nixl-gpu.zip"))
PY
cargo build --quiet --release -p tracer
cp target/release/gdrtrace dist/gdrtrace
du -b dist/gdrtrace .whl/ucx-gpu.zip .whl/nixl-gpu.zip | awk '{ printf "%-22s %6.1f MiB\n", $2, $1 / 1048576; t += $1 } END { printf "%-22s %6.1f MiB (and the repository)\n", "carried", t / 1048576 }'
echo "carry: dist .whl/ucx-gpu.zip .whl/nixl-gpu.zip (run: bash scripts/gpu/ucx.sh)"
