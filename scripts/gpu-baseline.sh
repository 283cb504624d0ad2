#!/usr/bin/env bash
# Records the GPU-machine baselines used as test fixtures
# (tests/fixtures/reports/gpu-*.json): validate through `baseline record`,
# twice, so run-to-run noise on one machine can be compared too. Runs from
# the repository root with the release binary carried in dist/; results in $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
for i in 1 2; do
  "$B" baseline record --out "$OUT/gpu-baseline-$i.json" > "$OUT/record-$i.txt" 2>&1
  echo "record $i rc=$?" | tee -a "$OUT/record-$i.txt"
done
"$B" compare "$OUT/gpu-baseline-1.json" "$OUT/gpu-baseline-2.json" --html "$OUT/compare.html" > "$OUT/compare.txt" 2>&1
echo "compare rc=$?" | tee -a "$OUT/compare.txt"
head -3 "$OUT/compare.txt"; grep -E "^(baseline|validate:)" "$OUT/record-1.txt"
