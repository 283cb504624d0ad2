#!/bin/sh
# Fabric evidence over Soft-RoCE: ib_write_bw under `gdrtrace run` against a
# second ib_write_bw, once clean and once with 2% of the RoCE packets (UDP
# 4791) dropped as they arrive: the client port's retransmissions class
# moves only with drops, the client holds the port, explain names the
# network (network-lost-packets) only with drops, and the replay of the
# lossy run's recording shows the same fabric section; and TCP in a
# network namespace with drops: the sender's retransmissions.
# The two ends are two rxe devices on the two ends of a veth pair, each
# address's traffic to the other routed out of its own veth (policy rules
# ahead of the local table, as for two NICs cabled to each other), so every
# packet crosses the veth and the receiving end's INPUT chain. On lo (rxe0)
# none would: rxe hands a packet whose destination MAC is its own device's
# straight to its receive path (rxe_net.c, RXE_LOOPBACK_MASK), and in a
# second network namespace rxe has no socket (nothing answers). Drops by an
# iptables rule on the server end's INPUT where the guest has it (a drop on
# OUTPUT is a local send error, not a loss), else netem on the client's
# veth. The QP timeout is about a second (-u 18): under software emulation
# the default 67 ms expired with no packet lost. 20 messages of 64 KiB are
# ~1,300 packets, ~25 of them dropped: each timeout costs the run a second.
set -eu
. "$(dirname "$0")/../lib.sh"
port=18711

undo=""
cleanup() {
    [ -z "$undo" ] || sh -c "$undo" || true
    rdma link delete rxef0 2>/dev/null || true
    rdma link delete rxef1 2>/dev/null || true
    ip rule del pref 100 2>/dev/null || true
    ip rule del pref 101 2>/dev/null || true
    if ip rule show pref 1000 | grep -q local; then
        ip rule add pref 0 lookup local 2>/dev/null || true
        ip rule del pref 1000 2>/dev/null || true
    fi
    ip link del gdrf0 2>/dev/null || true
}
trap cleanup EXIT

ip link add gdrf0 type veth peer name gdrf1
ip addr add 10.77.0.1/24 dev gdrf0
ip addr add 10.77.0.2/24 dev gdrf1
for c in all gdrf0 gdrf1; do
    sysctl -qw "net.ipv4.conf.$c.rp_filter=0" "net.ipv4.conf.$c.accept_local=1"
done
ip link set gdrf0 up
ip link set gdrf1 up
ip route add 10.77.0.2 dev gdrf0 src 10.77.0.1 table 177
ip route add 10.77.0.1 dev gdrf1 src 10.77.0.2 table 178
ip rule add pref 100 iif lo from 10.77.0.1 to 10.77.0.2 lookup 177
ip rule add pref 101 iif lo from 10.77.0.2 to 10.77.0.1 lookup 178
ip rule add pref 1000 lookup local
ip rule del pref 0 lookup local
rdma link add rxef0 type rxe netdev gdrf0
rdma link add rxef1 type rxe netdev gdrf1

gid_of() { # DEVICE IPV4-MAPPED-SUFFIX: the RoCE v2 GID index of an address
    # One grep over the table (a process per entry takes minutes under
    # software emulation: the table has a thousand entries).
    d=/sys/class/infiniband/$1/ports/1
    for g in $(grep -lsx "0000:0000:0000:0000:0000:ffff:$2" "$d"/gids/*); do
        n=${g##*/}
        [ "$(cat "$d/gid_attrs/types/$n" 2>/dev/null)" = "RoCE v2" ] || continue
        echo "$n"
        return 0
    done
    return 1
}
i=0
until cli_gid=$(gid_of rxef0 0a4d:0001) && srv_gid=$(gid_of rxef1 0a4d:0002); do
    i=$((i + 1)); [ "$i" -lt 50 ] || { echo "no RoCE v2 GIDs for 10.77.0.1 on rxef0 and 10.77.0.2 on rxef1"; exit 1; }
    sleep 0.2
done
echo "GIDs after $i tries: client $cli_gid (rxef0, 10.77.0.1), server $srv_gid (rxef1, 10.77.0.2)"
common="-s 65536 -n 20 -F -u 18 -p $port"

run_pair() { # NAME
    # shellcheck disable=SC2086
    timeout 100 ib_write_bw -d rxef1 $common -x "$srv_gid" > "$VM_OUT/35-$1-server.log" 2>&1 &
    srv=$!
    wait_listen "$port" "$srv" "$VM_OUT/35-$1-server.log"
    # shellcheck disable=SC2086
    "$GDRTRACE" run --json "$VM_OUT/fabric-$1.json" --record "$VM_OUT/fabric-$1.rec" -- \
        timeout 100 ib_write_bw -d rxef0 $common -x "$cli_gid" 10.77.0.2 > "$VM_OUT/fabric-$1.txt" 2>&1 || {
        cat "$VM_OUT/fabric-$1.txt"; exit 1; }
    wait "$srv" || { cat "$VM_OUT/35-$1-server.log"; exit 1; }
    echo "$1: pair done at $(( $(date +%s) - t0 )) s"
}

t0=$(date +%s)
run_pair clean

