#!/usr/bin/env bash
# GPU machine, one device call: what `gdrtrace serve` exports against each
# job's own count (issue 24), and the emulated two-node job under serve
# (issue 23's labels). One agent runs while four independent torch jobs run
# in turn: an 8 KiB pinned copy loop, a pageable one (scripts/gpu/copy_loop.py),
# a one-rank 8 KiB all-reduce loop (duty-cycled: estimates), and two ranks on
# emulated hosts (scripts/gpu/allreduce.py --hosts 2, NET/Socket). /metrics is
# scraped after each job; the summary compares moved, staged and collective
# counts (counted and estimated) with the job's own, and reads each
# histogram's p99 as Prometheus's histogram_quantile would.
# Usage: bash scripts/gpu/fleet.sh [BIN]     (BIN defaults to dist/gdrtrace)
# Results under $OUT (else /tmp/fleet): env.txt, serve.err, job logs,
# metrics-JOB.txt, nccl logs, summary.txt and summary.json.
set -u
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
# shellcheck disable=SC2086
export $SAFE
B=${1:-$PWD/dist/gdrtrace}
R=${OUT:-/tmp/fleet}
SECS=${SECS:-10}
mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader; uname -r; date -u; "$B" --version; } > "$R/env.txt" 2>&1
PORT=9464
"$B" serve --listen 127.0.0.1:$PORT --exited-retention 600s 2> "$R/serve.err" &
agent=$!
for _ in $(seq 600); do
  grep -q "serving metrics" "$R/serve.err" && break
  kill -0 $agent 2>/dev/null || break
  sleep 0.1
done
grep -q "serving metrics" "$R/serve.err" || { cat "$R/serve.err"; exit 1; }
scrape() { python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=20).read())' "$PORT" "$1"; }
job() { # NAME CMD...: the job, then a scrape once the agent has seen its end
  local name=$1; shift
  "$@" > "$R/$name.log" 2>&1
  echo "job rc=$?" >> "$R/$name.log"
  sleep 2
  scrape "$R/metrics-$name.txt"
}
job pinned python3 scripts/gpu/copy_loop.py --memory pinned --seconds "$SECS"
job pageable python3 scripts/gpu/copy_loop.py --memory pageable --seconds "$SECS"
job allreduce python3 scripts/gpu/allreduce.py --ngpu 1 --kib 8 --seconds "$SECS" --port 29811
job nodes python3 scripts/gpu/allreduce.py --ngpu 1 --hosts 2 --mib 1 --seconds "$SECS" --port 29812 --nccl-log "$R/nccl-nodes"
kill -TERM $agent; wait $agent; echo "serve rc=$?" >> "$R/serve.err"

python3 - "$R" <<'PY' | tee "$R/summary.txt"
import json, math, re, sys
sys.path.insert(0, "scripts/gpu")
from prom import series
R = sys.argv[1]
out = {}

def quantile(text, name, key, q=0.99):
    """histogram_quantile(q) per KEY label value of NAME's buckets."""
    by = {}
    for l, v in series(text, name + "_bucket"):
        by.setdefault(l.get(key, ""), []).append((math.inf if l["le"] == "+Inf" else float(l["le"]), v))
    res = {}
    for k, b in by.items():
        b.sort()
        total = b[-1][1]
        if total == 0:
            continue
        rank, lo, prev = q * total, 0.0, 0.0
        for le, c in b:
            if c >= rank:
                res[k] = (math.inf if le == math.inf else lo + (le - lo) * (rank - prev) / max(c - prev, 1e-12), int(total))
                break
            lo, prev = le, c
    return res

def per_pid(text, name, pid):
    return sum(v for l, v in series(text, name) if l.get("pid") == str(pid))

def err(got, want):
    return None if not want else round(100.0 * (got - want) / want, 2)

for mode in ("pinned", "pageable"):
    log = open(f"{R}/{mode}.log", errors="replace").read()
    m, b = re.search(r"ready pid=(\d+)", log), re.search(r"copies=(\d+) bytes=(\d+)", log)
    if not (m and b):
        print(f"{mode}: the job did not run: {log[-300:]}"); continue
    pid, own = int(m.group(1)), int(b.group(2))
    t = open(f"{R}/metrics-{mode}.txt").read()
    moved = per_pid(t, "gdrtrace_moved_estimated_bytes_total", pid)
    staged = per_pid(t, "gdrtrace_host_staged_estimated_bytes_total", pid)
    calls = {l["transport"]: v for l, v in series(t, "gdrtrace_calls_total") if l.get("pid") == str(pid)}
    want_staged = own if mode == "pageable" else 0
    out[mode] = {"pid": pid, "own_bytes": own, "moved": moved, "staged": staged, "moved_err_pct": err(moved, own),
                 "staged_err_pct": err(staged, want_staged) if want_staged else staged, "calls_by_transport": calls}
    print(f"{mode}: job {own} B; serve moved {moved:.0f} B ({err(moved, own)}%), staged {staged:.0f} B "
          f"({'%s%%' % err(staged, want_staged) if want_staged else 'want 0'}); calls {calls}")

