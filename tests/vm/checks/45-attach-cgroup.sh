#!/bin/sh
# attach --cgroup in a distro kernel with a cgroup v2 hierarchy (the
# development host has none, so tests/it/attach.rs skips it there): a
# process moved into a fresh cgroup is found through cgroup.procs (the
# cgroup named relative to /sys/fs/cgroup) and its io_uring registrations
# are counted exactly; the tracer stops by itself when the member exits.
set -eu
root=/sys/fs/cgroup
if [ ! -f "$root/cgroup.procs" ]; then
    mount -t cgroup2 nodev "$root" 2>/dev/null || true
fi
[ -f "$root/cgroup.procs" ] || { echo "no cgroup v2 hierarchy at $root"; exit 1; }
name="gdrtrace-vm-check-$$"
cg="$root/$name"
mkdir "$cg"
go="$VM_OUT/cgroup-go"
err="$VM_OUT/attach-cgroup.err"
json="$VM_OUT/attach-cgroup.json"
rm -f "$go" "$json"
sh -c "while [ ! -e '$go' ]; do sleep 0.05; done; exec '$GDRTRACE' drive pin-churn --iterations 12 --odirect-mib 0 >/dev/null" &
target=$!
echo "$target" > "$cg/cgroup.procs"
"$GDRTRACE" attach --cgroup "$name" --json "$json" --duration 240s 2> "$err" &
tracer=$!
# Under software emulation attach takes about 10 s; past the deadline the
# check fails with the tracer's kernel-side state instead of waiting for the
# guest's overall timeout.
deadline=$(($(date +%s) + 300))
until grep -q "attached to" "$err"; do
    if [ "$(date +%s)" -gt "$deadline" ] || ! kill -0 "$tracer" 2>/dev/null; then
        echo "attach --cgroup did not report its probes live within 300 s; its stderr:"
        cat "$err"
        for t in /proc/"$tracer"/task/*; do
            [ -d "$t" ] || continue
            echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null) state $(awk '{print $3}' "$t/stat" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
            cat "$t/stack" 2>/dev/null || true
        done
        kill "$tracer" "$target" 2>/dev/null || true
        exit 1
    fi
    sleep 0.2
done
touch "$go"
wait "$target"
rc=0
wait "$tracer" || rc=$?
cat "$err"
[ "$rc" -eq 0 ] || { echo "attach --cgroup exited $rc"; exit 1; }
python3 - "$json" "$target" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pid = int(sys.argv[2])
procs = {p["pid"]: p for p in r["processes"]}
assert pid in procs, f"cgroup member {pid} not traced: {sorted(procs)}"
n = procs[pid]["calls"].get("io_uring_register:register-buffers")
assert n == 12, f"registrations {n}, workload 12"
print("attach --cgroup ok: pid", pid, "registrations", n)
PY
rmdir "$cg"
