#!/usr/bin/env bash
# Issue 23 on a GPU machine, in one device call (one H200 is enough): an
# emulated two-node torch.distributed job (scripts/gpu/allreduce.py --hosts 2:
# two rank processes on GPU 0, each with its own NCCL_HOSTID in its
# environment, NCCL_DEBUG=INFO to a log per rank; NCCL then connects them
# only through its network, NET/Socket without an RDMA NIC), in three
# variants: default, NCCL_IB_DISABLE=1, NCCL_NET=Socket. Per variant:
#   1. `gdrtrace run --json --record` of the whole job;
#   2. `gdrtrace attach --pid LAUNCHER` past its set-up (steady state);
#      for the default variant also one attach per rank at the same time
#      (one report per "node", for `gdrtrace job`);
#   3. `explain --nccl-log` of each report and recording, `replay` of each
#      recording: verdict, net, cause, DISAGREES count (must be 0);
# then
#   4. `gdrtrace serve` while the default job runs: /metrics scraped;
#   5. `gdrtrace job rank0.json rank1.json` where the command exists;
#   6. `gdrtrace validate --no-ucx` (its emulated-node check).
# About 240 s on one H200.
# The binary is built elsewhere (no Rust there): `cargo build -p tracer
# --release`, copy target/release/gdrtrace to dist/ and carry dist.
# Usage: [GDRTRACE=BIN] bash scripts/gpu/nodes.sh
# Results: $OUT/summary.txt (written as it goes) and $OUT/nodes.tgz (work
# files under $OUT/work until then); the tarball's fixtures/
# holds reports/, logs/ and recordings/ named for tests/fixtures/
# (gpu-h200-nodes-{run,attach}-VARIANT; paths of the machine stripped),
# ready to drop in: tracer/tests/it/replays.rs checks them (`emulated_nodes_fixtures`).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
OUT=${OUT:-/tmp/gdr-nodes-out}
# Work files live under $OUT until the end (a run cut short by a time limit,
# e.g. under scripts/gpu/round.sh, still leaves them there), then go into
# one tarball.
R=$OUT/work
rm -rf "$R"; mkdir -p "$R/fixtures/reports" "$R/fixtures/logs" "$R/fixtures/recordings" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$OUT/summary.txt"
T0=$(date +%s)
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  env $SAFE python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  echo "rdma devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"; } > "$S" 2>&1
elapsed() { echo "  [t=$(( $(date +%s) - T0 )) s]"; }

wait_for() { for _ in $(seq $(($2 * 10))); do grep -q "$3" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

vars_of() {
  case $1 in
    default) echo "" ;;
    ib-disable) echo "NCCL_IB_DISABLE=1" ;;
    net-socket) echo "NCCL_NET=Socket" ;;
  esac
}

# Verdicts (transport, net, cause) of a report, replay's agreement, and
# explain's DISAGREES count and causes: NAME LOG
check() {
  local name=$1 log=$2
  "$B" replay "$R/$name.rec" --json "$R/$name.replayed.json" --format json > /dev/null 2> "$R/$name.replay.err"
  "$B" explain "$R/$name.json" --nccl-log "$log" > "$R/$name.explain.txt" 2>&1
  "$B" explain "$R/$name.rec" --nccl-log "$log" > "$R/$name.explain-rec.txt" 2>&1
  python3 - "$R/$name.json" "$R/$name.replayed.json" "$R/$name.explain.txt" "$R/$name.explain-rec.txt" <<'PY'
import json, sys
live_path, replay_path, ex, exr = sys.argv[1:5]
def v(path):
    try:
        return [(x["pid"], x["transport"], x.get("net"), x.get("basis"), x.get("cause")) for x in json.load(open(path))["verdicts"]]
    except Exception as e:
        return f"unreadable: {e}"
live = v(live_path)
for pid, t, net, basis, cause in (live if isinstance(live, list) else []):
    print(f"  pid {pid}: {t} ({net}) [{basis}] cause: {cause}")
rep = v(replay_path)
print(f"  replay: {'same' if rep == live else rep}")
for name, path in (("explain report", ex), ("explain record", exr)):
    text = open(path).read()
    causes = sorted({l.split("(cause: ")[1].rstrip(")") for l in text.splitlines() if "(cause: " in l})
    unexplained = text.count("no rule recognised a cause")
    print(f"  {name}: DISAGREES x{text.count('DISAGREES')}, unexplained paths x{unexplained}, causes {causes}")
PY
  grep -h "via " "$log" | grep -o "via [^ ]*" | sort | uniq -c | sed 's/^/  NCCL log:/'
  grep -h -e "NCCL_HOSTID set" -e "NET/IB : No device" -e "Using network" -e "NET/Socket : Using" "$log" \
    | sed 's/^[^ ]* [^ ]* NCCL INFO //' | sort | uniq -c | sed 's/^/  NCCL log:/'
}

