#!/bin/sh
# validate with kernel probes required: pin-churn and the verbs workload on
# rxe0, counted exactly by the kernel probes (ib_umem_get = N, pages = N x M,
# unpin balances, agreement with nr_foll_pin). Run through `baseline record`,
# which also stores the reports with this kernel's profile in baseline.json:
# vm-test compares the newest kernel's against the oldest's (the
# kernel-upgrade example, target/vm-results/compare.*). UCX has its own
# check (50-ucx.sh): --no-ucx keeps this one within its time, and one run
# (not the default three: ~65 s each under software emulation, 130 s
# beside the host tests) keeps the suite within its time; the comparison
# is an example, judged on one run a kernel.
set -eu
"$GDRTRACE" baseline record --out "$VM_OUT/baseline.json" --repeat 1 \
    --require-kernel-probes --iterations 50 --no-ucx --json "$VM_OUT/validate.json" > "$VM_OUT/validate.txt" 2>&1 || {
    rc=$?
    cat "$VM_OUT/validate.txt"
    exit $rc
}
grep -E '^(validate|baseline|  ok|  FAIL)' "$VM_OUT/validate.txt"
grep -q 'ib_umem_get calls (kernel probe)' "$VM_OUT/validate.txt"
python3 - "$VM_OUT/baseline.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
assert b["schema"] == "gdrtrace.baseline/v1", b["schema"]
runs = {r["workload"]: r["report"] for r in b["runs"]}
assert {"pin-churn", "verbs-churn"} <= set(runs), list(runs)
p = b["profile"]
assert p["kernel"] == open("/proc/sys/kernel/osrelease").read().strip(), p["kernel"]
assert p["probes"]["ib_umem_get"].startswith("attached"), p["probes"]["ib_umem_get"]
ops = [o for o in runs["pin-churn"]["operations"] if o["name"] == "io_uring_register:register-buffers"]
assert ops and ops[0].get("histogram"), "no serialized histogram"
print("baseline ok:", p["kernel"], "nic", p["nic"], "runs", sorted(runs))
PY
