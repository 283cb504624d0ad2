#!/bin/sh
# doctor inside a distro kernel: fentry/fexit, kprobe/kretprobe, tracepoints
# and uprobes all load and attach; the probe matrix is kept for comparison
# across kernels.
set -eu
"$GDRTRACE" doctor --json > "$VM_OUT/doctor.json"

python3 - "$VM_OUT/doctor.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
kinds = {k["kind"]: k for k in d["program_kinds"]}
bad = [k for k in ("fentry", "fexit", "kprobe", "kretprobe", "tracepoint", "raw_tracepoint", "uprobe", "uretprobe") if not kinds[k]["available"]]
assert not bad, f"program kinds unavailable in the VM: {bad}: {[kinds[k]['error'] for k in bad]}"
cov = {c["point"]: c for c in d["coverage"]}
for p in ("pin_user_pages_fast", "unpin_user_pages", "ib_umem_get", "ib_umem_release"):
    assert cov[p]["status"] == "attached", f"{p}: {cov[p]}"
print("doctor ok:", d["kernel"], "; attached:", sum(c["status"] == "attached" for c in d["coverage"]), "of", len(d["coverage"]))
PY
