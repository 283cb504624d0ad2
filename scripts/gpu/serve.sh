#!/usr/bin/env bash
# GPU machine, one device call: `gdrtrace serve` running while the
# three NCCL modes run one after another as independent torch.distributed
# jobs (scripts/gpu/allreduce.py: a launcher and one process per rank,
# torch's own libnccl), with NCCL's log saved per mode and the
# agent's /metrics scraped every 2 s and after each job. The Debian
# prometheus is not on that machine: python scrapes.
# With one GPU (no NCCL transports between ranks) the jobs are instead
# torch copy loops (scripts/gpu/copy_loop.py) from pinned and from pageable
# host memory: expected gpu-host-dma with nothing staged, and host-staged
# with everything staged.
#
# Usage (repository root, the binary brought along):
#   bash scripts/gpu/serve.sh [BIN]          # BIN defaults to dist/gdrtrace
# Results under $OUT/serve/ (else /tmp/serve): env.txt, serve.err,
# nccl-MODE.log, metrics-MODE.txt (after the job), scrapes-MODE/ (during),
# summary.json and summary.txt (also printed): per mode, the ranks' scraped
# verdicts next to what NCCL's log says.
set -u
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
# shellcheck disable=SC2086
export $SAFE
B=${1:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp}/serve
rm -rf "$R"
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv; uname -r; date -u; } > "$R/env.txt" 2>&1
PORT=9464

# shellcheck disable=SC2086
env $SAFE "$B" serve --listen 127.0.0.1:$PORT --exited-retention 600s 2> "$R/serve.err" &
agent=$!
for _ in $(seq 600); do
  grep -q "serving metrics" "$R/serve.err" && break
  kill -0 $agent 2>/dev/null || break
  sleep 0.1
done
grep -q "serving metrics" "$R/serve.err" || { cat "$R/serve.err"; exit 1; }

scrape() { # FILE
  python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=20).read())' \
    "$PORT" "$1" 2>> "$R/scrape-errors.txt"
}

# watched MODE LOG CMD...: runs a job while /metrics is scraped every 2 s
# (scrapes-MODE/), then once more after it (metrics-MODE.txt).
watched() {
  local mode=$1 log=$2
  shift 2
  mkdir -p "$R/scrapes-$mode"
  ( n=0; while :; do scrape "$R/scrapes-$mode/$(printf %03d $n).txt"; n=$((n + 1)); sleep 2; done ) &
  local scraper=$!
  "$@" > "$log" 2>&1
  echo "job rc=$?" >> "$log"
  kill $scraper 2>/dev/null
  wait $scraper 2>/dev/null
  sleep 3
  scrape "$R/metrics-$mode.txt"
}
stop_agent() {
  kill -TERM $agent
  wait $agent
  echo "serve rc=$?" >> "$R/serve.err"
}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
echo "gpus=$NGPU" >> "$R/env.txt"
if [ "$NGPU" -lt 2 ]; then
  for mode in pinned pageable; do
    watched $mode "$R/copy-$mode.log" python3 scripts/gpu/copy_loop.py --memory $mode --seconds 15
  done
  stop_agent
  python3 - "$R" <<'PY' | tee "$R/summary.txt"
import json, re, sys
sys.path.insert(0, "scripts/gpu")
from prom import series
R = sys.argv[1]
want = {"pinned": ("gpu-host-dma", 0.0), "pageable": ("host-staged", 1.0)}
summary = {}
for mode, (expect, ratio) in want.items():
    log = open(f"{R}/copy-{mode}.log", errors="replace").read()
    m = re.search(r"ready pid=(\d+)", log)
    b = re.search(r"copies=(\d+) bytes=(\d+)", log)
    if not m:
        print(f"{mode}: the job did not start: {log[-300:]}")
        continue
    pid = int(m.group(1))
    text = open(f"{R}/metrics-{mode}.txt").read()
    verdicts = sorted({l["transport"] for l, _ in series(text, "gdrtrace_transport_verdict_info") if int(l["pid"]) == pid})
    found = [l.get("discovered_by") for l, _ in series(text, "gdrtrace_process_info") if int(l["pid"]) == pid]
    moved = sum(v for l, v in series(text, "gdrtrace_moved_bytes_total") if int(l["pid"]) == pid)
    staged = sum(v for l, v in series(text, "gdrtrace_host_staged_bytes_total") if int(l["pid"]) == pid)
    calls = {l.get("transport"): v for l, v in series(text, "gdrtrace_calls_total") if int(l.get("pid", -1)) == pid}
    lost = sum(v for _, v in series(text, "gdrtrace_events_lost_total"))
    got = staged / moved if moved else None
    # A process without a communicator has no verdict series: its copies
    # are counted by transport (gdrtrace_calls_total).
    top = max(calls, key=calls.get) if calls else None
    ok = top == expect and got is not None and abs(got - ratio) < 0.01
    summary[mode] = {"pid": pid, "discovered_by": found, "verdicts": verdicts, "moved_bytes": moved,
                     "host_staged_bytes": staged, "most_calls": top, "job_bytes": int(b.group(2)) if b else None,
                     "calls_by_transport": calls, "events_lost": lost, "ok": ok}
    print(f"{mode}: pid {pid} ({found}): verdicts {verdicts}, moved {moved:.0f} (job says {b.group(2) if b else '?'}), "
          f"staged {staged:.0f}, calls {calls}, lost {lost:.0f}: expected {expect} with {ratio:.0%} staged: "
          f"{'ok' if ok else 'DIFFERS'}")
