#!/usr/bin/env bash
# Second GPU-machine run (2x H200): `gdrtrace validate` (the main job) with
# the GPU workloads, attach overhead measured with the tracer on and off
# interleaved on one running NCCL job, and what a rank exposes in /proc per
# NCCL transport (input for attach-time evidence). Results in $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
R=/tmp/gdr-results2
rm -rf "$R"; mkdir -p "$R"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
"$B" validate --json "$R/validate.json" > "$R/validate.txt" 2>&1; echo "rc=$?" >> "$R/validate.txt"
# Attach on/off interleaved on one job; every job line is timestamped.
setsid bash -c "'$B' drive nccl --mode auto --size 256M --duration 100s 2>&1 | python3 -u -c 'import sys,time
for l in sys.stdin: sys.stdout.write(\"%.3f %s\" % (time.time(), l))' > '$R/job.txt'" &
sleep 15
P=$(pgrep -o -x gdrtrace)
for k in 1 2 3; do
  echo "on $(date +%s.%N)" >> "$R/windows.txt"
  "$B" attach --pid "$P" --duration 12s --interval 3s --json "$R/attach-$k.json" > "$R/attach-$k.txt" 2>&1
  echo "off $(date +%s.%N)" >> "$R/windows.txt"
  sleep 12
done
wait
python3 - "$R" > "$R/attach-overhead.txt" <<'PY'
import sys, statistics as st
R = sys.argv[1]
w = [l.split() for l in open(f"{R}/windows.txt")]
on = [(float(w[i][1]), float(w[i + 1][1])) for i in range(0, len(w), 2)]
lat = []
for k in (1, 2, 3):
    import json
    lat.append(json.load(open(f"{R}/attach-{k}.json"))["workloads"][0]["attach"]["latency_ms"] / 1e3)
rows = []
for l in open(f"{R}/job.txt"):
    p = l.split()
    if len(p) > 2 and "time_us=" in l:
        rows.append((float(p[0]), float(l.split("time_us=")[1])))
t0 = rows[0][0]
def state(t):
    for (a, b), L in zip(on, lat):
        if a + L + 0.5 <= t <= b - 0.2: return "on"
        if a - 0.5 <= t <= b + 2.0: return "edge"
    return "off" if t > t0 + 10 else "warm"
on_t = [x for t, x in rows if state(t) == "on"]; off_t = [x for t, x in rows if state(t) == "off"]
print(f"on: {len(on_t)} iters mean {st.mean(on_t):.2f} us median {st.median(on_t):.2f}; off: {len(off_t)} iters mean {st.mean(off_t):.2f} us median {st.median(off_t):.2f}; ratio on/off mean {st.mean(on_t)/st.mean(off_t):.4f} median {st.median(on_t)/st.median(off_t):.4f}; attach latency s {lat}")
PY
cat "$R/attach-overhead.txt"
# What a rank shows in /proc per transport mode (for attach-time evidence).
for m in auto no-p2p no-p2p-no-shm; do
  "$B" drive nccl --mode $m --size 64M --duration 12s > /dev/null 2>&1 &
  sleep 8
  for r in $(pgrep -f -- "--rank"); do
    { echo "== $m rank pid $r"; ls -l /proc/$r/fd 2>/dev/null | awk '{print $NF}' | sed 's/[0-9]\+/N/g' | sort | uniq -c
      awk '{print $6}' /proc/$r/maps | grep -v '^$' | sed 's/[0-9]\+/N/g' | sort | uniq -c | sort -rn | head -15; } >> "$R/proc-$m.txt"
  done
  ss -tnp 2>/dev/null | grep -c gdrtrace >> "$R/proc-$m.txt"
  wait
done
tar czf "$OUT/results.tgz" -C "$R" .
grep -E "^validate|^  (ok|FAIL)|^  [a-z0-9-]+ +(p2p|shm|socket|unknown)|^  (CASE|MODE|h2d|d2h|d2d|g2g|auto|no-p2p)" "$R/validate.txt" | head -60
tail -n 8 "$R/attach-2.txt"
