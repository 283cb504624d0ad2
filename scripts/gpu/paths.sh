#!/usr/bin/env bash
# Issues 44 and 50 on one GPU, in one device call (about 3 minutes): NIXL
# READ, WRITE and both between two processes on GPU 0 (`gdrtrace drive
# nixl`, its UCX backend, UCX_PROTO_INFO=y) under `run`; then a long READ
# attached in its middle with `attach --all` and `attach --pid`.
#   Prepare here: bash scripts/gpu/ucx-carry.sh (dist/gdrtrace, .whl/).
#   Device call: carry ["dist", ".whl/nixl-gpu.zip"], command
#   "bash scripts/gpu/paths.sh" (or through round.sh).
# What must hold (summary.txt says PASS or FAIL per line):
#   READ: the initiator's GET path host-staged (UCX's software emulation
#   over tcp), agreeing with UCX's log, its bytes through host memory within
#   5% of those read; the target's served path host-staged.
#   WRITE: the PUT path ipc/same-device, its device bytes within 5%.
#   both: the initiator `mixed` with the two paths.
#   attach (--all, --pid): no events lost, every process named, the same
#   judged (not `unknown`) path verdicts as run's READ (marked steady state where set-up was not
#   seen), and --all saying what it attached to.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
R=/tmp/gdr-paths
N=/tmp/nixl-wheel
OUT=${OUT:-/tmp/gdr-paths-out}
rm -rf "$R" "$N"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
python3 -m zipfile -e .whl/nixl-gpu.zip "$N" || { echo "no .whl/nixl-gpu.zip" > "$OUT/summary.txt"; exit 1; }
export PYTHONPATH=$N
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$B" --version; } > "$R/env.txt" 2>&1

# COLLECTIVES=exact counts every call (as validate does): the byte checks
# then measure the path attribution, not the duty cycle's estimates.
# RUN_ONLY=1 leaves out the attach part.
MODE=()
[ -n "${COLLECTIVES:-}" ] && MODE=(--collectives "$COLLECTIVES")
echo "collectives: ${COLLECTIVES:-auto (default)}" >> "$R/env.txt"
for op in read write both; do
    timeout 150 "$B" run "${MODE[@]}" --record "$R/nixl-$op.rec" --json "$R/nixl-$op.json" --ucx-log "$R/nixl-$op.log" -- \
        "$B" drive nixl --op "$op" --size 32M --iterations 10 --log "$R/nixl-$op.log" \
        --summary "$R/nixl-$op.summary.json" > "$R/nixl-$op.txt" 2>&1
    echo "rc=$?" >> "$R/nixl-$op.txt"
    "$B" explain "$R/nixl-$op.json" --ucx-log "$R/nixl-$op.log" > "$R/nixl-$op.explain.txt" 2>&1
done

# A long READ, attached in its middle (issue 50's shape).
[ -n "${RUN_ONLY:-}" ] || {
setsid "$B" drive nixl --op read --size 32M --iterations 400 --timeout 200s \
    --summary "$R/att.summary.json" > "$R/att-job.txt" 2>&1 &
J=$!
sleep 10
PIDS=$(pgrep -f "nixl.py (target|initiator)" | tr '\n' ',' | sed 's/,$//')
timeout 60 "$B" attach --all --duration 6s --record "$R/att-all.rec" --json "$R/att-all.json" > "$R/att-all.txt" 2>&1
echo "rc=$?" >> "$R/att-all.txt"
timeout 60 "$B" attach --pid "$PIDS" --duration 6s --record "$R/att-pid.rec" --json "$R/att-pid.json" > "$R/att-pid.txt" 2>&1
echo "rc=$?" >> "$R/att-pid.txt"
kill -- -"$J" 2>/dev/null; sleep 1; kill -9 -- -"$J" 2>/dev/null
}

{ cat "$R/env.txt"; python3 - "$R"; } > "$OUT/summary.txt" 2>&1 <<'PY'
import json, os, sys
R = sys.argv[1]
def load(n):
    try:
        return json.load(open(os.path.join(R, n)))
    except Exception as e:
        return None