rule="INPUT -i gdrf1 -p udp --dport 4791 -m statistic --mode random --probability 0.02 -j DROP"
modprobe xt_statistic 2>/dev/null || true
# shellcheck disable=SC2086
if iptables -A $rule 2>"$VM_OUT/35-iptables.err"; then
    undo="iptables -D $rule"
    how="iptables $rule"
elif modprobe sch_netem 2>/dev/null && tc qdisc add dev gdrf0 root netem loss 2%; then
    undo="tc qdisc del dev gdrf0 root"
    how="netem loss 2% on gdrf0"
else
    echo "no way to drop packets in this guest (iptables: $(cat "$VM_OUT/35-iptables.err"); no netem)"
    exit 1
fi
echo "drops: $how"
run_pair drops
sh -c "$undo"
undo=""

"$GDRTRACE" replay "$VM_OUT/fabric-drops.rec" --json "$VM_OUT/fabric-drops-replay.json" > /dev/null

# TCP over the loopback of a namespace made here, 2% of its packets dropped
# as they arrive: the send hook this kernel has (sock_send_length, else
# tcp_sendmsg by fentry or kprobe) names the sender of its retransmissions.
# GSO is held to one segment a packet, so the drop rate applies per
# segment: 8 MiB is ~5,900 packets, ~120 of them dropped.
tns=gdrtrace-fabric-tcp-$$
ip netns add "$tns"
undo="ip netns del $tns"
ip netns exec "$tns" ip link set lo mtu 1500 gso_max_size 1500 up
ip netns exec "$tns" iptables -A INPUT -i lo -p tcp --dport 5555 -m statistic --mode random --probability 0.02 -j DROP \
    || ip netns exec "$tns" tc qdisc add dev lo root netem loss 2%
"$GDRTRACE" run --json "$VM_OUT/fabric-tcp.json" -- ip netns exec "$tns" "$GDRTRACE" drive tcp --bytes 8M \
    --port 5555 --summary "$VM_OUT/fabric-tcp-summary.json" > "$VM_OUT/fabric-tcp.txt" 2>&1 || {
    cat "$VM_OUT/fabric-tcp.txt"; exit 1; }
cleanup
undo=""

python3 - "$VM_OUT" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda n: json.load(open(f"{out}/{n}.json"))
clean, drops, replay = load("fabric-clean"), load("fabric-drops"), load("fabric-drops-replay")

def port(r):
    ports = [p for p in r["fabric"].get("ports", []) if p["device"] == "rxef0"]
    assert ports, f"no rxef0 port in the fabric section: {r['fabric']}"
    return ports[0]

def client(r):
    pids = [p["pid"] for p in r["processes"] if (p.get("churn") or {}).get("registrations")]
    assert pids, "no process registered an MR"
    return pids[0]

def fired(r, pid):
    return any(f["rule"] == "network-lost-packets" and f["pid"] == pid for f in r["explain"]["findings"])

c, d = port(clean), port(drops)
for name, r, p in (("clean", clean, c), ("drops", drops, d)):
    assert client(r) in p["processes"], f"{name}: the client does not hold rxef0: {p}"
    print(f"{name}: rxef0 port 1 sent {p.get('packets_sent')} packets, retries {p['retries']}",
          {k: v for k, v in p["classes"].get("retransmissions", {}).items() if v})
# Under software emulation a QP's ack timer can expire with no packet lost
# (the guest starved of CPU: 2 retries in 1,286 packets in one run of
# 2026-12-07, against 57 with drops): the clean run may retry a little,
# never as the lossy one does, and only then may explain name the network.
assert d["retries"] > 0, f"no retry with drops: {d['classes']}"
assert c["retries"] * 10 <= d["retries"] and c["retries"] <= 0.005 * (c.get("packets_sent") or 0), \
    f"clean run retried: {c['classes'].get('retransmissions')}"
assert c["retries"] > 0 or not fired(clean, client(clean)), clean["explain"]["findings"]
assert fired(drops, client(drops)), drops["explain"]["findings"]
assert replay["fabric"] == drops["fabric"], "the replay's fabric section differs from the live one"
assert any(f["rule"] == "network-lost-packets" for f in replay["explain"]["findings"])
print(f"fabric: retries {c['retries']} clean, {d['retries']} with drops; network-lost-packets names the network; replay agrees")

tcp, summary = load("fabric-tcp"), load("fabric-tcp-summary")
points = {c["point"]: c for c in tcp["coverage"] if c["family"] == "network"}
print("network points:", {p: c.get("via") or c.get("reason") for p, c in points.items()})
assert tcp["fabric"]["tcp"]["available"], tcp["fabric"]["tcp"]["how"]
row = [p for p in tcp["fabric"]["tcp"]["processes"] if p["pid"] == summary["pid"]]
assert row, f"no TCP row for the sender {summary['pid']}: {tcp['fabric']['tcp']}"
kernel = summary["segments_retransmitted"]
print(f"tcp: {row[0]['retransmits']} retransmissions counted, the kernel's {kernel} segments, {row[0]['bytes_sent']} bytes")
assert 0 < row[0]["retransmits"] <= kernel, row[0]
assert row[0]["bytes_sent"] >= summary["bytes"], row[0]
PY
