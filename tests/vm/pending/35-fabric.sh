#!/bin/sh
# Fabric evidence over Soft-RoCE: ib_write_bw under `gdrtrace run` against a
# second ib_write_bw on rxe0 (loopback), once clean and once with 2% of the
# RoCE packets (UDP 4791) dropped as they arrive: the rxe0 port's
# retransmissions class moves only with drops, the client holds the port,
# explain names the network (network-lost-packets) only with drops, and the
# replay of the lossy run's recording shows the same fabric section; and
# TCP in a network namespace with drops: the sender's retransmissions.
# Drops by an iptables rule on INPUT where the guest has it (a drop on
# OUTPUT is a local send error, not a loss), else netem on lo. rxe hands a
# packet whose source and destination GIDs are equal straight to its own
# receive path (rxe_net.c, RXE_LOOPBACK_MASK), past netfilter and qdiscs,
# so the two ends use the GIDs of two addresses of lo (-x), 127.0.0.1 and
# 127.0.0.2, and their packets go through the IP stack. The QP timeout is
# about a second (-u 18): under software emulation the default 67 ms
# expired with no packet lost.
set -eu
port=18711

ip addr add 127.0.0.2/8 dev lo 2>/dev/null || true
gid_of() { # IPV4-MAPPED-SUFFIX: the RoCE v2 GID index of an address of lo
    for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
        n=${g##*/}
        [ "$(cat "$g" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$1" ] || continue
        [ "$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n" 2>/dev/null)" = "RoCE v2" ] || continue
        echo "$n"
        return 0
    done
    return 1
}
i=0
until srv_gid=$(gid_of 7f00:0002) && cli_gid=$(gid_of 7f00:0001); do
    i=$((i + 1)); [ "$i" -lt 50 ] || { echo "no RoCE v2 GIDs for 127.0.0.1 and 127.0.0.2 on rxe0"; exit 1; }
    sleep 0.2
done
echo "GIDs: client $cli_gid (127.0.0.1), server $srv_gid (127.0.0.2)"
common="-d rxe0 -s 65536 -n 200 -F -u 18 -p $port"

undo=""
cleanup() {
    [ -z "$undo" ] || sh -c "$undo" || true
}
trap cleanup EXIT

run_pair() { # NAME
    # shellcheck disable=SC2086
    timeout 180 ib_write_bw $common -x "$srv_gid" > "$VM_OUT/35-$1-server.log" 2>&1 &
    srv=$!
    i=0
    until ss -Htln "sport = :$port" 2>/dev/null | grep -q .; do
        i=$((i + 1)); [ "$i" -lt 100 ] || { cat "$VM_OUT/35-$1-server.log"; exit 1; }
        sleep 0.1
    done
    # shellcheck disable=SC2086
    "$GDRTRACE" run --json "$VM_OUT/fabric-$1.json" --record "$VM_OUT/fabric-$1.rec" -- \
        timeout 180 ib_write_bw $common -x "$cli_gid" 127.0.0.2 > "$VM_OUT/fabric-$1.txt" 2>&1 || {
        cat "$VM_OUT/fabric-$1.txt"; exit 1; }
    wait "$srv" || { cat "$VM_OUT/35-$1-server.log"; exit 1; }
}

run_pair clean

rule="INPUT -i lo -p udp --dport 4791 -m statistic --mode random --probability 0.02 -j DROP"
modprobe xt_statistic 2>/dev/null || true
# shellcheck disable=SC2086
if iptables -A $rule 2>"$VM_OUT/35-iptables.err"; then
    undo="iptables -D $rule"
    how="iptables $rule"
elif modprobe sch_netem 2>/dev/null && tc qdisc add dev lo root netem loss 2%; then
    undo="tc qdisc del dev lo root"
    how="netem loss 2% on lo"
else
    echo "no way to drop packets in this guest (iptables: $(cat "$VM_OUT/35-iptables.err"); no netem)"
    exit 1
fi
echo "drops: $how"
run_pair drops
cleanup
undo=""

"$GDRTRACE" replay "$VM_OUT/fabric-drops.rec" --json "$VM_OUT/fabric-drops-replay.json" > /dev/null

# TCP over the loopback of a namespace made here, 2% of its packets dropped
# as they arrive: the send hook this kernel has (sock_send_length, else
# tcp_sendmsg by fentry or kprobe) names the sender of its retransmissions.
ns=gdrtrace-fabric-$$
ip netns add "$ns"
undo="ip netns del $ns"
ip netns exec "$ns" ip link set lo mtu 1500 up
ip netns exec "$ns" iptables -A INPUT -i lo -p tcp --dport 5555 -m statistic --mode random --probability 0.02 -j DROP \
    || ip netns exec "$ns" tc qdisc add dev lo root netem loss 2%
"$GDRTRACE" run --json "$VM_OUT/fabric-tcp.json" -- ip netns exec "$ns" "$GDRTRACE" drive tcp --bytes 32M \
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
    ports = [p for p in r["fabric"].get("ports", []) if p["device"] == "rxe0"]
    assert ports, f"no rxe0 port in the fabric section: {r['fabric']}"
    return ports[0]

def client(r):
    pids = [p["pid"] for p in r["processes"] if (p.get("churn") or {}).get("registrations")]
    assert pids, "no process registered an MR"
    return pids[0]

def fired(r, pid):
    return any(f["rule"] == "network-lost-packets" and f["pid"] == pid for f in r["explain"]["findings"])

c, d = port(clean), port(drops)
for name, r, p in (("clean", clean, c), ("drops", drops, d)):
    assert client(r) in p["processes"], f"{name}: the client does not hold rxe0: {p}"
    print(f"{name}: rxe0 port 1 sent {p.get('packets_sent')} packets, retries {p['retries']}",
          {k: v for k, v in p["classes"].get("retransmissions", {}).items() if v})
assert c["retries"] == 0, f"clean run retried: {c['classes'].get('retransmissions')}"
assert not fired(clean, client(clean)), clean["explain"]["findings"]
assert d["retries"] > 0, f"no retry with drops: {d['classes']}"
assert fired(drops, client(drops)), drops["explain"]["findings"]
assert replay["fabric"] == drops["fabric"], "the replay's fabric section differs from the live one"
assert any(f["rule"] == "network-lost-packets" for f in replay["explain"]["findings"])
print("fabric: retries only with drops; network-lost-packets names the network; replay agrees")

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
