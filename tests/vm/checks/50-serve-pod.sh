#!/bin/sh
# gdrtrace serve on a distro kernel with a cgroup v2 hierarchy: a process
# placed in a cgroup laid out like a kubelet pod's (systemd driver,
# containerd) is discovered by the kernel when the loader opens libibverbs,
# gets the namespace, pod and container labels from its cgroup path and a
# kubelet-like log directory, and its io_uring registrations are counted
# exactly. Also proves the discovery programs pass this kernel's verifier.
set -eu
root=${CGROUP_ROOT:-/sys/fs/cgroup}
if [ ! -f "$root/cgroup.procs" ]; then
    mount -t cgroup2 nodev "$root" 2>/dev/null || true
fi
[ -f "$root/cgroup.procs" ] || { echo "no cgroup v2 hierarchy at $root"; exit 1; }

uid=7b1e2c3d-4f50-4a6b-8c7d-9e0f1a2b3c4d
cid=$(printf '5a%.0s' $(seq 32))
uid_=$(echo "$uid" | tr - _)
pod_cg="$root/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$uid_.slice"
cg="$pod_cg/cri-containerd-$cid.scope"
mkdir -p "$cg"
logs="$VM_OUT/serve-kubelet-logs"
rm -rf "$logs"
mkdir -p "$logs/pods/ml-team_trainer-0_$uid/worker" "$logs/containers"
: > "$logs/containers/trainer-0_ml-team_worker-$cid.log"

port=19464
err="$VM_OUT/serve.err"
"$GDRTRACE" serve --listen "127.0.0.1:$port" --kubelet-log-root "$logs" \
    --exited-retention 600s --cpu-budget 0.5 --duration 240s 2> "$err" &
agent=$!
i=0
until grep -q "serving metrics" "$err"; do
    i=$((i + 1))
    if [ "$i" -gt 1200 ] || ! kill -0 "$agent" 2>/dev/null; then
        cat "$err"
        exit 1
    fi
    sleep 0.1
done

out="$VM_OUT/serve-pin-churn.txt"
sh -c "echo \$\$ > '$cg/cgroup.procs' && exec '$GDRTRACE' drive pin-churn --iterations 20 --odirect-mib 0" > "$out"
pid=$(sed -n 's/^pin-churn: pid=\([0-9]*\) .*/\1/p' "$out")
[ -n "$pid" ] || { cat "$out"; exit 1; }

python3 - "$port" "$pid" <<'PY'
import sys, time, urllib.request
port, pid = sys.argv[1], sys.argv[2]
want = {"namespace": "ml-team", "pod": "trainer-0", "container": "worker"}
deadline = time.time() + 120
while True:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    regs = [l for l in text.splitlines()
            if l.startswith("gdrtrace_registrations_total{") and f'pid="{pid}"' in l]
    info = [l for l in text.splitlines()
            if l.startswith("gdrtrace_process_info{") and f'pid="{pid}"' in l]
    if regs and info and regs[0].endswith(" 20"):
        break
    if time.time() > deadline:
        sys.exit(f"no final count for pid {pid}: {regs} {info}")
    time.sleep(0.5)
for k, v in want.items():
    assert f'{k}="{v}"' in info[0], f"{k} missing: {info[0]}"
    assert f'{k}="{v}"' in regs[0], f"{k} missing: {regs[0]}"
assert 'discovered_by="libibverbs"' in info[0], info[0]
lost = [l for l in text.splitlines() if l.startswith("gdrtrace_events_lost_total{") and not l.endswith(" 0")]
assert not lost, lost
print("serve pod labels ok:", info[0])
print("serve registrations ok:", regs[0])
PY
kill "$agent"
wait "$agent" || { cat "$err"; exit 1; }
cat "$err"
rmdir "$cg" "$pod_cg" "$root/kubepods.slice/kubepods-burstable.slice" "$root/kubepods.slice" 2>/dev/null || true
