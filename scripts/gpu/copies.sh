#!/usr/bin/env bash
# Issue 25 on one H200, in one device call (about 170 s): what a copy-heavy
# torch job pays for the tracer, and what one trap costs on torch's own
# libraries.
#   1. the 8 KiB pinned copy loop (scripts/gpu/overhead.py --job copies):
#      `attach` on/off window pairs with an off/off control, then `run`
#      rounds (traced and untraced whole jobs, order alternating): ratios,
#      copies made against copies reported (counted or estimated), their
#      verdicts, traps per second per process;
#   2. per-trap cost: the same copy job (libcuda) and a one-rank 8 KiB
#      all-reduce job (libnccl) under `run --collectives exact`, every call
#      trapped, against untraced rounds.
# The binary is built on the development machine (`cargo build --release
# -p tracer`) and carried as dist/gdrtrace.
# Usage: [GDRTRACE=BIN] [PAIRS=16] [CONTROL=4] [WINDOW=1.0] [ROUNDS=4]
#        [TRAP_ROUNDS=1] bash scripts/gpu/copies.sh
# Read: $OUT/copies.txt: "attach 8K: median on/off X, off/off Y" (target
# on/off <= 1.01), "run (copies): ... ratio 8K latency R" (target <= 1.03),
# "traps/s" (at most 1,500 after the first second), "ns per trap" per
# library, and the copy verdicts (gpu-host-dma: pinned, never host-staged).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
R=/tmp/gdr-copies
OUT=${OUT:-/tmp/gdr-copies-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$OUT/copies.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  "$B" --version; } > "$S" 2>&1
"$B" bench uprobe-hit --calls 200000 --rounds 3 > "$R/hit.json" 2>> "$S"

# 1. The copy loop: attach pairs with control, then run rounds.
timeout 140 python3 "$HERE/overhead.py" bench --gdrtrace "$B" --out "$R/copy" --job copies --ngpu 1 \
  --parts attach,run --pairs "${PAIRS:-16}" --control "${CONTROL:-4}" --window "${WINDOW:-1.0}" \
  --rounds "${ROUNDS:-4}" > "$R/copy.txt" 2>&1
echo "== 1. copy loop (rc=$?)" >> "$S"
grep -E "^(attach|run)" "$R/copy.txt" >> "$S"

# 2. One trap on torch's own libcuda (copies) and libnccl (all-reduce).
for job in copies allreduce; do
  timeout 60 python3 "$HERE/overhead.py" bench --gdrtrace "$B" --out "$R/trap-$job" --job $job --ngpu 1 \
    --parts trap --trap-rounds "${TRAP_ROUNDS:-1}" --window 2 > "$R/trap-$job.txt" 2>&1
  echo "== 2. per trap, $job job (rc=$?)" >> "$S"
  grep -E "^trap" "$R/trap-$job.txt" >> "$S"
done
tar czf "$OUT/copies.tgz" -C "$R" . 2>/dev/null
cat "$S"
