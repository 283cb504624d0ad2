#!/bin/sh
# A client nobody here wrote: perftest's ib_write_bw under `gdrtrace run`
# against a second ib_write_bw. Its MR registrations, sizes and latency are
# reported and the memory is classified host-only.
set -eu
. "$(dirname "$0")/../lib.sh"
port=18611
timeout 120 ib_write_bw -d rxe0 -s 65536 -n 100 -F -p $port > "$VM_OUT/30-server.log" 2>&1 &
srv=$!
wait_listen "$port" "$srv" "$VM_OUT/30-server.log"
"$GDRTRACE" run --json "$VM_OUT/perftest.json" -- ib_write_bw -d rxe0 -s 65536 -n 100 -F -p $port 127.0.0.1 > "$VM_OUT/perftest.txt" 2>&1 || {
    cat "$VM_OUT/perftest.txt"; exit 1; }
wait $srv
python3 - "$VM_OUT/perftest.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ops = {(o["name"], o["transport"]): o for o in r["operations"]}
reg = [o for (n, t), o in ops.items() if n.startswith("ibv_reg_mr")]
assert reg, f"no ibv_reg_mr seen: {list(ops)}"
assert all(o["transport"] == "host-only" for o in reg), reg
umem = [o for (n, t), o in ops.items() if n == "ib_umem_get"]
assert umem and umem[0]["calls"] >= 1 and umem[0]["bytes"] > 0, f"ib_umem_get: {umem}"
assert umem[0]["latency"]["count"] >= 1 and umem[0]["latency"]["p50"] > 0
# Churn as the program did it: every MR it registered was deregistered, each
# registration went through ib_umem_get once, and no MR covers GPU memory
# (the buffer is perftest's own host allocation, which no probe saw being
# made: backing "unknown", verdict host-only above).
procs = [p for p in r["processes"] if (p.get("churn") or {}).get("registrations")]
assert procs, "no process registered an MR"
regs = sum(p["churn"]["registrations"] for p in procs)
deregs = sum(p["churn"]["deregistrations"] for p in procs)
assert regs == deregs, f"registrations {regs} != deregistrations {deregs}"
assert umem[0]["calls"] == regs, f"ib_umem_get {umem[0]['calls']} != registrations {regs}"
assert all(isinstance(m["backing"], str) for p in procs for m in p["churn"]["mr_log"]), "an MR covers GPU memory"
print("perftest churn:", regs, "registrations,", deregs, "deregistrations, none on GPU memory")
print("perftest:", sum(o["calls"] for o in reg), "ibv_reg_mr,", umem[0]["calls"], "ib_umem_get of", umem[0]["bytes"], "bytes, p50", umem[0]["latency"]["p50"], "ns, host-only")
PY
