#!/bin/sh
# UCX over Soft-RoCE with Debian's ucx-utils 1.13: UCX's own RC transfers
# (ucx_perftest put_bw, zero-copy RDMA WRITE through UCT's rc_verbs on
# rxe0, host memory) under `gdrtrace run`, with UCX's registration cache
# on and off (UCX_IB_REG_METHODS=direct). Proven for each perftest process:
# - its registrations are counted alike by the UCX probes (uct_md_mem_reg),
#   the verbs uprobes (ibv_reg_mr) and the kernel (ib_umem_get);
# - the cache shows as lookups and misses when on and none when off, and the
#   rule ucx-rcache-disabled explains the off run (and only that one);
# - libucp/libuct/libucs attach by uprobe_multi from 6.6 on, per point before.
# UCP over rxe does not move data under QEMU emulation here (its UD wire-up
# times out; with a TCP connection manager the RC lanes connect but no
# message completes in 150 s), so UCP's modes run on the host tier
# (tests/it/ucx.rs) and on the GPU machine (scripts/gpu/ucx.sh).
set -eu
for rc in on off; do
    "$GDRTRACE" run --json "$VM_OUT/ucx-$rc.json" -- "$GDRTRACE" drive ucx --mode host-rc-uct --rcache $rc \
        --size 64K --iterations 20 --summary "$VM_OUT/ucx-$rc.summary" --log "$VM_OUT/ucx-$rc.log" \
        > "$VM_OUT/ucx-$rc.txt" 2>&1 || { cat "$VM_OUT/ucx-$rc.txt"; exit 1; }
done
python3 - "$VM_OUT" <<'PY'
import json, sys
out = sys.argv[1]
release = open("/proc/sys/kernel/osrelease").read().strip()
major, minor = (int(x) for x in release.split(".")[:2])
want_via = "uprobe_multi" if (major, minor) >= (6, 6) else "uprobe/uretprobe"
for rc in ("on", "off"):
    r = json.load(open(f"{out}/ucx-{rc}.json"))
    s = json.load(open(f"{out}/ucx-{rc}.summary"))
    assert s["iterations"] == 20, s
    cov = {c["point"]: c for c in r["coverage"]}
    for lib in ("libucp", "libuct", "libucs", "libibverbs"):
        assert cov[lib]["status"] == "attached" and cov[lib]["via"] == want_via, f"{lib}: {cov[lib]}"
    assert cov["ib_umem_get"]["status"] == "attached", cov["ib_umem_get"]
    procs = {p["pid"]: p for p in r["processes"]}
    ucx = {p["pid"]: p for p in (r.get("ucx") or {}).get("processes", [])}
    findings = [f for f in r["explain"]["findings"] if f["rule"] == "ucx-rcache-disabled"]
    for who in ("client_pid", "server_pid"):
        pid = s[who]
        u = ucx[pid]
        mrs = (procs[pid].get("churn") or {}).get("registrations", 0)
        umem = procs[pid]["calls"].get("ib_umem_get", 0)
        assert u["registrations"] > 0 and u["registrations"] == mrs == umem, \
            f"rcache {rc} pid {pid}: UCX {u['registrations']}, verbs {mrs}, ib_umem_get {umem}"
        cache = u["rcache"]
        if rc == "on":
            assert cache["gets"] > 0 and cache["misses"] > 0, f"rcache on, pid {pid}: {cache}"
            assert not [f for f in findings if f["pid"] == pid], findings
        else:
            assert cache["gets"] == 0, f"rcache off, pid {pid}: {cache}"
            f = [f for f in findings if f["pid"] == pid]
            assert f and any("UCX_IB_REG_METHODS=direct" in e for e in f[0]["evidence"]), findings
        print(f"ucx rcache {rc} pid {pid}: registrations UCX {u['registrations']} = verbs {mrs} = ib_umem_get {umem}; "
              f"rcache lookups {cache['gets']} misses {cache['misses']}; {s['bandwidth_mb_s']} MB/s; libraries via {want_via}")
print("ucx ok:", release)
PY
