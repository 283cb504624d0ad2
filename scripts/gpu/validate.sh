#!/usr/bin/env bash
# GPU machine: `gdrtrace validate` (collectives exact, as validate counts
# them) with its JSON document and text report, and `gdrtrace bench
# trap-cost` (the calibration the duty cycle's estimates use on this host).
# Usage: [GDRTRACE=BIN] bash scripts/gpu/validate.sh; results under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp/validate}
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
"$B" bench trap-cost > "$R/trap-cost.txt" 2>&1
"$B" validate --no-ucx --json "$R/validate.json" > "$R/validate.txt" 2> "$R/validate.err"
echo "validate rc=$?" >> "$R/validate.txt"
