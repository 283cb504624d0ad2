"""A NIXL transfer between two processes through its UCX backend, as
disaggregated inference moves a KV cache: a target registers a buffer and
publishes its metadata, an initiator registers its own and loads the
target's metadata. With --op WRITE (push) the initiator writes its buffer
into the target's ITERATIONS times, then notifies it, and the target checks
the bytes that arrived; with --op READ (pull, as a decode worker takes a
prefill worker's KV cache) it reads the target's buffer into its own and
checks it; with --op both it reads, pauses --pause seconds, then writes.

    python3 nixl.py run --dir DIR [--op WRITE|READ|both] [--memory vram|dram]
                        [--size 64M] [--iterations 20] [--gpus 0,1]

`gdrtrace drive nixl` writes this script out and runs it (the binary
carries it); it is the project's NIXL workload.

`run` starts the target and the initiator (each `python3 nixl_xfer.py
target|initiator ...`, on its own GPU with VRAM) and writes DIR/summary.json:
what each side did, and whether the data arrived intact. Metadata goes
through files in DIR (no sockets of its own); each side's output (with
UCX's log lines when UCX_LOG_LEVEL/UCX_PROTO_INFO are set) goes to
DIR/SIDE.log and DIR/ucx.log. The module is nixl_cu13, nixl_cu12 or nixl
(on the GPU machine the carried wheel, scripts/gpu/ucx-carry.sh); with --memory dram it runs on a
machine without GPUs (numpy buffers), as it was tried on the development host.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def nixl_module():
    """NIXL's Python module: the CUDA 13 or 12 wheel, or a build of the project."""
    import importlib

    for name in ("nixl_cu13", "nixl_cu12", "nixl._api", "nixl"):
        try:
            m = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(m, "nixl_agent"):
            return m
    raise SystemExit("nixl_xfer: no NIXL Python module (nixl_cu13, nixl_cu12 or nixl) can be imported")


def agent(name):
    nixl = nixl_module()
    return nixl.nixl_agent(name, nixl.nixl_agent_config(backends=["UCX"]))


