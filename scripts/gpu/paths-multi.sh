#!/usr/bin/env bash
# Issue 44's multi-GPU variant, waiting for a kind with two GPUs or more
# (only one-GPU kinds were lent from 2026-12-01): 2 emulated nodes x 2 GPUs
# (scripts/gpu/allreduce.py --hosts 2 --ngpu 2: ranks 0,1 on host
# gdrtrace-emu-0 with GPUs 0,1; ranks 2,3 on host gdrtrace-emu-1 with GPUs
# 0,1), traced from the start with NCCL's log. What each rank must show:
# a path to its local peer over P2P (NVLink) and one to the other node over
# NCCL's network (NET/Socket here, no RDMA device), its verdict `mixed`,
# and no path called direct with bytes in host memory.
#   Device call: carry ["dist"], command "bash scripts/gpu/paths-multi.sh",
#   a kind with 2 GPUs; results in $OUT/paths-multi.tgz and summary.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
HERE=$PWD/scripts/gpu
R=/tmp/gdr-paths-multi
OUT=${OUT:-/tmp/gdr-paths-multi-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
if [ "$NGPU" -lt 2 ]; then
    echo "not run: $NGPU GPU(s); this variant needs 2" | tee "$OUT/summary.txt"
    exit 0
fi
timeout 240 "$B" run --json "$R/multi.json" --record "$R/multi.rec" -- \
    python3 "$HERE/allreduce.py" --hosts 2 --ngpu 2 --mib 16 --seconds 8 --port 29631 --nccl-log "$R/nccl" \
    > "$R/multi.txt" 2>&1
echo "rc=$?" >> "$R/multi.txt"
cat "$R"/nccl.rank*.log > "$R/nccl.log" 2>/dev/null
"$B" explain "$R/multi.json" --nccl-log "$R/nccl.log" > "$R/explain.txt" 2>&1
python3 - "$R/multi.json" > "$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ranks = {}
for p in r.get("paths", []):
    ranks.setdefault(p["pid"], []).append(p)
ok = True
for pid, paths in sorted(ranks.items()):
    vias = sorted({(p["transport"], p["via"]) for p in paths})
    print(f"pid {pid}: " + "; ".join(f"{p['op']} {p['peer']} {p['transport']} via {p['via']} ({p['bytes']} B, host {p['host_bytes']} B)" for p in paths))
    local = any(t.startswith("p2p") for t, _ in vias)
    remote = any(v.startswith("NET/") for _, v in vias)
    if not (local and remote):
        ok = False
        print(f"  MISSING: a P2P path to the local peer ({local}) and a NET path to the other node ({remote})")
for v in r.get("verdicts", []):
    print(f"verdict pid {v['pid']}: {v['transport']} {v.get('paths', '')}")
bad = [p for p in r.get("paths", []) if p["transport"] in ("p2p/nvlink", "p2p/pcie", "ipc/same-device",
       "gpudirect-rdma/peer-mem", "gpudirect-rdma/dma-buf") and p["host_bytes"] >= 0.1 * max(p["bytes"], 1)]
print("direct paths with host bytes:", len(bad))
print("PASS" if ok and not bad else "FAIL")
PY
cat "$OUT/summary.txt"
tar czf "$OUT/paths-multi.tgz" -C "$R" .
