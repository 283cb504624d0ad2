#!/usr/bin/env bash
# GPU-machine checks of the collectives' duty cycle (`--collectives`,
# docs/perf.md), in one device call:
#   1. versions, `gdrtrace doctor`;
#   2. `gdrtrace validate` (exact counts: its checks must pass as before);
#   3. the probe's cost on this machine: `bench uprobe-hit`, and `bench duty`
#      (calls of 20 us, probed stand-in against an unprobed twin) exact and
#      auto;
#   4. an independent torch all-reduce job (scripts/gpu/allreduce.py, which
#      prints each rank's own call count) at 8 KiB under `gdrtrace run`,
#      `--collectives exact` and the default (auto): counted, estimated and
#      own counts, traps per second, the verdict, the exit-to-report time;
#   5. `gdrtrace attach` (auto) to such a job for 20 s: the same figures;
#   6. torch copy loops (pinned, pageable) under `run`: their verdicts (the
#      copy rows are not sampled).
# The binary is built on the development machine and carried in dist/.
# Usage: [GDRTRACE=BIN] [PARTS="1 2 3 4 5 6"] bash scripts/gpu/duty.sh;
# results in $OUT/duty.txt and $OUT/duty.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
R=/tmp/gdr-duty
OUT=${OUT:-/tmp/gdr-duty-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$R/duty.txt"
PARTS=${PARTS:-1 2 3 4 5 6}
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
stamp() { python3 -u -c 'import sys, time
for l in sys.stdin: sys.stdout.write("%.3f %s" % (time.time(), l))'; }

{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  grep -m1 "model name" /proc/cpuinfo; nproc
} > "$S" 2>&1

if want 1; then
echo "== 1. doctor" >> "$S"
"$B" doctor > "$R/doctor.txt" 2>&1; echo "doctor rc=$?" >> "$S"
grep -E "uprobe|verdict" "$R/doctor.txt" >> "$S"
fi

if want 2; then
echo "== 2. validate" >> "$S"
"$B" validate --json "$R/validate.json" > "$R/validate.txt" 2>&1
echo "validate rc=$?" >> "$S"
grep -E "^validate|^  (ok|FAIL)|MODE|^  (auto|no-p2p)" "$R/validate.txt" >> "$S"
fi

if want 3; then
echo "== 3. bench uprobe-hit, bench duty" >> "$S"
"$B" bench uprobe-hit > "$R/hit.json" 2>> "$S"
"$B" bench duty --collectives exact --pairs 4 --window 3s > "$R/duty-exact.json" 2>> "$S"
"$B" bench duty --collectives auto --pairs 6 --window 5s > "$R/duty-auto.json" 2>> "$S"
fi

# Prints what a run/attach report says of the all-reduce rows against the
# job's own counts (its "rank R calls=N" lines in $2).
summary() {
python3 - "$1" "$2" >> "$S" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
own = [int(m) for m in re.findall(r"rank \d+ calls=(\d+)", open(sys.argv[2]).read())]
rows = [c for c in r.get("collectives", []) if c["op"] == "ncclAllReduce"]
est = sum(c["calls"] for c in rows)
counted = sum((c.get("counted") or {"calls": c["calls"]})["calls"] for c in rows)
hits = sum(h["hits"] for h in r.get("probe_hits", []) if h["op"] == "ncclAllReduce")
print(f"  job's own all-reduce calls {own}; report: estimated {est}, counted {counted}, probe hits {hits}"
      f" over {r['duration_s']} s ({hits / max(r['duration_s'], 1e-9):.0f} traps/s)")
print(f"  sampling {r.get('sampling')}; per process {[(p['pid'], p.get('collectives_sampled')) for p in r['processes'] if p.get('collectives_sampled')]}")
print(f"  loss complete={r['loss']['complete']} drops={r['loss']['ringbuf_drops']}")
print(f"  verdicts {[(v['pid'], v['transport'], v.get('basis')) for v in r['verdicts']]}")
for c in r["coverage"]:
    for d in c.get("detail", []):
        if "duty-cycled" in d or "closed over budget" in d:
            print(f"  coverage {c['point']}: {d[:300]}")
PY
}

if want 4; then
echo "== 4. run on a torch job (8 KiB all-reduce, 12 s), exact then auto" >> "$S"
for mode in exact auto; do
  "$B" run --collectives "$mode" --json "$R/run-$mode.json" -- sh -c "python3 '$HERE/allreduce.py' --kib 8 --seconds 12 --port 2966${#mode}; \
    python3 -c 'import time; print(\"job-exit %.3f\" % time.time())' >&2" 2>&1 | stamp > "$R/run-$mode.txt"
  echo "-- run --collectives $mode" >> "$S"
  python3 - "$R/run-$mode.txt" >> "$S" <<'PY'
import sys
lines = [l.split(" ", 1) for l in open(sys.argv[1])]
exit_t = next(float(l[1].split()[1]) for l in lines if l[1].startswith("job-exit"))
after = [float(t) for t, l in lines if float(t) >= exit_t and not l.startswith("job-exit")]
print(f"  job exit -> first report line {1e3 * (after[0] - exit_t):.0f} ms")
PY
  summary "$R/run-$mode.json" "$R/run-$mode.txt"
  grep -h "closed\|estimated\|duty-cycled" "$R/run-$mode.txt" | cut -c1-300 | sed 's/^/  /' >> "$S"
done
fi

if want 5; then
echo "== 5. attach (auto) to a running torch job for 20 s" >> "$S"
setsid python3 "$HERE/allreduce.py" --kib 8 --seconds 40 --port 29671 --progress "$R/progress.txt" > "$R/job.txt" 2>&1 &
J=$!
for _ in $(seq 600); do grep -q ready "$R/job.txt" 2>/dev/null && break; sleep 0.1; done
L=$(sed -n 's/.*launcher=\([0-9]*\).*/\1/p' "$R/job.txt" | head -1)
sleep 2
"$B" attach --pid "$L" --duration 20s --interval 5s --json "$R/attach.json" 2>&1 | stamp > "$R/attach.txt"
wait "$J" 2>/dev/null
summary "$R/attach.json" "$R/job.txt"
# The job's own calls while the probes were live: rank 0's progress lines
# between "attached to" and the report's first line.
python3 - "$R/attach.txt" "$R/progress.txt" "$R/attach.json" >> "$S" <<'PY'
import json, sys
lines = [l.split(" ", 1) for l in open(sys.argv[1])]
t0 = next(float(t) for t, l in lines if "attached to" in l)
t1 = next(float(t) for t, l in lines if l.startswith("gdrtrace report"))
prog = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
def at(t):
    for (ta, ca), (tb, cb) in zip(prog, prog[1:]):
        if ta <= t <= tb:
            return ca + (cb - ca) * (t - ta) / (tb - ta)
    return None
own = at(t1) - at(t0)
r = json.load(open(sys.argv[3]))
rows = [c for c in r["collectives"] if c["op"] == "ncclAllReduce"]
est = sum(c["calls"] for c in rows)
print(f"  rank 0's own calls while attached ({t1 - t0:.2f} s): {own:.0f}; estimated {est} ({100 * (est - own) / own:+.1f}%)")
PY
grep -h "attached to\|closed" "$R/attach.txt" | sed 's/^/  /' >> "$S"
fi

if want 6; then
echo "== 6. copy loops under run (auto)" >> "$S"
for mem in pinned pageable; do
  "$B" run --json "$R/copy-$mem.json" -- python3 "$HERE/copy_loop.py" --memory "$mem" --seconds 4 > "$R/copy-$mem.txt" 2>&1
  python3 - "$R/copy-$mem.json" "$mem" >> "$S" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
st = r["staging"]["processes"]
moved = sum(p["moved_bytes"] for p in st); staged = sum(p["staged_bytes"] for p in st)
ops = sorted({(o["name"], o["transport"]) for o in r["operations"] if "Memcpy" in o["name"]})
rules = sorted({f["rule"] for f in r["explain"]["findings"]})
print(f"  {sys.argv[2]}: moved {moved} staged {staged} ({100 * staged / max(moved, 1):.1f}%), copies {ops}, rules {rules}, complete={r['loss']['complete']}")
PY
done
fi

cat "$S"
cp "$S" "$OUT/duty.txt"
cp "$R"/hit.json "$R"/duty-*.json "$OUT/" 2>/dev/null
tar czf "$OUT/duty.tgz" -C "$R" .
