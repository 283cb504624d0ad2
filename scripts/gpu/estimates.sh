#!/usr/bin/env bash
# GPU machine, one device call: the duty cycle's estimates against each
# job's own timeline (issues 24 and 25). Every job is scripts/gpu/overhead.py's
# (one process, GPU 0) with --records: a line per block of calls (50
# all-reduces or 200 copy pairs) with the block's end on CLOCK_MONOTONIC,
# the clock of the recording's `aggregates` lines. Each traced job keeps its
# recording (gzipped), so the estimator's intervals can be set against the
# calls the job made in each of them, on the development machine, through
# `gdrtrace replay` and the same code.
#   1. the one-rank 8 KiB all-reduce loop, 4 s, under `run` (auto), $N times;
#   2. the same, 10 s, once; 3. the same, 4 s, `--collectives exact`, once;
#   4. the 8 KiB pinned copy loop, 3 s, under `run` (auto), $N times;
#   5. the same, `--collectives exact`, once.
# Usage: [N=3] bash scripts/gpu/estimates.sh [BIN]   (BIN defaults to dist/gdrtrace)
#   AB="OLD NEW" instead: A/B of two binaries in one call, N rounds of a 4 s
#   all-reduce job and a 3 s copy job under each, order alternating
#   (names ar4-I-TAG, cp3-I-TAG, TAG the binary's file name).
# Results under $OUT: estimates.txt (per job: its own count, the report's
# counted and estimated), and per job NAME.rec.gz, NAME.json, NAME.records.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${1:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp/estimates}
N=${N:-3}
HERE=$PWD/scripts/gpu
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$R/estimates.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$B" --version; } > "$S" 2>&1
port=29900
one() { # NAME JOB SECONDS [gdrtrace run flags...]
  local name=$1 job=$2 secs=$3
  shift 3
  port=$((port + 1))
  timeout -k 5 60 "$B" run "$@" --json "$R/$name.json" --record "$R/$name.rec" -- \
    python3 "$HERE/overhead.py" job --job "$job" --ngpu 1 --sizes 8K --seconds "$secs" --port "$port" \
    --summary "$R/$name.summary.json" --records "$R/$name.records" > "$R/$name.txt" 2>&1
  echo "$name: rc=$?" >> "$S"
  python3 - "$R" "$name" "$job" "$HERE" >> "$S" <<'PY'
import json, sys
R, name, job, here = sys.argv[1:]
sys.path.insert(0, here)
from overhead import copies_of, sampled, traps_after_budget  # the bench's own readers
try:
    s = json.load(open(f"{R}/{name}.summary.json"))["8K"]
    r = json.load(open(f"{R}/{name}.json"))
except (OSError, ValueError) as e:
    print(f"  {name}: no result ({e})"); sys.exit()
if job == "copies":
    own, (got, _) = s["copies"], copies_of(r)
    bound = any(o.get("lower_bound") for o in r.get("operations", []))
    print(f"  {name}: copies made {own} (+400 warm-up), reported {got} ({100 * (got - own - 400) / (own + 400):+.1f}%)"
          + (" marked a lower bound" if bound else ""))
else:
    own, (_, est, _) = s["calls"], sampled(r)
    print(f"  {name}: all-reduces made {own} (+1 ProcessGroup warm-up), estimated {est} ({100 * (est - own) / own:+.1f}%)")
worst, first = traps_after_budget(f"{R}/{name}.rec")
print(f"  {name}: most traps counted in a second after the first over budget {worst} (over at {first})")
PY
  gzip -f "$R/$name.rec"
}
if [ -n "${AB:-}" ]; then
  read -r -a bins <<< "$AB"
  for i in $(seq "$N"); do
    order=("${bins[@]}")
    [ $((i % 2)) -eq 0 ] && order=("${bins[1]}" "${bins[0]}")
    for job in "allreduce ar4 4" "copies cp3 3"; do
      read -r j n secs <<< "$job"
      for b in "${order[@]}"; do B=$b one "$n-$i-$(basename "$b")" "$j" "$secs"; done
    done
  done
  cat "$S"
  exit 0
fi
for i in $(seq "$N"); do one "ar4-$i" allreduce 4; done
one ar10 allreduce 10
one ar4-exact allreduce 4 --collectives exact
for i in $(seq "$N"); do one "cp3-$i" copies 3; done
one cp3-exact copies 3 --collectives exact
cat "$S"
