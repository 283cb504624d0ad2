#!/usr/bin/env bash
# GPU machine, one device call: are the copy loop's estimates low by a cost
# per on phase or by a cost per trap? The 8 KiB pinned copy loop (3 s,
# scripts/gpu/overhead.py's, one process on GPU 0) under `run` with call
# budgets that give on phases of about 1 ms (auto), 3 ms (auto:5000) and
# 11 ms (auto:20000) at the same ten phases a second, $N rounds, the order
# rotated each round; an untraced job and a `--collectives exact` job per
# round. A cost per trap leaves each on phase's share of the job's rate the
# same whatever its length; a cost per phase shrinks with longer phases.
# Each traced job keeps its recording and the job's own blocks (200 copy
# pairs, their ends on CLOCK_MONOTONIC), to set each on phase against the
# copies the job made in it (scripts/gpu/phases.py, on the development
# machine).
# JOB=allreduce: the one-rank 8 KiB all-reduce loop instead (4 s, blocks of
# 50 calls).
# Usage: [N=3] [MODES="auto auto:5000 auto:20000"] [JOB=copies] bash scripts/gpu/phases.sh [BIN]
# Results under $OUT (default /tmp/phases): phases.txt, and per job NAME.rec.gz,
# NAME.json, NAME.records, NAME.summary.json.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${1:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp/phases}
N=${N:-3}
read -r -a modes <<< "${MODES:-auto auto:5000 auto:20000}"
HERE=$PWD/scripts/gpu
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$R/phases.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$B" --version; } > "$S" 2>&1
port=29950
JOB=${JOB:-copies}
secs=3
[ "$JOB" = allreduce ] && secs=4
one() { # NAME MODE (off: untraced)
  local name=$1 mode=$2
  port=$((port + 1))
  local job=(python3 "$HERE/overhead.py" job --job "$JOB" --ngpu 1 --sizes 8K --seconds "$secs" --port "$port"
    --summary "$R/$name.summary.json" --records "$R/$name.records")
  if [ "$mode" = off ]; then
    timeout -k 5 60 "${job[@]}" > "$R/$name.txt" 2>&1
  else
    timeout -k 5 60 "$B" run --collectives "$mode" --json "$R/$name.json" --record "$R/$name.rec" -- \
      "${job[@]}" > "$R/$name.txt" 2>&1
  fi
  echo "$name ($mode): rc=$?" >> "$S"
  python3 - "$R" "$name" "$mode" "$HERE" "$JOB" >> "$S" <<'PY'
import json, sys
R, name, mode, here, job = sys.argv[1:]
sys.path.insert(0, here)
from overhead import copies_of, sampled
try:
    s = json.load(open(f"{R}/{name}.summary.json"))["8K"]
    if job == "copies":
        own = s["copies"] + 400
        print(f"  {name}: copies made {own} (with the warm-up), {s['us_per_call']:.2f} us a copy pair, median of blocks")
    else:
        own = s["calls"] + 1
        print(f"  {name}: all-reduces made {own} (with the ProcessGroup's), {s['us_per_call']:.2f} us a call, median of blocks")
    if mode != "off":
        r = json.load(open(f"{R}/{name}.json"))
        got = copies_of(r)[0] if job == "copies" else sampled(r)[1]
        print(f"  {name}: reported {got} ({100 * (got - own) / own:+.1f}%)")
except (OSError, ValueError, KeyError) as e:
    print(f"  {name}: no result ({e})")
PY
  [ -f "$R/$name.rec" ] && gzip -f "$R/$name.rec"
}
for i in $(seq "$N"); do
  all=(off "${modes[@]}" exact)
  k=$(( (i - 1) % ${#all[@]} ))
  order=("${all[@]:k}" "${all[@]:0:k}")
  for m in "${order[@]}"; do one "${JOB:0:2}-$i-${m//:/-}" "$m"; done
done
cat "$S"
