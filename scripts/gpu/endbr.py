#!/usr/bin/env python3
"""What one probed call costs on a library's own function: `ncclGroupStart`
and `ncclGroupEnd` (an empty group: no GPU work, no communicator) called
through ctypes in a loop, timed in blocks. Run untraced and under
`gdrtrace run --collectives exact` (every call trapped): the difference per
call is the trap's cost on that build's first instruction (a CET build's
`endbr64`, single-stepped, or what the tracer probes after it).

Usage: python3 endbr.py --lib PATH [--calls 200000] [--blocks 10]
Prints: "endbr: LIB first bytes ...; N calls, median X ns a call (blocks ...)".
"""
import argparse
import ctypes
import statistics
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--calls", type=int, default=200000)
    p.add_argument("--blocks", type=int, default=10)
    a = p.parse_args()
    lib = ctypes.CDLL(a.lib)
    start, end = lib.ncclGroupStart, lib.ncclGroupEnd
    first = ctypes.string_at(ctypes.cast(start, ctypes.c_void_p).value, 8).hex(" ")
    per = max(1, a.calls // a.blocks)
    for _ in range(1000):  # warm-up
        start(), end()
    blocks = []
    for _ in range(a.blocks):
        t = time.perf_counter_ns()
        for _ in range(per):
            if start() != 0 or end() != 0:
                raise SystemExit("endbr: ncclGroupStart/End failed")
        blocks.append((time.perf_counter_ns() - t) / (2 * per))
    print(f"endbr: {a.lib} ncclGroupStart begins {first}; {2 * per * a.blocks} calls, "
          f"median {statistics.median(blocks):.0f} ns a call (blocks {min(blocks):.0f}-{max(blocks):.0f})",
          flush=True)


if __name__ == "__main__":
    main()