# Fixture copies with the machine's paths stripped: NAME FIXTURE LOG
keep() {
  local name=$1 fixture=$2 log=$3
  sed -e "s#$(dirname "$B")/##g" -e "s#$R/##g" -e "s#$HERE/##g" "$R/$name.json" > "$R/fixtures/reports/$fixture.json"
  sed -e "s#$(dirname "$B")/##g" -e "s#$R/##g" -e "s#$HERE/##g" "$R/$name.rec" | gzip -9 > "$R/fixtures/recordings/$fixture.rec.gz"
  cp "$log" "$R/fixtures/logs/$fixture.log"
}

job() { # VARIANT SECONDS PORT LOGPREFIX: the emulated two-node job, in the foreground
  # shellcheck disable=SC2046
  env $SAFE $(vars_of "$1") python3 "$HERE/allreduce.py" --hosts 2 --ngpu 1 --mib 1 --seconds "$2" \
    --port "$3" --nccl-log "$4"
}

port=29700
for variant in default ib-disable net-socket; do
  port=$((port + 1))
  # 1. The whole job under run.
  echo "== 1. run, $variant ($(vars_of $variant))$(elapsed)" >> "$S"
  # shellcheck disable=SC2046
  "$B" run --json "$R/run-$variant.json" --record "$R/run-$variant.rec" -- \
    env $SAFE $(vars_of $variant) python3 "$HERE/allreduce.py" --hosts 2 --ngpu 1 --mib 1 --seconds 5 \
    --port $port --nccl-log "$R/nccl-run-$variant" > "$R/run-$variant.txt" 2>&1
  echo "  run rc=$? $(grep -h 'calls=' "$R/run-$variant.txt" | tr '\n' ' ')" >> "$S"
  cat "$R"/nccl-run-$variant.rank*.log > "$R/nccl-run-$variant.log" 2>/dev/null
  check "run-$variant" "$R/nccl-run-$variant.log" >> "$S" 2>&1
  keep "run-$variant" "gpu-h200-nodes-run-$variant" "$R/nccl-run-$variant.log"

  # 2. Attached past the set-up.
  port=$((port + 1))
  # shellcheck disable=SC2046
  setsid env $SAFE $(vars_of $variant) python3 "$HERE/allreduce.py" --hosts 2 --ngpu 1 --mib 1 --seconds 40 \
    --port $port --nccl-log "$R/nccl-attach-$variant" > "$R/job-attach-$variant.out" 2>&1 &
  J=$!
  per_rank=()
  wait_for "$R/job-attach-$variant.out" 90 '^ready' || echo "  job $variant not ready" >> "$S"
  L=$(sed -n 's/^ready launcher=\([0-9]*\).*/\1/p' "$R/job-attach-$variant.out")
  sleep 2
  echo "== 2. attach --pid $L (launcher), $variant$(elapsed)" >> "$S"
  if [ "$variant" = default ]; then
    # One tracer per rank as well, as one per node would be.
    for rank in 0 1; do
      P=$(ps -o pid=,args= --ppid "$L" | awk -v r=$rank '{for (i = 2; i < NF; i++) if ($i == "--rank" && $(i + 1) == r) print $1}' | head -1)
      "$B" attach --pid "$P" --duration 6s --json "$R/rank$rank.json" --record "$R/rank$rank.rec" \
        > "$R/rank$rank.txt" 2>&1 &
      per_rank+=($!)
    done
  fi
  "$B" attach --pid "$L" --duration 6s --json "$R/attach-$variant.json" --record "$R/attach-$variant.rec" \
    > "$R/attach-$variant.txt" 2>&1
  echo "  attach rc=$?" >> "$S"
  for p in "${per_rank[@]}"; do wait "$p"; done
  kill -TERM -- -"$J" 2>/dev/null; wait "$J" 2>/dev/null
  cat "$R"/nccl-attach-$variant.rank*.log > "$R/nccl-attach-$variant.log" 2>/dev/null
  check "attach-$variant" "$R/nccl-attach-$variant.log" >> "$S" 2>&1
  keep "attach-$variant" "gpu-h200-nodes-attach-$variant" "$R/nccl-attach-$variant.log"
