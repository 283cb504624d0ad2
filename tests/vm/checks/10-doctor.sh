#!/bin/sh
# doctor inside a distro kernel: fentry/fexit, kprobe/kretprobe, tracepoints
# (tp_btf among them) and uprobes all load and attach; the probe matrix is kept for comparison
# across kernels.
set -eu
"$GDRTRACE" doctor --json > "$VM_OUT/doctor.json"

python3 - "$VM_OUT/doctor.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
kinds = {k["kind"]: k for k in d["program_kinds"]}
bad = [k for k in ("fentry", "fexit", "kprobe", "kretprobe", "tracepoint", "raw_tracepoint", "tp_btf", "uprobe", "uretprobe") if not kinds[k]["available"]]
assert not bad, f"program kinds unavailable in the VM: {bad}: {[kinds[k]['error'] for k in bad]}"
cov = {c["point"]: c for c in d["coverage"]}
for p in ("pin_user_pages_fast", "unpin_user_pages", "ib_umem_get", "ib_umem_release"):
    assert cov[p]["status"] == "attached", f"{p}: {cov[p]}"
# Syscall rows: the BTF-typed sys_enter/sys_exit pair on both kernels.
for p in ("io_uring_register", "sendmsg"):
    assert cov[p]["status"] == "attached" and cov[p]["via"] == "tp_btf", f"{p}: {cov[p]}"
# Library probes: uprobe_multi links from 6.6 on, per-point perf links
# before (Debian's 6.1), with the reason in the coverage row.
major, minor = (int(x) for x in d["kernel"].split(".")[:2])
multi = (major, minor) >= (6, 6)
assert kinds["uprobe_multi"]["available"] == multi, f"uprobe_multi on {d['kernel']}: {kinds['uprobe_multi']}"
lib = cov["libibverbs"]
want = "uprobe_multi" if multi else "uprobe/uretprobe"
assert lib["status"] == "attached" and lib["via"] == want, f"libibverbs: {lib}"
if not multi:
    assert lib["tried"] and lib["tried"][0]["strategy"] == "uprobe_multi", f"no reason for per-point links: {lib}"
print("doctor: library links", lib["via"], "" if multi else "(" + lib["tried"][0]["error"] + ")")
print("doctor ok:", d["kernel"], "; attached:", sum(c["status"] == "attached" for c in d["coverage"]), "of", len(d["coverage"]))
PY
