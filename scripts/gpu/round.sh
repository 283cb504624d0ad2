#!/usr/bin/env bash
# One device call that runs several of the GPU scripts in turn, each with
# its own time limit and its own results folder, and brings back at most
# eight files (the device tool's limit): per script its summary and one
# tarball of everything else.
# Usage: bash scripts/gpu/round.sh NAME:SECONDS [NAME:SECONDS ...]
#   NAME is a script scripts/gpu/NAME.sh; it writes under $OUT (set here
#   to a folder of its own). The binary travels as dist/gdrtrace.
# Results under $OUT: round.txt (what ran, exit codes, seconds), and per
# script NAME.txt (its summary files, concatenated) and NAME.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/gdr-round-out}
W=/tmp/gdr-round
rm -rf "$W"; mkdir -p "$W" "$FINAL"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader; } > "$FINAL/round.txt" 2>&1
for spec in "$@"; do
  name=${spec%%:*}; limit=${spec#*:}
  [ -f "scripts/gpu/$name.sh" ] || { echo "$name: no scripts/gpu/$name.sh" >> "$FINAL/round.txt"; continue; }
  mkdir -p "$W/$name"
  t0=$(date +%s)
  OUT="$W/$name" timeout -k 10 "$limit" bash "scripts/gpu/$name.sh" > "$W/$name/stdout.txt" 2>&1
  rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s (limit $limit s)" >> "$FINAL/round.txt"
  # Leftovers of a script that ran out of time must not disturb the next.
  pkill -f 'gdrtrace (run|attach|serve|validate)' 2>/dev/null
  pkill -f 'scripts/gpu/.*\.py' 2>/dev/null
  sleep 1
  for f in "$W/$name"/*.txt; do echo "== $(basename "$f")"; cat "$f"; done > "$FINAL/$name.txt" 2>/dev/null
  tar czf "$FINAL/$name.tgz" -C "$W" "$name"
  ls -la "$FINAL/$name.tgz" >> "$FINAL/round.txt"
done