log = open(f"{R}/allreduce.log", errors="replace").read()
m, c = re.search(r"rank0=(\d+)", log), re.search(r"rank 0 calls=(\d+)", log)
if m and c:
    pid, own = int(m.group(1)), int(c.group(1)) + 1  # the one before the loop
    t = open(f"{R}/metrics-allreduce.txt").read()
    counted = per_pid(t, "gdrtrace_collective_calls_total", pid)
    est = per_pid(t, "gdrtrace_collective_estimated_calls_total", pid)
    est_b = per_pid(t, "gdrtrace_collective_estimated_bytes_total", pid)
    moved = per_pid(t, "gdrtrace_moved_estimated_bytes_total", pid)
    ratio = per_pid(t, "gdrtrace_collective_sampled_ratio", pid)
    v = [(l["transport"], l["evidence_kind"], l["nranks"]) for l, _ in series(t, "gdrtrace_transport_verdict_info") if l.get("pid") == str(pid)]
    out["allreduce"] = {"pid": pid, "own_calls": own, "counted": counted, "estimated": est, "est_err_pct": err(est, own),
                        "est_bytes": est_b, "own_bytes": own * 8192, "moved": moved, "sampled_ratio": ratio, "verdicts": v}
    print(f"allreduce (one rank, 8 KiB): job {own} calls; serve counted {counted:.0f}, estimated {est:.0f} ({err(est, own)}%), "
          f"bytes est {est_b:.0f} vs {own * 8192}; sampled {ratio:.3f}; moved {moved:.0f} (one rank: 0 expected); verdicts {v}")
else:
    print(f"allreduce: the job did not run: {log[-300:]}")

log = open(f"{R}/nodes.log", errors="replace").read()
t = open(f"{R}/metrics-nodes.txt").read()
own = {int(r): int(n) + 1 for r, n in re.findall(r"rank (\d+) calls=(\d+)", log)}
rows = []
for l, _ in series(t, "gdrtrace_transport_verdict_info"):
    if l.get("nranks") != "2":
        continue
    r = int(l["rank"])
    est = sum(v for m, v in series(t, "gdrtrace_collective_estimated_calls_total") if m.get("pid") == l["pid"])
    rows.append({"pid": int(l["pid"]), "rank": r, "communicator": l["communicator"], "transport": l["transport"],
                 "host_staged": l["host_staged"], "net": l.get("net"), "cause": l.get("cause"),
                 "own_calls": own.get(r), "estimated_calls": est, "err_pct": err(est, own.get(r))})
out["nodes"] = rows
vias = sorted(set(re.findall(r" via (\S+)", "".join(open(f, errors="replace").read() for f in __import__("glob").glob(f"{R}/nccl-nodes.rank*.log")))))
print(f"nodes (2 emulated hosts, 1 MiB): NCCL says via {vias}")
for r in rows:
    print(f"  rank {r['rank']} pid {r['pid']} comm {r['communicator']}: {r['transport']} host_staged={r['host_staged']} "
          f"net={r['net']} cause={r['cause']}; calls {r['estimated_calls']:.0f} vs own {r['own_calls']} ({r['err_pct']}%)")

t = open(f"{R}/metrics-nodes.txt").read()
ops = quantile(t, "gdrtrace_operation_duration_seconds", "op")
regs = quantile(t, "gdrtrace_registration_duration_seconds", "backing")
out["p99"] = {"operations": {k: v for k, v in ops.items()}, "registrations": regs}
print("p99 (histogram_quantile over the agent's lifetime, last scrape):")
for k, (q, n) in sorted(ops.items(), key=lambda x: -x[1][1])[:12]:
    print(f"  op {k}: {q * 1e6:.2f} us over {n} calls{'  NOT FINITE' if math.isinf(q) else ''}")
for k, (q, n) in regs.items():
    print(f"  registration {k}: {q * 1e6:.2f} us over {n}{'  NOT FINITE' if math.isinf(q) else ''}")
lost = {l.get("reason"): v for l, v in series(t, "gdrtrace_events_lost_total") if v}
resets = 0
print(f"events lost: {lost or 0}")
json.dump(out, open(f"{R}/summary.json", "w"), indent=1, default=str)
PY
tail -2 "$R/serve.err"
