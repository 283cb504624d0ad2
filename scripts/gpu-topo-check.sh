#!/usr/bin/env bash
# `gdrtrace topo` on the 2x H200 machine: both GPUs, NVLink between them from
# NVML (18 links), BAR1 use, link state, "no RDMA NIC"; then the topo
# integration tests (if their binary was brought along as dist/topo-test),
# the NVLink counter test while an NCCL job runs.
# Usage: scripts/gpu-topo-check.sh. Results in $OUT/topo-check/ (or /tmp).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
T=${TOPO_TEST:-$PWD/dist/topo-test}
R=${OUT:-/tmp}/topo-check
mkdir -p "$R"
nvidia-smi topo -m > "$R/nvidia-smi-topo.txt" 2>&1
"$B" topo > "$R/topo.txt" 2>&1; echo "rc=$?" >> "$R/topo.txt"
"$B" topo --json > "$R/topo.json" 2> "$R/topo-json.err"
cat "$R/topo.txt"
python3 - "$R/topo.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
g = t["gpus"]
assert len(g) == 2, f"expected 2 GPUs, got {len(g)}"
for x in g:
    assert x["bar1"] and x["bar1"]["total"] > 0, f"GPU{x['index']}: no BAR1 from NVML: {x['bar1']}"
    assert x["pci"] and x["pci"]["link"], f"GPU{x['index']}: no PCIe link state"
    # 18 NVLink links per GPU; in a VM NVML may not name the peer (no PCI address).
    assert sum(p["links"] for p in x["nvlink"]) == 18, f"GPU{x['index']}: NVML NVLink peers {x['nvlink']}"
pair = [l for l in t["links"] if {l["a"], l["b"]} == {"GPU0", "GPU1"}]
assert pair and pair[0]["kind"] == "NV18" and pair[0]["source"] == "nvml", pair
assert t["nics"] == [] and any(n.startswith("no RDMA NIC") for n in t["notes"]), t["notes"]
print("topo ok:", [(x["bus"], x["model"], x["bar1"]["used"]) for x in g], pair[0]["kind"], pair[0]["path"])
PY
echo "checks rc=$?"
if [ -x "$T" ]; then
  GDRTRACE_BIN=$B "$T" --nocapture 2>&1 | tail -n 25
  setsid "$B" drive nccl --mode auto --size 256M --duration 25s > "$R/nccl.txt" 2>&1 &
  sleep 15
  GDRTRACE_EXPECT_NVLINK_TRAFFIC=1 GDRTRACE_BIN=$B "$T" --nocapture nvlink_counters_grow 2>&1 | tail -n 8
  wait
fi
