#!/usr/bin/env bash
# Issue 23 items 4 and 5 on a GPU machine, in one device call (one H200 is
# enough):
#   1. one job across two emulated nodes, traced per node: the two ranks of
#      scripts/gpu/allreduce.py (its per-rank mode), both on GPU 0, each
#      started by its own `gdrtrace run --json --record` with its own
#      NCCL_HOSTID and NCCL_DEBUG=INFO log; then `gdrtrace job` over the two
#      reports (text and JSON) and over the two recordings. Read: one
#      communicator, 2 ranks, 2 hosts, both socket (host-staged); comm_id
#      equal to the `commId` of NCCL's own Init COMPLETE lines.
#   2. a one-rank job under `run`: read the staging section's moved bytes
#      (expect 0: nothing crossed between devices).
#   3. `drive ucx --mode cuda --gpus 0,0` (ucx_perftest, both processes on
#      GPU 0, default UCX_TLS) under `run` with its UCX_PROTO_INFO log: read
#      the verdict (expect ipc/same-device) and whether the UCX log agrees.
# About 90 s on one H200.
# The binary is built elsewhere (no Rust there): `cargo build -p tracer
# --release`, copy target/release/gdrtrace to dist/ and carry dist.
# Usage: [GDRTRACE=BIN] bash scripts/gpu/job.sh
# Results: $OUT/summary.txt (written as it goes) and $OUT/job.tgz (the
# reports, recordings, logs and views).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
OUT=${OUT:-/tmp/gdr-job-out}
R=$OUT/work
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$OUT/summary.txt"
T0=$(date +%s)
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  env $SAFE python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'; } > "$S" 2>&1
elapsed() { echo "  [t=$(( $(date +%s) - T0 )) s]"; }

# 1. Two emulated nodes, one `run` each (started together: the ranks wait
#    for each other in init_process_group).
PORT=29611
for r in 0 1; do
  env $SAFE NCCL_HOSTID=gdrtrace-emu-$r NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$R/rank$r.nccl.log" \
    timeout 120 "$B" run --json "$R/rank$r.json" --record "$R/rank$r.rec" -- \
    python3 "$HERE/allreduce.py" --rank $r --nranks 2 --device 0 --seconds 8 --kib 1024 --port $PORT \
    > "$R/rank$r.txt" 2>&1 &
done
wait
{ echo "== 1. two emulated nodes, one run each$(elapsed)"
  for r in 0 1; do
    echo "  rank $r: $(grep -h 'Init COMPLETE' "$R/rank$r.nccl.log" | head -1 | sed 's/.*NCCL INFO //')"
    python3 - "$R/rank$r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for p in r["processes"]:
    for c in p.get("communicators", []):
        print(f'  report: pid {p["pid"]} {c}')
for v in r["verdicts"]:
    print(f'  verdict: pid {v["pid"]} {v["transport"]} host_staged={v["host_staged"]} cause={v.get("cause")}')
PY
  done
  "$B" job "$R/rank0.json" "$R/rank1.json" 2>&1 | tee "$R/job.txt" | sed 's/^/  /'
  "$B" job --format json "$R/rank0.json" "$R/rank1.json" > "$R/job.json" 2>&1
  python3 - "$R/job.json" "$R/rank0.nccl.log" <<'PY'
import json, re, sys
v = json.load(open(sys.argv[1]))
logged = {int(m, 16) for m in re.findall(r"commId 0x([0-9a-f]+) - Init COMPLETE", open(sys.argv[2]).read())}
for c in v["communicators"]:
    ok = int(c["comm_id"], 16) in logged
    print(f'  job: comm_id {c["comm_id"]} in NCCL log: {ok}; nranks {c["nranks"]} ranks {len(c["ranks"])} hosts {c["hosts"]} missing {c["missing"]} fell_back {c["fell_back"]} transports {c["transports"]}')
PY
  echo "  from the recordings:"
  "$B" job "$R/rank0.rec" "$R/rank1.rec" 2>&1 | sed 's/^/  /'
} >> "$S" 2>&1

# 2. One rank: nothing moves between devices.
env $SAFE timeout 60 "$B" run --json "$R/one-rank.json" -- \
  python3 "$HERE/allreduce.py" --ngpu 1 --seconds 4 --kib 8 > "$R/one-rank.txt" 2>&1
{ echo "== 2. one-rank job (rc=$?)$(elapsed)"
  python3 - "$R/one-rank.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
coll = sum(c["bytes"] for c in r["collectives"])
print(f'  collectives: {coll} bytes on {[(c["communicator"], c.get("nranks")) for c in r["collectives"]]}')
for p in r["staging"]["processes"]:
    print(f'  staging: pid {p["pid"]} {p["comm"]} moved {p["moved_bytes"]} staged {p["staged_bytes"]}')
PY
  grep -A4 '^Host staging' "$R/one-rank.txt" | sed 's/^/  /'
} >> "$S" 2>&1

# 3. ucx_perftest with both processes on GPU 0.
env $SAFE timeout 90 "$B" run --json "$R/ucx-same-gpu.json" --ucx-log "$R/ucx-same-gpu.log" -- \
  "$B" drive ucx --mode cuda --gpus 0,0 --size 64M --iterations 100 --log "$R/ucx-same-gpu.log" \
  > "$R/ucx-same-gpu.txt" 2>&1
{ echo "== 3. ucx_perftest on one GPU (rc=$?)$(elapsed)"
  python3 - "$R/ucx-same-gpu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for p in (r.get("ucx") or {}).get("processes", []):
    for x in p["paths"]:
        print(f'  pid {p["pid"]} {x["memory"]}: {x["transport"]} via {x["path"]}; ucx log: {x.get("log")}; {x["evidence"][:1]}')
PY
  grep -m3 'cuda_ipc' "$R/ucx-same-gpu.log" | sed 's/^/  log: /'
} >> "$S" 2>&1

echo "== done$(elapsed)" >> "$S"
tar -C "$R" -czf "$OUT/job.tgz" . && rm -rf "$R"
