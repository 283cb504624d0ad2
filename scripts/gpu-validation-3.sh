#!/usr/bin/env bash
# Third GPU-machine run (2x H200), in two parts that each fit one device call:
#   part 1: topo, `gdrtrace validate` (the main job) recorded per workload
#           (cuda-copy, the NCCL modes): the recordings become replay fixtures;
#   part 2: attach to an NCCL job past its set-up, per transport mode
#           (transport within the first interval), and the attach overhead
#           with the tracer on and off interleaved on one job.
# Part 3 repeats part 2's overhead measurement alone (after a fix).
# Usage: scripts/gpu-validation-3.sh 1|2|3. Results in $OUT/results-N.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
part=${1:?part 1 or 2}
R=/tmp/gdr-results3-$part
rm -rf "$R"; mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
modes="auto no-p2p no-p2p-no-shm"

if [ "$part" = 1 ]; then
  { nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv; uname -r; } > "$R/env.txt" 2>&1
  # topo (both GPUs, NVLink from NVML, BAR1, no NIC) and the NVLink counter
  # test under an NCCL job: scripts/gpu-topo-check.sh writes to $R/topo-check.
  OUT=$R GDRTRACE=$B TOPO_TEST=$PWD/dist/topo-test bash scripts/gpu-topo-check.sh > "$R/topo-check.txt" 2>&1
  "$B" validate --json "$R/validate.json" --record "$R/validate.rec.jsonl" > "$R/validate.txt" 2>&1
  echo "rc=$?" >> "$R/validate.txt"
  gzip -9 "$R"/validate.rec.jsonl*
  grep -E "^validate|^  (ok|FAIL)" "$R/validate.txt" | head -70
  grep -B2 -A12 -i "^explain" "$R/validate.txt" | head -60
  cat "$R/topo-check.txt" | tail -n 40
fi

if [ "$part" = 2 ] || [ "$part" = 3 ]; then
  [ "$part" = 3 ] && modes=""   # part 3: the overhead measurement alone
  # Attach per mode to a job that finished its set-up before the tracer came.
  for m in $modes; do
    setsid "$B" drive nccl --mode $m --size 256M --duration 30s > "$R/job-$m.txt" 2>&1 &
    sleep 13
    P=$(pgrep -o -f "drive nccl --mode $m --size 256M")
    "$B" attach --pid "$P" --interval 1s --duration 6s --jsonl "$R/attach-$m.jsonl" --json "$R/attach-$m.json" \
      > "$R/attach-$m.txt" 2>&1
    echo "rc=$?" >> "$R/attach-$m.txt"
    wait
  done
  # Overhead: tracer on and off interleaved on one job; job lines timestamped.
  setsid bash -c "'$B' drive nccl --mode auto --size 256M --duration 75s 2>&1 | python3 -u -c 'import sys,time
for l in sys.stdin: sys.stdout.write(\"%.3f %s\" % (time.time(), l))' > '$R/job-overhead.txt'" &
  sleep 15
  P=$(pgrep -o -f "drive nccl --mode auto --size 256M --duration 75s")
  for k in 1 2; do
    echo "on $(date +%s.%N)" >> "$R/windows.txt"
    "$B" attach --pid "$P" --duration 12s --interval 3s --json "$R/overhead-$k.json" > "$R/overhead-$k.txt" 2>&1
    echo "off $(date +%s.%N)" >> "$R/windows.txt"
    sleep 12
  done
  wait
  python3 - "$R" > "$R/summary.txt" <<'PY'
import json, sys, statistics as st
R = sys.argv[1]
expect = {"auto": "p2p/nvlink", "no-p2p": "shm", "no-p2p-no-shm": "socket"}
for m, want in expect.items():
    import os
    if not os.path.exists(f"{R}/attach-{m}.jsonl"):
        continue
    try:
        first = json.loads(open(f"{R}/attach-{m}.jsonl").readline())
        rep = json.load(open(f"{R}/attach-{m}.json"))
    except Exception as e:
        print(f"{m}: no attach output ({e})"); continue
    ranks = [p for p in first["processes"] if p.get("verdict")]
    got = sorted({p["verdict"] for p in ranks})
    att = rep["workloads"][0]["attach"]
    final = sorted({v["transport"] for v in rep.get("verdicts", [])})
    print(f"{m}: first interval at {first['elapsed_s']:.1f}s: {len(ranks)} ranks with verdicts {got} "
          f"(want {want}: {'ok' if len(ranks) == 2 and got == [want] else 'FAIL'}); final {final}; "
          f"attach {att['latency_ms']:.0f} ms, detach {att.get('detach_ms', -1):.0f} ms of {att.get('uprobes_detached')} uprobes")
w = [l.split() for l in open(f"{R}/windows.txt")]
on = [(float(w[i][1]), float(w[i + 1][1])) for i in range(0, len(w), 2)]
lat = [json.load(open(f"{R}/overhead-{k}.json"))["workloads"][0]["attach"]["latency_ms"] / 1e3 for k in (1, 2)]
rows = [(float(l.split()[0]), float(l.split("time_us=")[1].split()[0])) for l in open(f"{R}/job-overhead.txt") if "time_us=" in l]
t0 = rows[0][0]
def state(t):
    for (a, b), L in zip(on, lat):
        if a + L + 0.5 <= t <= b - 0.2: return "on"
        if a - 0.5 <= t <= b + 2.0: return "edge"
    return "off" if t > t0 + 10 else "warm"
on_t = [x for t, x in rows if state(t) == "on"]; off_t = [x for t, x in rows if state(t) == "off"]
print(f"overhead: on {len(on_t)} iters mean {st.mean(on_t):.2f} us median {st.median(on_t):.2f}; "
      f"off {len(off_t)} iters mean {st.mean(off_t):.2f} us median {st.median(off_t):.2f}; "
      f"on/off mean {st.mean(on_t)/st.mean(off_t):.4f} median {st.median(on_t)/st.median(off_t):.4f}; "
      f"windows on {[round(b - a, 1) for a, b in on]} s")
PY
  cat "$R/summary.txt"
  for m in $modes; do echo "== $m"; head -n 8 "$R/attach-$m.txt"; done
  grep -h "detached\|attached to" "$R"/overhead-*.txt
fi
tar czf "$OUT/results-$part.tgz" -C "$R" .
