#!/usr/bin/env bash
# Issue 46 on a GPU machine, in one device call (one GPU is enough): the
# emulated two-node NCCL job of nodes.sh (scripts/gpu/allreduce.py --hosts 2:
# two ranks on GPU 0 with their own NCCL_HOSTID, so NCCL joins them only
# through its network, NET/Socket without an RDMA NIC), run inside a network
# namespace made for it (its traffic stays on that namespace's loopback,
# MTU 1500), once clean and once with 2% of its TCP packets dropped as they
# arrive (an iptables rule inside the namespace; a drop on OUTPUT would be a
# local send error to TCP, not a loss). Where there is no iptables (the GPU
# machine has no packet filter), each rank drops 2% of the packets arriving
# on its own TCP sockets with a socket filter once NCCL connected them
# (allreduce.py --drop, sockdrop.py): to TCP the same loss. Per run:
#   1. `gdrtrace run --json --record` of the whole job;
#   2. `explain --nccl-log` of the report, `replay` of the recording;
#   3. per rank: verdict, TCP bytes, retransmissions, CPU per second and per
#      GB sent (the report's fabric section), the all-reduces it made, and
#      which of network-lost-packets / staged-not-network fired;
# then `compare` of drops.json against a baseline of clean.json, and `job drops.json`.
# The namespace is deleted at the end, whatever happens.
# Expected: clean: verdict socket (NET/Socket) per rank, retransmissions
# about 0, staged-not-network fires (a staged path whose network lost
# nothing), network-lost-packets quiet; drops: retransmissions > 0 on each
# rank's sockets (127.0.0.1 ports), network-lost-packets fires per rank,
# staged-not-network quiet, fewer all-reduces; compare flags "TCP
# retransmissions per GB sent" (exit 1); job prints `retransmits N` per rank
# and a "the network lost packets" line per rank. About 90 s on one H200.
# Needs ip (iproute2) or util-linux's unshare and nsenter (the namespace);
# says what it lacks and stops.
# The binary is built elsewhere: `cargo build -p tracer --release`, copy
# target/release/gdrtrace to dist/ and carry dist.
# Usage: [GDRTRACE=BIN] [RUN_SECONDS=20] bash scripts/gpu/fabric.sh
# Results: $OUT/summary.txt (written as it goes) and $OUT/fabric.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
OUT=${OUT:-/tmp/gdr-fabric-out}
SECONDS_PER_RUN=${RUN_SECONDS:-20}
NS=gdr-fabric-$$
R=$OUT/work
rm -rf "$R"; mkdir -p "$R" "$OUT"
S="$OUT/summary.txt"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# The namespace: `ip netns` where iproute2 is installed, else a persistent
# one made with util-linux's unshare and entered with nsenter (the GPU
# machine has no ip); lo is brought up at MTU 1500 with two ioctls.
NSF=/run/netns/$NS
cleanup() {
  if [ -n "${HAVE_IP:-}" ]; then ip netns del "$NS" 2>/dev/null; else umount "$NSF" 2>/dev/null; rm -f "$NSF"; fi
}
trap cleanup EXIT
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  env $SAFE python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  echo "rdma devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"
  echo "tools: $(for t in ip iptables iptables-legacy iptables-nft nft unshare nsenter; do command -v $t > /dev/null && printf '%s ' $t; done)"; } > "$S" 2>&1
if command -v ip > /dev/null && [ -z "${FABRIC_UNSHARE:-}" ]; then
  HAVE_IP=1
  ip netns add "$NS" || { echo "cannot make a network namespace" >> "$S"; cat "$S"; exit 1; }
  IN=(ip netns exec "$NS")
else
  mkdir -p /run/netns
  mountpoint -q /run/netns || { mount --bind /run/netns /run/netns && mount --make-private /run/netns; }
  touch "$NSF"
  unshare --net="$NSF" true || { echo "cannot make a network namespace (unshare --net)" >> "$S"; cat "$S"; exit 1; }
  IN=(nsenter --net="$NSF")
fi
"${IN[@]}" python3 - <<'PY' || { echo "cannot bring the namespace's lo up" >> "$S"; cat "$S"; exit 1; }
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s, 0x8922, struct.pack("16si", b"lo", 1500))  # SIOCSIFMTU
flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]  # SIOCGIFFLAGS
fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
PY
IPT=$(for t in iptables iptables-legacy iptables-nft; do command -v $t && break; done)