def buffer(memory, size, fill):
    """A buffer of SIZE bytes filled with FILL: (object, its NIXL descriptors)."""
    if memory == "vram":
        import torch

        t = torch.full((size,), fill, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return t, t
    import numpy as np

    a = np.full(size, fill, dtype=np.uint8)
    return a, [(a.ctypes.data, size, 0, "")]


def checksum(obj, memory):
    """(first byte, last byte, byte sum) of a buffer."""
    if memory == "vram":
        import torch

        torch.cuda.synchronize()
        return int(obj[0]), int(obj[-1]), int(obj.sum(dtype=torch.int64))
    return int(obj[0]), int(obj[-1]), int(obj.sum(dtype="int64"))


def wait_for(path, timeout=120.0):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit(f"nixl_xfer: {path} did not appear in {timeout:.0f} s")
        time.sleep(0.05)


def registered(ag, a, fill):
    """A buffer filled with FILL, registered with the agent: (buffer,
    registration, transfer descriptors)."""
    buf, descs = buffer(a.memory, a.size, fill)
    if a.memory == "vram":
        return buf, ag.register_memory(descs), ag.get_xfer_descs(descs)
    return buf, ag.register_memory(descs, "DRAM"), ag.get_xfer_descs([d[:3] for d in descs], "DRAM")


# The target's buffer holds TARGET_FILL (what a READ brings back); a WRITE
# brings WRITE_FILL.
TARGET_FILL, WRITE_FILL = 7, 9


def target(a):
    ag = agent("target")
    buf, reg, xfer = registered(ag, a, TARGET_FILL)
    tmp = os.path.join(a.dir, "target.tmp")
    with open(tmp, "wb") as f:
        f.write(ag.get_agent_metadata())
    os.replace(tmp, os.path.join(a.dir, "target.meta"))
    with open(tmp, "wb") as f:
        f.write(ag.get_serialized_descs(xfer))
    os.replace(tmp, os.path.join(a.dir, "target.descs"))
    deadline = time.time() + a.timeout
    while not ag.check_remote_xfer_done("initiator", b"done"):
        if time.time() > deadline:
            raise SystemExit("nixl_xfer: target: no notification from the initiator")
        time.sleep(0.001)
    first, last, total = checksum(buf, a.memory)
    ag.deregister_memory(reg)
    want = WRITE_FILL if a.op in ("WRITE", "both") else TARGET_FILL
    result = {"side": "target", "pid": os.getpid(), "memory": a.memory, "size": a.size,
              "first": first, "last": last, "byte_sum": total,
              "verified": first == last == want and total == want * a.size}
    print(json.dumps(result), flush=True)
    return 0 if result["verified"] else 1


def transfers(ag, op, local, remote, peer, iterations, last_notifies):
    """ITERATIONS transfers of OP, each waited for: (count, seconds, backend)."""
    started = time.time()
    backend = None
    for i in range(iterations):
        notif = b"done" if last_notifies and i == iterations - 1 else b""
        h = ag.initialize_xfer(op, local, remote, peer, notif)
        state = ag.transfer(h)
        while state == "PROC":
            state = ag.check_xfer_state(h)
        if state != "DONE":
            raise SystemExit(f"nixl_xfer: {op} transfer {i} ended in state {state}")
        backend = ag.query_xfer_backend(h)
        ag.release_xfer_handle(h)
    return iterations, time.time() - started, backend


def initiator(a):
    ag = agent("initiator")
    buf, reg, local = registered(ag, a, 0)
    wait_for(os.path.join(a.dir, "target.descs"))
    with open(os.path.join(a.dir, "target.meta"), "rb") as f:
        peer = ag.add_remote_agent(f.read())
    with open(os.path.join(a.dir, "target.descs"), "rb") as f:
        remote = ag.deserialize_descs(f.read())
    result = {"side": "initiator", "pid": os.getpid(), "memory": a.memory, "size": a.size, "phases": []}
    ops = ["READ", "WRITE"] if a.op == "both" else [a.op]
    verified = True
    for k, op in enumerate(ops):
        if k > 0:
            time.sleep(a.pause)
        if op == "WRITE":
            fill(buf, a.memory, WRITE_FILL)
        # The target waits for the notification of the last transfer.
        n, elapsed, backend = transfers(ag, op, local, remote, peer, a.iterations, k == len(ops) - 1)
        phase = {"op": op, "transfers": n, "bytes": n * a.size, "backend": backend, "elapsed_s": elapsed,
                 "gb_s": n * a.size / elapsed / 1e9 if elapsed > 0 else 0.0, "start_s": time.time() - elapsed}
        if op == "READ":
            first, last, total = checksum(buf, a.memory)
            phase["verified"] = first == last == TARGET_FILL and total == TARGET_FILL * a.size
            verified &= phase["verified"]
        result["phases"].append(phase)
    ag.deregister_memory(reg)
    result["bytes"] = sum(p["bytes"] for p in result["phases"])
    result["verified"] = verified
    print(json.dumps(result), flush=True)
    return 0 if verified else 1


def fill(obj, memory, value):
    if memory == "vram":
        import torch

        obj.fill_(value)
        torch.cuda.synchronize()
    else:
        obj.fill(value)


def run(a):
    os.makedirs(a.dir, exist_ok=True)
    for f in ("target.meta", "target.descs"):
        if os.path.exists(os.path.join(a.dir, f)):
            os.remove(os.path.join(a.dir, f))
    gpus = a.gpus.split(",")
    common = ["--dir", a.dir, "--op", a.op, "--memory", a.memory, "--size", str(a.size),
              "--iterations", str(a.iterations), "--timeout", str(a.timeout), "--pause", str(a.pause)]
    procs = []
    for side, gpu in (("target", gpus[-1]), ("initiator", gpus[0])):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu) if a.memory == "vram" else dict(os.environ)
        procs.append((side, subprocess.Popen([sys.executable, __file__, side] + common, env=env,
                                             stdout=subprocess.PIPE, text=True)))
    out = {"op": a.op, "memory": a.memory, "size": a.size, "iterations": a.iterations, "gpus": a.gpus}
    rc = 0
    # Each side's whole output (UCX's log lines among it, when UCX_LOG_LEVEL
    # or UCX_PROTO_INFO is set) goes to DIR/SIDE.log and DIR/ucx.log.
    with open(os.path.join(a.dir, "ucx.log"), "w") as log:
        for side, p in procs:
            text, _ = p.communicate(timeout=a.timeout + 60)
            rc |= p.returncode
            with open(os.path.join(a.dir, f"{side}.log"), "w") as f:
                f.write(text)
            log.write(text)
            lines = [l for l in text.splitlines() if l.startswith("{")]
            out[side] = json.loads(lines[-1]) if lines else {"exit": p.returncode}
    out["ok"] = rc == 0 and out["target"].get("verified", False) and out["initiator"].get("verified", False)
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["run", "target", "initiator"])
    p.add_argument("--dir", required=True)
    p.add_argument("--op", choices=["WRITE", "READ", "both"], default="WRITE")
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--memory", choices=["vram", "dram"], default="vram")
    p.add_argument("--size", type=parse_size, default=64 << 20)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--gpus", default="0,1")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    return {"run": run, "target": target, "initiator": initiator}[a.role](a)


if __name__ == "__main__":
    sys.exit(main())