json.dump(summary, open(f"{R}/summary.json", "w"), indent=1)
PY
  tail -3 "$R/serve.err"
  exit 0
fi

i=0
for mode in auto no-p2p no-p2p-no-shm; do
  case $mode in
    auto) modeenv="" ;;
    no-p2p) modeenv="NCCL_P2P_DISABLE=1" ;;
    no-p2p-no-shm) modeenv="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" ;;
  esac
  # shellcheck disable=SC2086
  watched $mode "$R/nccl-$mode.log" env $SAFE $modeenv NCCL_DEBUG=INFO python3 scripts/gpu/allreduce.py \
    --ngpu "$NGPU" --seconds 15 --port $((29800 + i))
  i=$((i + 1))
done
stop_agent

python3 - "$R" <<'PY' | tee "$R/summary.txt"
import json, re, sys
sys.path.insert(0, "scripts/gpu")
from prom import series
R = sys.argv[1]
want = {"auto": "p2p/nvlink", "no-p2p": "shm", "no-p2p-no-shm": "socket"}

summary = {}
for mode, expect in want.items():
    log = open(f"{R}/nccl-{mode}.log", errors="replace").read()
    # NCCL INFO lines start with host:PID:TID; the transport lines say "via X".
    ranks = sorted({int(m.group(1)) for m in re.finditer(r"^\S+:(\d+):\d+ \[\d+\] NCCL INFO", log, re.M)})
    vias = sorted({m.group(1) for m in re.finditer(r" via (\S+)", log)})
    try:
        text = open(f"{R}/metrics-{mode}.txt").read()
    except OSError as e:
        summary[mode] = {"error": str(e)}
        print(f"{mode}: no scrape ({e})")
        continue
    verdicts = {}
    for l, _ in series(text, "gdrtrace_transport_verdict_info"):
        verdicts.setdefault(int(l["pid"]), set()).add((l["transport"], l["evidence_kind"], l.get("communicator", "")))
    found = {int(l["pid"]): l.get("discovered_by") for l, _ in series(text, "gdrtrace_process_info")}
    staged = {int(l["pid"]): v for l, v in series(text, "gdrtrace_host_staged_bytes_total")}
    moved = {int(l["pid"]): v for l, v in series(text, "gdrtrace_moved_bytes_total")}
    lost = sum(v for _, v in series(text, "gdrtrace_events_lost_total"))
    shed = sum(v for _, v in series(text, "gdrtrace_shed_total"))
    rows = []
    for pid in ranks:
        got = sorted({t for t, _, _ in verdicts.get(pid, set())})
        rows.append({
            "pid": pid, "discovered_by": found.get(pid), "transports": got,
            "evidence": sorted({e for _, e, _ in verdicts.get(pid, set())}),
            "communicators": len({c for _, _, c in verdicts.get(pid, set())}),
            "moved_bytes": moved.get(pid), "host_staged_bytes": staged.get(pid),
            "ok": got == [expect],
        })
    summary[mode] = {"expect": expect, "nccl_via": vias, "ranks": rows, "events_lost": lost, "shed": shed}
    print(f"{mode}: NCCL says via {', '.join(vias) or '?'}; expected {expect}; lost {lost:.0f}, shed {shed:.0f}")
    for r in rows:
        print(f"  pid {r['pid']} ({r['discovered_by']}): {r['transports']} [{', '.join(r['evidence'])}] "
              f"{r['communicators']} communicator(s), moved {r['moved_bytes']}, staged {r['host_staged_bytes']} "
              f"{'ok' if r['ok'] else 'DIFFERS'}")
json.dump(summary, open(f"{R}/summary.json", "w"), indent=1)
PY
tail -3 "$R/serve.err"