def line(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
def paths(r, pid=None):
    return [p for p in (r or {}).get("paths", []) if pid is None or p["pid"] == pid]
for op in ("read", "write", "both"):
    r, s = load(f"nixl-{op}.json"), load(f"nixl-{op}.summary.json")
    print(f"== {op}: {open(os.path.join(R, f'nixl-{op}.txt')).read().strip().splitlines()[-1] if os.path.exists(os.path.join(R, f'nixl-{op}.txt')) else ''}")
    if not r or not s:
        line(False, f"{op}: a report and a summary"); continue
    ini, tgt = s["initiator"]["pid"], s["target"]["pid"]
    for p in paths(r):
        print(f"  pid {p['pid']} {p['op']} {p['peer']} {p['memory']}: {p['transport']} via {p['via']}; {p['bytes']} B, host {p['host_bytes']}, device {p['device_bytes']}; log {(p.get('log') or {}).get('agrees')}")
    for v in r["verdicts"]:
        print(f"  verdict pid {v['pid']}: {v['transport']} {[ (x['op'], x['transport'], round(x['share'], 2)) for x in v.get('paths', [])]}")
    print(f"  loss {r['loss']}")
    def one(cls):
        c = [p for p in paths(r, ini) if p["op"] == cls]
        return max(c, key=lambda p: p["bytes"]) if c else None
    for phase in s["initiator"]["phases"]:
        moved = phase["bytes"]
        p = one("get" if phase["op"] == "READ" else "put")
        if p is None:
            line(False, f"{op} {phase['op']}: the initiator's path"); continue
        seen = p["host_bytes"] if p["host_staged"] else p["device_bytes"]
        line(abs(seen - moved) <= 0.05 * moved, f"{op} {phase['op']}: {p['transport']} via {p['via']}, {seen} B of {moved} ({(seen - moved) * 100 / moved:+.1f}%)")
        line(abs(p["bytes"] - moved) <= 0.05 * moved, f"{op} {phase['op']}: the path's own bytes (its calls) {p['bytes']} of {moved} ({(p['bytes'] - moved) * 100 / moved:+.1f}%), {p['calls']} calls")
        if p.get("log"):
            line(p["log"]["agrees"], f"{op} {phase['op']}: UCX's log agrees ({p['log']['ucx_says'][:100]})")
    if op == "both":
        v = [v for v in r["verdicts"] if v["pid"] == ini]
        line(bool(v) and v[0]["transport"] == "mixed", f"both: initiator verdict {v[0]['transport'] if v else None}")
    bad = [p for p in paths(r) if p["transport"] in ("p2p/nvlink", "p2p/pcie", "ipc/same-device") and p["host_bytes"] >= 0.1 * max(p["bytes"], 1)]
    line(not bad, f"{op}: no path called direct with its bytes in host memory ({len(bad)})")
run_read = load("nixl-read.json")
for kind in ("all", "pid"):
    if not os.path.exists(os.path.join(R, f"att-{kind}.txt")):
        continue
    r = load(f"att-{kind}.json")
    head = open(os.path.join(R, f"att-{kind}.txt")).read().splitlines()[:1]
    print(f"== attach --{kind}: {head}")
    if not r:
        line(False, f"attach --{kind}: a report"); continue
    nixl = [p for p in r["processes"] if p.get("calls")]
    line(r["loss"]["ringbuf_drops"] == 0 and r["loss"]["read_errors"] == 0, f"attach --{kind}: no events lost {r['loss']}")
    line(all(p["comm"] for p in nixl), f"attach --{kind}: every process named {[ (p['pid'], p['comm']) for p in nixl]}")
    for p in paths(r):
        print(f"  pid {p['pid']} {p['op']} {p['memory']}: {p['transport']} via {p['via']} [{p.get('basis')}]; host {p['host_bytes']}")
    # A path too small to judge apart (`unknown`: a control message such as
    # the notification sent with the last transfer) is no verdict, and
    # attach sees only its window's calls: the judged paths must agree.
    judged = lambda rep: sorted({(p["op"], p["transport"]) for p in paths(rep) if p["transport"] != "unknown"})
    want, got = judged(run_read), judged(r)
    line(bool(want) and want == got, f"attach --{kind}: judged path verdicts equal run's {want} / {got}")
PY
cat "$OUT/summary.txt"
for f in "$R"/*.rec; do gzip -9 "$f"; done
tar czf "$OUT/paths.tgz" -C "$R" --exclude='*.rec.gz' . && tar czf "$OUT/paths-rec.tgz" -C "$R" $(cd "$R" && ls *.rec.gz)
ls -la "$OUT"
