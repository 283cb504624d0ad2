#!/bin/sh
# topo with a real soft-RoCE device: rxe0 is listed as a software device on
# its netdev (no PCI function, so no PCIe path), with its port and counters;
# the text says "no GPU" first.
set -eu
"$GDRTRACE" topo > "$VM_OUT/topo.txt"
"$GDRTRACE" topo --json > "$VM_OUT/topo.json"
head -n 1 "$VM_OUT/topo.txt" | grep -q '^no GPU: ' || { echo "first line is not 'no GPU':"; cat "$VM_OUT/topo.txt"; exit 1; }
grep -q '^NIC rxe0 software device (no PCI function)' "$VM_OUT/topo.txt" || { cat "$VM_OUT/topo.txt"; exit 1; }

python3 - "$VM_OUT/topo.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
assert t["gpus"] == [], t["gpus"]
nics = {n["name"]: n for n in t["nics"]}
rxe = nics["rxe0"]
assert rxe["software"] and rxe["pci"] is None, rxe
assert rxe["netdevs"], rxe
assert rxe["ports"] and rxe["ports"][0]["state"].endswith("ACTIVE"), rxe["ports"]
assert any(k.startswith("1/hw_counters/") for k in rxe["counters"]), rxe["counters"]
print("topo ok:", rxe["netdevs"], len(rxe["counters"]), "counters")
PY
