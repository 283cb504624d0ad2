"""Random packet loss on a process's own TCP sockets, for machines with no
packet filter (the GPU machine has no iptables, tc or nft): a classic BPF
socket filter (SO_ATTACH_FILTER) on each of the process's TCP sockets
drops the given share of the segments arriving on it, at random
(SKF_AD_RANDOM). The kernel runs the filter in tcp_v4_rcv before TCP sees
the segment (tcp_filter), so to the sender it is a packet lost on the way:
it retransmits, and the kernel's tcp:tcp_retransmit_skb tracepoint fires,
as with an iptables INPUT drop. No privilege is needed.

    import sockdrop; n = sockdrop.drop_on_tcp_sockets(0.02)

attaches to every TCP socket open now (NCCL's, after its first collective
connected them). `python3 sockdrop.py [P]` checks it on this machine: two
loopback transfers of 64 MiB, clean and with P (0.02) dropped, and the
kernel's retransmitted segments (/proc/net/snmp) for each.
"""
import ctypes
import os
import socket
import stat
import struct
import sys
import threading

SO_ATTACH_FILTER = 26
# BPF_LD|BPF_W|BPF_ABS at SKF_AD_OFF + SKF_AD_RANDOM: a random u32.
LD_RANDOM = (0x20, 0, 0, (-0x1000 + 56) & 0xFFFFFFFF)


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def program(p):
    """Drop when the random u32 is at most p * 2^32, else keep the segment."""
    threshold = min(int(p * 2**32), 2**32 - 1)
    insns = [
        LD_RANDOM,
        (0x25, 1, 0, threshold),  # BPF_JMP|BPF_JGT|BPF_K: over the threshold -> keep
        (0x06, 0, 0, 0),          # BPF_RET|BPF_K 0: drop
        (0x06, 0, 0, 0xFFFFFFFF),  # BPF_RET|BPF_K: the whole segment
    ]
    arr = (SockFilter * len(insns))(*[SockFilter(*i) for i in insns])
    return SockFprog(len(insns), arr), arr


def tcp_fds():
    """This process's file descriptors that are TCP sockets."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.family in (socket.AF_INET, socket.AF_INET6):
                out.append(fd)
        finally:
            s.close()
    return out


def drop_on_tcp_sockets(p, fds=None):
    """Attaches the filter to `fds` (every TCP socket of the process when
    None); returns how many took it."""
    libc = ctypes.CDLL(None, use_errno=True)
    prog, keep = program(p)
    n = 0
    for fd in tcp_fds() if fds is None else fds:
        if libc.setsockopt(fd, socket.SOL_SOCKET, SO_ATTACH_FILTER, ctypes.byref(prog), ctypes.sizeof(prog)) == 0:
            n += 1
        else:
            print(f"sockdrop: fd {fd}: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
    del keep
    return n


def retrans_segs():
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])


def transfer(p, mib=64):
    """A loopback transfer of `mib` MiB; returns retransmitted segments."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = []

    def serve():
        c, _ = srv.accept()
        if p:
            drop_on_tcp_sockets(p, [c.fileno()])
        n = 0
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            n += len(b)
        got.append(n)
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    before = retrans_segs()
    s = socket.create_connection(srv.getsockname())
    chunk = b"\0" * (1 << 20)
    for _ in range(mib):
        s.sendall(chunk)
    s.close()
    t.join()
    assert got == [mib << 20], got
    return retrans_segs() - before


if __name__ == "__main__":
    p = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02
    print(f"clean: {transfer(0)} retransmitted segments; with {p:.0%} dropped: {transfer(p)}")
