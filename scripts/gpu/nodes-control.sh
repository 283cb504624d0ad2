#!/usr/bin/env bash
# GPU machine: is `validate`'s emulated-node workload (gdrtrace drive nccl
# --hosts 2: two ranks on one GPU, each its own NCCL_HOSTID, NET/Socket)
# right on its own? Its result check failed twice under the tracer
# ("wrong all-reduce result"). Runs it untraced and under `gdrtrace run`,
# alternating, $N times each, with validate's arguments; prints each exit
# status and any line of the workload's own check.
# Usage: [N=4] bash scripts/gpu/nodes-control.sh [BIN]   (BIN defaults to dist/gdrtrace)
# Read: $OUT/nodes-control.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${1:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp/nodes-control}
N=${N:-4}
mkdir -p "$R"
S="$R/nodes-control.txt"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
W=("$B" drive nccl --hosts 2 --nranks 2 --sizes 8K,1M --iters 200)
for i in $(seq "$N"); do
  order="off on"; [ $((i % 2)) = 0 ] && order="on off"
  for mode in $order; do
    if [ "$mode" = on ]; then
      timeout -k 5 90 "$B" run --json "$R/run-$i.json" -- "${W[@]}" > "$R/$mode-$i.txt" 2>&1
    else
      timeout -k 5 90 "${W[@]}" > "$R/$mode-$i.txt" 2>&1
    fi
    rc=$?
    echo "round $i $mode: rc=$rc $(grep -ho 'wrong [^"]*' "$R/$mode-$i.txt" | head -1)" >> "$S"
  done
done
cat "$S"
