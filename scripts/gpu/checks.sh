#!/usr/bin/env bash
# GPU-machine checks of the tracer itself (issue 11 and the main job), in one
# device call before scripts/gpu/verdicts.sh:
#   1. versions; `gdrtrace doctor` (uprobe_multi links?) and `gdrtrace topo`;
#   2. `gdrtrace validate --record` (the main job: verdicts per NCCL mode and
#      cuda-copy must stay as they were);
#   3. a torch all-reduce job under `gdrtrace run`: the traced command's exit
#      to the report (must be under 1 s), set-up links closed over budget,
#      probe hits per op;
#   4. `gdrtrace attach --pid LAUNCHER` to a running job, SIGINT after 4 s:
#      signal to report (under 1 s), link close time, drops.
# The binary is built on the development machine and carried in dist/.
# Usage: [GDRTRACE=BIN] bash scripts/gpu/checks.sh; results in $OUT/checks.tgz
# and $OUT/checks.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
R=/tmp/gdr-checks
OUT=${OUT:-/tmp/gdr-checks-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$R/checks.txt"
# Lines of stdin, each prefixed with the wall-clock time it arrived.
stamp() { python3 -u -c 'import sys, time
for l in sys.stdin: sys.stdout.write("%.3f %s" % (time.time(), l))'; }

{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} > "$S" 2>&1

echo "== 1. doctor, topo" >> "$S"
"$B" doctor > "$R/doctor.txt" 2>&1; echo "doctor rc=$?" >> "$S"
grep -E "uprobe|verdict" "$R/doctor.txt" >> "$S"
"$B" topo > "$R/topo.txt" 2>&1; echo "topo rc=$?" >> "$S"
cat "$R/topo.txt" >> "$S"

echo "== 2. validate --record" >> "$S"
t0=$(date +%s.%N)
"$B" validate --json "$R/validate.json" --record "$R/validate.rec" > "$R/validate.txt" 2>&1
echo "validate rc=$? in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" >> "$S"
grep -E "^validate|^  (ok|FAIL)|MODE|^  (auto|no-p2p)" "$R/validate.txt" >> "$S"
gzip -9 "$R"/validate.rec* 2>/dev/null

echo "== 3. run on a torch job: exit to report" >> "$S"
# The job says when it exits; gdrtrace's lines are stamped as they arrive.
"$B" run --json "$R/run-job.json" -- sh -c "python3 '$HERE/overhead.py' job --sizes 8K --seconds 3 --port 29650; \
  python3 -c 'import time; print(\"job-exit %.3f\" % time.time())' >&2" 2>&1 | stamp > "$R/run-job.txt"
python3 - "$R/run-job.txt" "$R/run-job.json" >> "$S" <<'PY'
import json, sys
lines = [l.split(" ", 1) for l in open(sys.argv[1])]
exit_t = next(float(l[1].split()[1]) for l in lines if l[1].startswith("job-exit"))
after = [float(t) for t, l in lines if float(t) >= exit_t and not l.startswith("job-exit")]
r = json.load(open(sys.argv[2]))
print(f"  job exit -> first report line {1e3 * (after[0] - exit_t):.0f} ms, -> last line {1e3 * (after[-1] - exit_t):.0f} ms")
print(f"  loss complete={r['loss']['complete']} drops={r['loss']['ringbuf_drops']}")
print(f"  verdicts {[(v['pid'], v['transport'], v.get('basis')) for v in r['verdicts']]}")
print(f"  probe hits {[(h['op'], h['hits']) for h in r.get('probe_hits', [])]}")
for c in r["coverage"]:
    if c["family"] in ("cuda", "nccl"):
        print(f"  coverage {c['point']}: {c['status']} via {c.get('via')}; " + "; ".join(c.get("detail", []))[:600])
PY
grep -h "closed" "$R/run-job.txt" | sed 's/^/  /' >> "$S"

echo "== 4. attach to a running job, SIGINT after 4 s" >> "$S"
setsid python3 "$HERE/overhead.py" job --sizes 8K --seconds 40 --port 29651 --ready "$R/job.ready" > "$R/job.txt" 2>&1 &
J=$!
for _ in $(seq 600); do grep -q ready "$R/job.ready" 2>/dev/null && break; sleep 0.1; done
L=$(sed -n 's/.*launcher=\([0-9]*\).*/\1/p' "$R/job.ready" | head -1)
sleep 2
( "$B" attach --pid "$L" --interval 1s --json "$R/attach.json" 2>&1 | stamp > "$R/attach.txt" ) &
A=$!
for _ in $(seq 300); do grep -q "attached to" "$R/attach.txt" 2>/dev/null && break; sleep 0.1; done
sleep 4
sig=$(date +%s.%N)
pkill -INT -f "gdrtrace attach --pid $L"
wait $A
python3 - "$R/attach.txt" "$R/attach.json" "$sig" >> "$S" <<'PY'
import json, sys
sig = float(sys.argv[3])
lines = [l.split(" ", 1) for l in open(sys.argv[1])]
after = [(float(t), l) for t, l in lines if float(t) >= sig]
report = next(t for t, l in after if not l.startswith("[") and "gdrtrace:" not in l)
print(f"  SIGINT -> report {1e3 * (report - sig):.0f} ms, -> last line {1e3 * (after[-1][0] - sig):.0f} ms")
for t, l in lines:
    if "attached to" in l or "closed" in l:
        print("  " + l.strip())
r = json.load(open(sys.argv[2]))
print(f"  loss complete={r['loss']['complete']} drops={r['loss']['ringbuf_drops']}")
print(f"  verdicts {[(v['pid'], v['transport'], v.get('basis')) for v in r['verdicts']]}")
print(f"  probe hits {[(h['op'], h['hits']) for h in r.get('probe_hits', [])]}")
PY
kill -TERM -- -"$J" 2>/dev/null; wait "$J" 2>/dev/null

cat "$S"
cp "$S" "$OUT/checks.txt"
tar czf "$OUT/checks.tgz" -C "$R" .
