#!/usr/bin/env bash
# Issue 12 on a GPU machine, in one device call, with independent torch jobs
# (not `gdrtrace drive`) and NCCL's own log as the oracle:
#   1. a pinned-only and a pageable copy loop under `gdrtrace run`: the staged
#      share (expect 0% and 100%) and the explain rules that fire;
#   2. the same loops attached after their buffers were allocated: how copies
#      of pre-existing buffers are classified (and the /proc/PID/maps lines
#      that hold the buffers), and whether cudaHostRegister shows in VmPin;
#   3. per NCCL mode (auto, NCCL_P2P_DISABLE=1, +NCCL_SHM_DISABLE=1): a full
#      `attach --json --record` report of a job past its set-up, its
#      NCCL_DEBUG=INFO log, and `replay`/`explain` of both against the live
#      verdicts and the log;
#   4. two concurrent jobs on the same GPUs, auto and NCCL_P2P_DISABLE=1,
#      under one `gdrtrace attach --all`: each rank's verdict.
# The binary is built elsewhere (no Rust there): `cargo build -p tracer
# --release`, copy target/release/gdrtrace to dist/ and carry dist.
# Usage: [NGPU=N] [GDRTRACE=BIN] bash scripts/gpu/verdicts.sh
# Results: $OUT/summary.txt and $OUT/verdicts.tgz; the tarball's fixtures/
# holds reports/, logs/ and recordings/ named for tests/fixtures/ (paths of
# the machine stripped), ready to drop in.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
R=/tmp/gdr-verdicts
OUT=${OUT:-/tmp/gdr-verdicts-out}
rm -rf "$R"; mkdir -p "$R/fixtures/reports" "$R/fixtures/logs" "$R/fixtures/recordings" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# Written as it goes: a run cut short still returns what it found.
S="$OUT/summary.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  env $SAFE python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  echo "NGPU=$NGPU"; } > "$S" 2>&1

# Waits (at most $2 s) until file $1 has a line matching $3.
wait_for() { for _ in $(seq $(($2 * 10))); do grep -q "$3" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# Staged share and fired rules of a report.
staged() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
st = r["staging"]["processes"]
moved = sum(p["moved_bytes"] for p in st); staged = sum(p["staged_bytes"] for p in st)
copies = {}
for o in r["operations"]:
    if o["name"].startswith("cuMemcpy"):
        copies[f'{o["name"]} [{o["transport"]}]'] = o["calls"]
rules = sorted({f["rule"] for f in r["explain"]["findings"]})
print(f"  staged {staged} of {moved} bytes ({100 * staged / max(moved, 1):.1f}%); rules fired: {rules or 'none'}")
print(f"  copies: {copies}")
for o in r["operations"]:
    if o["name"].startswith("cuMemcpy"):
        print(f'  evidence {o["name"]} [{o["transport"]}]: {o["evidence"][:300]}')
PY
}

# 1. Copy loops traced from their start.
for mem in pinned pageable; do
  "$B" run --json "$R/copy-$mem.json" -- env $SAFE python3 "$HERE/copy_loop.py" --memory $mem --seconds 5 \
    > "$R/copy-$mem.txt" 2>&1
  echo "== 1. run: $mem copy loop (rc=$?)" >> "$S"; staged "$R/copy-$mem.json" >> "$S" 2>&1
done

# 2. The same loops attached after allocation; and VmPin under cudaHostRegister.
for mem in pinned pageable; do
  setsid env $SAFE python3 "$HERE/copy_loop.py" --memory $mem --seconds 8 --hold 4 --maps "$R/maps-$mem.txt" \
    > "$R/copy-attach-$mem.out" 2>&1 &
  wait_for "$R/copy-attach-$mem.out" 60 '^ready' || echo "copy loop $mem not ready" >> "$S"
  P=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$R/copy-attach-$mem.out")
  "$B" attach --pid "$P" --duration 6s --json "$R/copy-attach-$mem.json" --record "$R/copy-attach-$mem.rec" \
    > "$R/copy-attach-$mem.txt" 2>&1
  echo "== 2. attach after allocation: $mem (rc=$?): $(head -1 "$R/copy-attach-$mem.out")" >> "$S"
  staged "$R/copy-attach-$mem.json" >> "$S" 2>&1
  grep '^\[' "$R/maps-$mem.txt" | sed 's/^/  maps: /' >> "$S"
  wait
done
env $SAFE python3 "$HERE/copy_loop.py" --memory registered --seconds 1 2>&1 | grep -i vmpin | head -2 | sed 's/^/== 2. /' >> "$S"

# Verdict lines, DISAGREES count and re-judging notes of explain's output.
verdict_summary() {
  python3 - "$@" <<'PY'
import json, sys
live_path, replay_path, explain_json, explain_rec = sys.argv[1:5]
def v(path):
    return [(x["pid"], x["transport"], x.get("basis")) for x in json.load(open(path))["verdicts"]]
live, rep = v(live_path), v(replay_path)
print(f"  live verdicts   {live}")
print(f"  replay          {'same' if rep == live else rep}")
for name, path in (("explain report ", explain_json), ("explain record ", explain_rec)):
    text = open(path).read()
    lines = [l for l in text.splitlines() if l.startswith("pid ") or "NCCL log: via" in l or "note:" in l]
    print(f"  {name} DISAGREES x{text.count('DISAGREES')}: " + " | ".join(l.strip() for l in lines))
PY
}

