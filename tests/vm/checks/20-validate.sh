#!/bin/sh
# validate with kernel probes required: pin-churn and the verbs workload on
# rxe0, counted exactly by the kernel probes (ib_umem_get = N, pages = N x M,
# unpin balances, agreement with nr_foll_pin).
set -eu
"$GDRTRACE" validate --require-kernel-probes --iterations 50 --json "$VM_OUT/validate.json" > "$VM_OUT/validate.txt" 2>&1 || {
    rc=$?
    cat "$VM_OUT/validate.txt"
    exit $rc
}
grep -E '^(validate|  ok|  FAIL)' "$VM_OUT/validate.txt"
grep -q 'ib_umem_get calls (kernel probe)' "$VM_OUT/validate.txt"