run() { # NAME PORT: the job under `gdrtrace run`, inside the namespace
  local name=$1 port=$2
  local extra=()
  [ "$name" = drops ] && extra=("${DROP_ARGS[@]}")
  echo "== $name$( [ "$name" = drops ] && echo ": $DROP_HOW")" >> "$S"
  "$B" run --json "$R/$name.json" --record "$R/$name.rec" -- \
    "${IN[@]}" env $SAFE NCCL_SOCKET_IFNAME=lo python3 "$HERE/allreduce.py" --hosts 2 --ngpu 1 \
    --mib 16 --seconds "$SECONDS_PER_RUN" --port "$port" --nccl-log "$R/nccl-$name" "${extra[@]}" > "$R/$name.txt" 2>&1
  grep -h "dropping" "$R/$name.txt" | sed 's/^/  /' >> "$S"
  echo "  run rc=$? $(grep -h 'calls=' "$R/$name.txt" | tr '\n' ' ')" >> "$S"
  cat "$R"/nccl-$name.rank*.log > "$R/nccl-$name.log" 2>/dev/null
  "$B" explain "$R/$name.json" --nccl-log "$R/nccl-$name.log" > "$R/$name.explain.txt" 2>&1
  "$B" replay "$R/$name.rec" --json "$R/$name.replayed.json" > /dev/null 2> "$R/$name.replay.err"
  python3 - "$R/$name.json" "$R/$name.replayed.json" "$R/$name.txt" >> "$S" 2>&1 <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
try:
    same = json.load(open(sys.argv[2]))["fabric"] == r["fabric"]
except Exception as e:
    same = f"unreadable: {e}"
calls = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"rank (\d+) calls=(\d+)", open(sys.argv[3]).read())}
tcp = {p["pid"]: p for p in r["fabric"]["tcp"]["processes"]}
print(f"  network probes: {r['fabric']['tcp']['how']}")
for v in r["verdicts"]:
    t = tcp.get(v["pid"], {})
    rules = sorted({f["rule"] for f in r["explain"]["findings"] if f["pid"] == v["pid"]})
    print(f"  pid {v['pid']}: {v['transport']} ({v.get('net')}); TCP sent {t.get('bytes_sent', 0) / 1e9:.2f} GB"
          f" on {t.get('sockets', 0)} sockets, retransmits {t.get('retransmits')}, CPU/s {t.get('cpu_per_s')},"
          f" CPU-s/GB {t.get('cpu_s_per_gb')}; rules {rules}")
for s in [s for s in r["fabric"]["tcp"]["sockets"] if s["retransmits"]][:6]:
    print(f"    socket {s.get('local')} -> {s.get('remote')}: {s['retransmits']} retransmitted, {s['bytes_sent']} B")
print(f"  all-reduces per rank: {calls}; unattributed retransmissions {r['fabric']['tcp']['unattributed_retransmits']}")
print(f"  replay's fabric section: {'same' if same is True else same}")
PY
}

DROP_ARGS=()
run clean 29811
if [ -z "$IPT" ]; then
  DROP_ARGS=(--drop 0.02)
  DROP_HOW="no iptables here: each rank drops 2% of the packets arriving on its TCP sockets (socket filter, sockdrop.py)"
else
  "${IN[@]}" "$IPT" -A INPUT -i lo -p tcp -m statistic --mode random --probability 0.02 -j DROP \
    || echo "  iptables refused the drop rule" >> "$S"
  DROP_HOW=$("${IN[@]}" "$IPT" -S INPUT | grep DROP)
fi
run drops 29812

echo "== compare (baseline of clean.json) drops.json" >> "$S"
"$B" baseline record --from "$R/clean.json" --out "$R/clean.baseline.json" > "$R/baseline.txt" 2>&1
"$B" compare "$R/clean.baseline.json" "$R/drops.json" > "$R/compare.txt" 2>&1; echo "  compare rc=$?" >> "$S"
grep -E "retransmissions|CPU per GB|verdicts" "$R/compare.txt" | sed 's/^/  /' >> "$S"
echo "== job drops.json" >> "$S"
"$B" job "$R/drops.json" > "$R/job.txt" 2>&1; echo "  job rc=$?" >> "$S"
sed 's/^/  /' "$R/job.txt" | head -20 >> "$S"
echo "== done" >> "$S"
cat "$S"
tar czf "$OUT/fabric.tgz" -C "$R" . && rm -rf "$R"
