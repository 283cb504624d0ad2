#!/usr/bin/env bash
# One device call: what a trap costs a caller on a CET build's functions
# (the system libnccl's begin with `endbr64`) with the probe on the
# `endbr64` (single-stepped) and after it, against torch's own libnccl (no
# `endbr64`) as the control: scripts/gpu/endbr.py untraced and under
# `run --collectives exact` of two binaries, rounds interleaved, binary
# order alternating.
# Usage: [ROUNDS=4] bash scripts/gpu/endbr.sh ON_ENDBR AFTER_ENDBR
#   (ON_ENDBR: a build that probes the first byte, e.g. 65f0131;
#    AFTER_ENDBR: one that probes after a leading endbr64, 3f10d85 on)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
HERE=$PWD/scripts/gpu
bins=("$1" "$2")
libs=(/usr/lib/x86_64-linux-gnu/libnccl.so.2 /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2)
date -u; uname -r
for i in $(seq "${ROUNDS:-4}"); do
  order=("${bins[@]}")
  [ $((i % 2)) -eq 0 ] && order=("${bins[1]}" "${bins[0]}")
  for lib in "${libs[@]}"; do
    python3 "$HERE/endbr.py" --lib "$lib" | sed "s/^/round $i untraced: /"
    for b in "${order[@]}"; do
      timeout -k 5 120 "$b" run --collectives exact -- python3 "$HERE/endbr.py" --lib "$lib" 2>&1 \
        | grep "^endbr:" | sed "s|^|round $i $(basename "$b"): |"
    done
  done
done
