#!/usr/bin/env bash
# Issue 25 on one H200, in one device call: which probe points of torch's
# own libcuda and libnccl the kernel single-steps (a second trap on every
# hit, tracer/src/probes/insn.rs), what a trap costs there on each kind of
# first instruction, and the duty cycle's copy and all-reduce estimates
# with and without the single-step correction, A/B in the same call
# (scripts/gpu/estimates.sh AB): BIN as it is, and BIN given the trap cost
# of this machine's emulated entry and pair only (GDRTRACE_TRAP_COST=E,P:
# a single-stepped entry taken to cost an emulated one's, as before the
# correction).
# The binary is built on the development machine and carried in dist/.
# Usage: [N=6] bash scripts/gpu/stepped.sh BIN
# Read: $OUT/stepped.txt (and $OUT/ab/: each job's report, recording and
# blocks).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NEW=$(readlink -f "$1")
O=${OUT:-/tmp/stepped}
HERE=$PWD/scripts/gpu
mkdir -p "$O"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$O/stepped.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  "$NEW" --version; } > "$S" 2>&1
echo "== trap cost (3 runs)" >> "$S"
for _ in 1 2 3; do "$NEW" bench trap-cost > "$O/trap-cost.txt" 2>&1; head -1 "$O/trap-cost.txt" >> "$S"; done
EP=$(tail -1 "$O/trap-cost.txt" | python3 -c 'import json, sys; c = json.load(sys.stdin); print("%.0f,%.0f" % (c["entry_ns"], c["pair_ns"]))')
OLD="$O/gdrtrace-nostep"
printf '#!/bin/sh\nGDRTRACE_TRAP_COST=%s exec %s "$@"\n' "$EP" "$NEW" > "$OLD"
chmod +x "$OLD"
echo "== $(basename "$OLD"): GDRTRACE_TRAP_COST=$EP" >> "$S"
echo "== first bytes of probed functions (dlsym)" >> "$S"
python3 - >> "$S" 2>&1 <<'PY'
import ctypes, glob
libs = glob.glob("/usr/lib/x86_64-linux-gnu/libnccl.so.2*")[:1] + glob.glob("/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2")
libs += glob.glob("/usr/local/nvidia/lib64/libcuda.so.*[0-9]")[:1]
for path in libs:
    lib = ctypes.CDLL(path)
    for name in ("ncclAllReduce", "ncclGroupStart", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"):
        try:
            f = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            continue
        print(f"{path} {name}: {ctypes.string_at(f, 8).hex(' ')}")
PY
port=29850
for job in copies allreduce; do
  port=$((port + 1))
  timeout -k 5 60 "$NEW" run -v --json "$O/points-$job.json" -- \
    python3 "$HERE/overhead.py" job --job "$job" --ngpu 1 --sizes 8K --seconds 2 --port "$port" \
    > "$O/points-$job.txt" 2>&1
  echo "== $job job: attached and single-stepped points (rc=$?)" >> "$S"
  grep -E "symbols attached|single-stepped|trap cost" "$O/points-$job.txt" | sed 's/^ *//' >> "$S"
done
echo "== A/B estimates: $(basename "$OLD") then $(basename "$NEW"), order alternating" >> "$S"
OUT="$O/ab" N="${N:-6}" AB="$OLD $NEW" bash "$HERE/estimates.sh" > /dev/null 2>&1
cat "$O/ab/estimates.txt" >> "$S"
cat "$S"
