#!/bin/sh
# The duty cycle of collectives (`--collectives`) on a distro kernel:
# `bench duty` probes a stand-in collective as ncclAllReduce is probed and
# calls it in a loop. Proven here, with uprobe_multi links from 6.6 on and
# per-point perf links before (Debian's 6.1, whose links close one by one
# behind a grace period, on the tracer's closing thread):
# - exact: every call traps and is counted;
# - a fixed cycle (500ms/2s): the link closes and opens again (off phases
#   counted), and only calls in on phases are counted;
# - auto: a job of 20 us calls (about 50,000 a second) is over the budget
#   and duty-cycled after its first on phase.
set -eu
"$GDRTRACE" bench duty --collectives exact --window 1s --pairs 1 > "$VM_OUT/duty-exact.json" 2> "$VM_OUT/duty-exact.txt"
"$GDRTRACE" bench duty --collectives 500ms/2s --window 2s --pairs 3 > "$VM_OUT/duty-fixed.json" 2> "$VM_OUT/duty-fixed.txt"
"$GDRTRACE" bench duty --collectives auto --window 3s --pairs 1 > "$VM_OUT/duty-auto.json" 2> "$VM_OUT/duty-auto.txt"
cat "$VM_OUT/duty-exact.txt" "$VM_OUT/duty-fixed.txt" "$VM_OUT/duty-auto.txt"

python3 - "$VM_OUT" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    lines = [l for l in open(f"{out}/duty-{name}.json") if l.startswith("{")]
    return json.loads(lines[-1])
release = open("/proc/sys/kernel/osrelease").read().strip()
major, minor = (int(x) for x in release.split(".")[:2])
want_mode = "uprobe_multi" if (major, minor) >= (6, 6) else "per-point"
exact, fixed, auto = load("exact"), load("fixed"), load("auto")
for name, r in (("exact", exact), ("fixed", fixed), ("auto", auto)):
    assert r["link_mode"] == want_mode, f"{name}: {r['link_mode']} on {release}"
assert exact["probed_calls"] > 0 and exact["counted_calls"] == exact["probed_calls"], exact
assert exact["off_phases"] == 0, exact
assert fixed["off_phases"] >= 2, fixed
assert 0 < fixed["counted_calls"] < fixed["probed_calls"] * 0.6, fixed
assert auto["off_phases"] >= 1, auto
assert 0 < auto["counted_calls"] < auto["probed_calls"], auto
print(f"duty ok: {release} ({want_mode}): exact {exact['counted_calls']}/{exact['probed_calls']}, "
      f"500ms/2s {fixed['counted_calls']}/{fixed['probed_calls']} in {fixed['off_phases']} off phases, "
      f"auto {auto['counted_calls']}/{auto['probed_calls']}")
PY
