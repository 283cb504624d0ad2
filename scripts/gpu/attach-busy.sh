#!/usr/bin/env bash
# Issue 50 on the GPU machine (one H100 or H200), in one device call: a NIXL
# READ between two processes on GPU 0 (UCX backend, 32 MiB buffers), and 6 s
# into it `attach` for 6 s, once with --pid (the drive and its two Python
# processes) and once with --all, by each binary given.
#   Prepare on a developer machine: bash scripts/gpu/ucx-carry.sh (the
#   release binary in dist/gdrtrace, and .whl/nixl-gpu.zip); a baseline
#   binary in dist/ too, if wanted.
#   Device call: carry ["dist", ".whl/nixl-gpu.zip"], command
#   "BINARIES='dist/gdrtrace dist/gdrtrace-main' bash scripts/gpu/attach-busy.sh".
# Per (binary, mode): the report and the tracer's stderr, and a line in
# summary.txt: events a second (the recording's footer), the loss, the
# processes and their names, the retain's calls, the copies and the GETs.
# The recordings stay on the machine; the rest is $OUT/attach-busy.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=/tmp/gdr-attach-busy
N=/tmp/nixl-wheel
rm -rf "$R" "$N"
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
python3 -m zipfile -e .whl/nixl-gpu.zip "$N" || echo "nixl-gpu.zip: could not unpack" >> "$R/summary.txt"
export PYTHONPATH="$N"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/env.txt" 2>&1
uname -r >> "$R/env.txt"

for B in ${BINARIES:-dist/gdrtrace}; do
    for mode in pid all; do
        name="$(basename "$B")-$mode"
        # The drive (and with it the two processes) in a group of its own.
        setsid "$B" drive nixl --op read --size 32M --iterations 2000 --timeout 120s \
            > "$R/$name.drive.txt" 2>&1 &
        drive=$!
        sleep 6
        if [ "$mode" = pid ]; then targets=(--pid "$drive"); else targets=(--all); fi
        timeout 120 "$B" attach "${targets[@]}" --duration 6s --json "$R/$name.json" \
            --record "$R/$name.rec" > "$R/$name.txt" 2> "$R/$name.err"
        echo "rc=$?" >> "$R/$name.err"
        kill -TERM -- -"$drive" 2> /dev/null
        wait "$drive" 2> /dev/null
        python3 - "$R/$name" "$name" >> "$R/summary.txt" <<'PY'
import json, sys
base, name = sys.argv[1], sys.argv[2]
try:
    r = json.load(open(base + ".json"))
except Exception as e:
    print(f"{name}: no report ({e})")
    sys.exit()
events = None
for line in open(base + ".rec"):
    if '"type":"footer"' in line:
        events = json.loads(line).get("events")
d = r["duration_s"]
first = open(base + ".err").readline().strip()
print(f"{name}: {first}")
print(f"  {events} events in {d} s = {events / d:.0f}/s; loss {r['loss']}")
for p in r["processes"]:
    calls = p.get("calls", {})
    if sum(calls.values()) > 0:
        print(f"  pid {p['pid']} comm {p.get('comm')!r}: retain {calls.get('cuDevicePrimaryCtxRetain', 0)}, "
              f"cuMemcpyAsync {calls.get('cuMemcpyAsync', 0)}, calls {sum(calls.values())}")
for u in (r.get("ucx") or {}).get("processes", []):
    print(f"  ucx pid {u['pid']}: data_calls {u['data_calls']}, data_bytes {u['data_bytes']}")
hits = {h["op"]: h["hits"] for h in r.get("probe_hits", [])}
print(f"  hits: retain {hits.get('cuDevicePrimaryCtxRetain')}, cuMemcpyAsync {hits.get('cuMemcpyAsync')}, "
      f"ucp_get_nbx {hits.get('ucp_get_nbx')}")
PY
    done
done
cat "$R/summary.txt"
tar -czf "${OUT:-/tmp}/attach-busy.tgz" -C "$R" --exclude='*.rec' .
