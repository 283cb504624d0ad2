"""An independent torch copy loop (not `gdrtrace drive cuda-copy`): a host
buffer copied to a GPU buffer and back into the same GPU buffer, --seconds
long. --memory pinned (pin_memory=True: cudaHostAlloc), pageable (plain
host tensor) or registered (a pageable tensor pinned with cudaHostRegister,
VmPin printed before and after: does the driver's pinning show in VmPin?).

Prints "ready pid=P host=0x.. dev=0x.. vmpin_kb=N" once the buffers exist,
then waits --hold seconds (time for `gdrtrace attach` after allocation), and
writes to --maps the /proc/self/maps lines of the NVIDIA devices and the
lines holding each buffer: what the tracer infers pre-existing buffers from.
"""
import argparse
import os
import time

import torch


def vmpin_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmPin:"):
            return int(line.split()[1])
    return -1


def maps_of(addrs):
    out = []
    for line in open("/proc/self/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        held = [name for name, a in addrs.items() if lo <= a < hi]
        if held or "nvidia" in line:
            out.append(("[" + ",".join(held) + "] " if held else "") + line.rstrip())
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--memory", choices=["pinned", "pageable", "registered"], required=True)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--hold", type=float, default=0)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--maps")
    a = ap.parse_args()
    n = a.mib << 20
    g = torch.empty(n, dtype=torch.uint8, device="cuda")
    before = vmpin_kb()
    if a.memory == "pinned":
        h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    else:
        h = torch.empty(n, dtype=torch.uint8)
        h.fill_(1)
    if a.memory == "registered":
        err = torch.cuda.cudart().cudaHostRegister(h.data_ptr(), n, 0)
        print(f"cudaHostRegister -> {err}; VmPin {before} kB before, {vmpin_kb()} kB after", flush=True)
    print(f"ready pid={os.getpid()} host={h.data_ptr():#x} dev={g.data_ptr():#x} vmpin_kb={vmpin_kb()}", flush=True)
    if a.maps:
        with open(a.maps, "w") as f:
            f.write("\n".join(maps_of({"host": h.data_ptr(), "dev": g.data_ptr()})) + "\n")
    time.sleep(a.hold)
    end = time.time() + a.seconds
    copies = 0
    while time.time() < end:
        g.copy_(h, non_blocking=True)
        h.copy_(g, non_blocking=True)
        copies += 2
        if copies % 64 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(f"copies={copies} bytes={copies * n}", flush=True)