# Attach to launcher $1 (or --all) into name $2, then replay and explain with log $3.
attach_and_check() {
  local who=$1 name=$2 log=$3
  "$B" attach $who --interval 1s --duration 8s --json "$R/$name.json" --record "$R/$name.rec" \
    --jsonl "$R/$name.jsonl" > "$R/$name.txt" 2>&1
  echo "  attach rc=$? $(grep -c . "$R/$name.jsonl") interval records" >> "$S"
  "$B" replay "$R/$name.rec" --json "$R/$name.replayed.json" --format json > /dev/null 2> "$R/$name.replay.err"
  "$B" explain "$R/$name.json" --nccl-log "$log" > "$R/$name.explain.txt" 2>&1
  "$B" explain "$R/$name.rec" --nccl-log "$log" > "$R/$name.explain-rec.txt" 2>&1
  verdict_summary "$R/$name.json" "$R/$name.replayed.json" "$R/$name.explain.txt" "$R/$name.explain-rec.txt" >> "$S" 2>&1
  grep -h "via " "$log" | grep -o "via [^ ]*" | sort | uniq -c | sed 's/^/  NCCL log:/' >> "$S"
}

# Fixture copies with the machine's paths stripped.
keep() {
  local name=$1 fixture=$2 log=$3
  sed -e "s#$(dirname "$B")/##g" -e "s#$R/##g" -e "s#$HERE/##g" "$R/$name.json" > "$R/fixtures/reports/$fixture.json"
  sed -e "s#$(dirname "$B")/##g" -e "s#$R/##g" -e "s#$HERE/##g" "$R/$name.rec" | gzip -9 > "$R/fixtures/recordings/$fixture.rec.gz"
  cp "$log" "$R/fixtures/logs/$fixture.log"
}

# 3. One job per NCCL mode, attached past its set-up.
port=29510
for m in auto no-p2p no-p2p-no-shm; do
  case $m in
    auto) vars="" ;;
    no-p2p) vars="NCCL_P2P_DISABLE=1" ;;
    no-p2p-no-shm) vars="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" ;;
  esac
  port=$((port + 1))
  setsid env $SAFE NCCL_DEBUG=INFO $vars python3 "$HERE/allreduce.py" --ngpu "$NGPU" --seconds 300 --port $port \
    > "$R/nccl-$m.log" 2>&1 &
  J=$!
  wait_for "$R/nccl-$m.log" 120 '^ready' || echo "job $m not ready" >> "$S"
  L=$(sed -n 's/^ready launcher=\([0-9]*\).*/\1/p' "$R/nccl-$m.log")
  sleep 3
  echo "== 3. attach --pid $L (launcher), mode $m ($vars)" >> "$S"
  attach_and_check "--pid $L" "attach-$m" "$R/nccl-$m.log"
  kill -TERM -- -"$J" 2>/dev/null; wait "$J" 2>/dev/null
  keep "attach-$m" "gpu-h200-attach-full-$m" "$R/nccl-$m.log"
done

# 4. Two jobs in different modes on the same GPUs, under one attach --all.
setsid env $SAFE NCCL_DEBUG=INFO python3 "$HERE/allreduce.py" --ngpu "$NGPU" --seconds 300 --port 29601 \
  > "$R/two-a.log" 2>&1 &
A=$!
setsid env $SAFE NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 python3 "$HERE/allreduce.py" --ngpu "$NGPU" --seconds 300 --port 29602 \
  > "$R/two-b.log" 2>&1 &
Bj=$!
wait_for "$R/two-a.log" 120 '^ready' && wait_for "$R/two-b.log" 120 '^ready' || echo "two jobs not ready" >> "$S"
sleep 3
echo "== 4. two jobs under one attach --all: A auto (launcher $(sed -n 's/^ready launcher=\([0-9]*\).*/\1/p' "$R/two-a.log")), B NCCL_P2P_DISABLE=1 (launcher $(sed -n 's/^ready launcher=\([0-9]*\).*/\1/p' "$R/two-b.log"))" >> "$S"
cat "$R/two-a.log" "$R/two-b.log" > "$R/two.log"
attach_and_check "--all" "attach-two-jobs" "$R/two.log"
python3 - "$R/attach-two-jobs.json" >> "$S" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
procs = {p["pid"]: p for p in r["processes"]}
for v in r["verdicts"]:
    p = procs.get(v["pid"], {})
    mode = "no-p2p" if "NCCL_P2P_DISABLE" in p.get("env", {}) else "auto"
    print(f"  pid {v['pid']} parent {p.get('parent')} job {mode}: {v['transport']} -- {v['evidence'][-1][:200]}")
print("  gpu_links:", {k: v for k, v in (r.get("gpu_links") or {}).items() if k != "gpu_processes"},
      "gpu_processes:", len((r.get("gpu_links") or {}).get("gpu_processes") or []))
PY
kill -TERM -- -"$A" -"$Bj" 2>/dev/null; wait 2>/dev/null
keep "attach-two-jobs" "gpu-h200-attach-two-jobs" "$R/two.log"

cat "$S"
tar czf "$OUT/verdicts.tgz" -C "$R" .