done

# 4. serve while the default job runs.
echo "== 4. serve$(elapsed)" >> "$S"
SPORT=9474
env $SAFE "$B" serve --listen 127.0.0.1:$SPORT --exited-retention 600s 2> "$R/serve.err" &
agent=$!
for _ in $(seq 600); do grep -q "serving metrics" "$R/serve.err" && break; kill -0 $agent 2>/dev/null || break; sleep 0.1; done
scrape() { python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=20).read())' \
  "$SPORT" "$1" 2>> "$R/scrape-errors.txt"; }
( n=0; while :; do scrape "$R/scrape-$(printf %03d $n).txt"; n=$((n + 1)); sleep 2; done ) &
scraper=$!
job default 10 29790 "$R/nccl-serve" > "$R/job-serve.out" 2>&1
kill $scraper 2>/dev/null; wait $scraper 2>/dev/null
sleep 3
scrape "$R/metrics-serve.txt"
kill -TERM $agent; wait $agent; echo "  serve rc=$?" >> "$S"
python3 - "$R/metrics-serve.txt" "$R/job-serve.out" >> "$S" 2>&1 <<'PY'
import re, sys
sys.path.insert(0, "scripts/gpu")
from prom import series
text = open(sys.argv[1]).read()
out = open(sys.argv[2]).read()
print("  job:", " ".join(l for l in out.splitlines() if "calls=" in l))
ranks = set()
for l, _ in series(text, "gdrtrace_transport_verdict_info"):
    ranks.add(int(l["pid"]))
    print("  verdict_info", {k: v for k, v in l.items() if k != "__name__"})
for name in ("gdrtrace_collective_calls_total", "gdrtrace_collective_bytes_total", "gdrtrace_host_staged_bytes_total", "gdrtrace_moved_bytes_total"):
    vals = {int(l["pid"]): v for l, v in series(text, name) if "pid" in l and int(l["pid"]) in ranks}
    print(f"  {name}: {vals}")
PY
tail -2 "$R/serve.err" | sed 's/^/  serve: /' >> "$S"

# 5. One job across the two per-rank reports.
echo "== 5. job rank0.json rank1.json$(elapsed)" >> "$S"
if "$B" job --help > /dev/null 2>&1; then
  "$B" job "$R/rank0.json" "$R/rank1.json" > "$R/job.txt" 2>&1; echo "  job rc=$?" >> "$S"
  sed 's/^/  /' "$R/job.txt" | head -40 >> "$S"
else
  echo "  skipping: this gdrtrace has no job command" >> "$S"
fi
for rank in 0 1; do
  "$B" explain "$R/rank$rank.json" --nccl-log "$R/nccl-attach-default.log" > "$R/rank$rank.explain.txt" 2>&1
  python3 - "$R/rank$rank.json" $rank >> "$S" 2>&1 <<'PY'
import json, sys
for x in json.load(open(sys.argv[1]))["verdicts"]:
    print(f"  rank{sys.argv[2]} pid {x['pid']}: {x['transport']} ({x.get('net')}) cause: {x.get('cause')}")
PY
  echo "  rank$rank explain: DISAGREES x$(grep -c DISAGREES "$R/rank$rank.explain.txt"), causes: $(grep -o '(cause: [^)]*)' "$R/rank$rank.explain.txt" | sort -u | tr '\n' ' ')" >> "$S"
done

# 6. validate (its emulated-node check; UCX left out for time).
echo "== 6. validate --no-ucx$(elapsed)" >> "$S"
"$B" validate --no-ucx > "$R/validate.txt" 2>&1; echo "  validate rc=$?" >> "$S"
sed -n '/across emulated nodes/,/^$/p' "$R/validate.txt" >> "$S"
grep -E "nodes x|checks passed|FAIL" "$R/validate.txt" >> "$S"
echo "== done$(elapsed)" >> "$S"

cat "$S"
tar czf "$OUT/nodes.tgz" -C "$R" . && rm -rf "$R"
