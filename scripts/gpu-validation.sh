#!/usr/bin/env bash
# The GPU-machine validation run (2x H200 over NVLink), recorded in
# docs/validation/. Runs from the repository root with the release binary
# carried in dist/; results land in $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
R=/tmp/gdr-results
rm -rf "$R"; mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
{ date -u; uname -r; cat /proc/driver/nvidia/version; nvidia-smi --query-gpu=name,driver_version --format=csv
  nvidia-smi topo -m; ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/lib/libcuda.so.1; } > "$R/env.txt" 2>&1
"$B" doctor > "$R/doctor.txt" 2>&1; echo "doctor rc=$?" >> "$R/doctor.txt"
"$B" topo > "$R/topo.txt" 2>&1
# CUDA copies: pinned vs pageable, D2D, GPU->GPU with and without peer access.
"$B" run --json "$R/cuda-copy.json" -- "$B" drive cuda-copy --sizes 4K,1M,64M --summary "$R/cuda-copy-summary.json" > "$R/cuda-copy.txt" 2>&1
echo "rc=$?" >> "$R/cuda-copy.txt"
# NCCL all-reduce in the three transport modes, traced, with NCCL's own log.
for m in auto no-p2p no-p2p-no-shm; do
  NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$R/ncclraw-$m.%p.log" "$B" run --json "$R/nccl-$m.json" -- \
    "$B" drive nccl --mode $m --sizes 8K,64M --summary "$R/nccl-$m-summary.json" > "$R/nccl-$m.txt" 2>&1
  echo "rc=$?" >> "$R/nccl-$m.txt"
  cat "$R"/ncclraw-$m.*.log > "$R/nccl-$m.log" 2>/dev/null; rm -f "$R"/ncclraw-$m.*.log
  "$B" explain "$R/nccl-$m.json" --nccl-log "$R/nccl-$m.log" > "$R/explain-$m.txt" 2>&1
done
"$B" validate > "$R/validate.txt" 2>&1; echo "rc=$?" >> "$R/validate.txt"
# attach: a two-rank NCCL job started on its own, attached by pid mid-run.
setsid "$B" drive nccl --mode auto --size 256M --duration 80s > "$R/job.txt" 2>&1 &
JOB=$!
sleep 25
L0=$(grep -c 'iter=' "$R/job.txt")
"$B" attach --pid $JOB --interval 2s --duration 25s --json "$R/attach.json" --jsonl "$R/attach.jsonl" > "$R/attach.txt" 2>&1
echo "rc=$?" >> "$R/attach.txt"
L1=$(grep -c 'iter=' "$R/job.txt")
wait $JOB; echo "job rc=$?" >> "$R/job.txt"
awk -v l0="$L0" -v l1="$L1" '/iter=/ { n++; split($0, a, "time_us="); t = a[2] + 0;
  if (n > 20 && n <= l0) { b += t; nb++ } else if (n > l0 && n <= l1) { d += t; nd++ } else if (n > l1) { p += t; np++ } }
  END { printf "before attach: %d iters mean %.1f us; during: %d iters mean %.1f us (%+.2f%%); after: %d iters mean %.1f us\n",
        nb, b/nb, nd, d/nd, (d/nd - b/nb) * 100 / (b/nb), np, p/np }' "$R/job.txt" > "$R/attach-overhead.txt"
cat "$R/attach-overhead.txt"
tar czf "$OUT/results.tgz" -C "$R" .
for f in doctor.txt cuda-copy.txt nccl-auto.txt explain-auto.txt explain-no-p2p.txt explain-no-p2p-no-shm.txt attach.txt; do echo "##### $f"; tail -n 25 "$R/$f"; done
