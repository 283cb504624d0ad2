#!/usr/bin/env python3
"""Each on phase of a traced job against the calls the job made in it, on
the development machine, from what scripts/gpu/phases.sh keeps: the job's
recording (NAME.rec.gz: the duty cycle's intervals, and the kernel's totals
with the time they were read, CLOCK_MONOTONIC) and its own blocks
(NAME.records: each block's end on CLOCK_MONOTONIC; 200 copy pairs or 50
all-reduces a block).

Per job: the kernel's count in each on phase over the calls the job made
in it (how exactly a phase counts); the job's own rate in its on phases
over its rate in the 50 ms around each (what traps cost it); its rate in
the on phases over its rate in the whole loop, and the same for random
windows of the same length (where the phases fell); the job's own stalls
(blocks over five times the median).

Usage: scripts/gpu/phases.py DIR/NAME...   (al-* names are all-reduce jobs)
"""
import gzip
import json
import random
import statistics as st
import sys


def made(ends, per_block, a, b):
    """Calls the job made in [a, b], each block's spread evenly over it."""
    n = 0.0
    for i in range(1, len(ends)):
        s, e = ends[i - 1], ends[i]
        o = max(0.0, min(b, e) - max(a, s))
        n += per_block * o / (e - s)
    return n


def on_phases(lines, ops):
    """(start, end, counted) of each on phase whose end a totals read
    anchors: the interval ends where its totals were read, less the rest
    after its on part; one without a read counted nothing (its totals did
    not change) and is anchored back from the next one that has."""
    groups, i = [], 0
    ev = [d for d in lines if d.get("type") in ("duty", "aggregates")]
    while i < len(ev):
        d = ev[i]
        i += 1
        if d["type"] != "duty" or d.get("rest"):
            continue
        g = {"on": d["on_us"] / 1e6, "off": d["off_us"] / 1e6, "agg": None, "rest": 0.0}
        if i < len(ev) and ev[i]["type"] == "aggregates":
            g["agg"] = ev[i]
            i += 1
        if i < len(ev) and ev[i]["type"] == "duty" and ev[i].get("rest"):
            g["rest"] = ev[i]["off_us"] / 1e6
            i += 1
        groups.append(g)
    end = [g["agg"]["t_ns"] / 1e9 - g["rest"] if g["agg"] else None for g in groups]
    for k in range(len(groups) - 2, -1, -1):
        if end[k] is None and end[k + 1] is not None:
            nxt = groups[k + 1]
            end[k] = end[k + 1] - nxt["on"] - nxt["off"] - groups[k]["rest"]
    out, prev = [], None
    for k, g in enumerate(groups):
        total = sum(r["calls"] for r in g["agg"]["rows"] if r["op"].startswith(ops)) if g["agg"] else prev
        counted = None if prev is None or total is None else total - prev
        prev = total
        if 0 < g["on"] < 0.1 and end[k] is not None and counted is not None:
            out.append((end[k] - g["on"], end[k], counted))
    return out


def main():
    for name in sys.argv[1:]:
        allreduce = "/al-" in name or name.startswith("al-")
        per_block, ops = (50, ("ncclAllReduce",)) if allreduce else (400, ("cuMemcpy",))
        ends = [float(l.split()[2]) for l in open(f"{name}.records")]
        gaps = [ends[i] - ends[i - 1] for i in range(1, len(ends))]
        med = st.median(gaps)
        stalls = [g for g in gaps if g > 5 * med]
        span = ends[-1] - ends[0]
        line = (f"{name}: blocks {med * 1e3:.2f} ms median, stalls {len(stalls) / span:.1f}/s "
                f"({100 * sum(stalls) / span:.1f}% of the loop)")
        try:
            lines = [json.loads(l) for l in gzip.open(f"{name}.rec.gz", "rt")]
        except OSError:
            print(line + " (untraced)")
            continue
        ph = [(a, b, c) for a, b, c in on_phases(lines, ops) if ends[0] < a - 0.05 and b + 0.05 < ends[-1]]
        if not ph:
            print(line + "; no short on phases")
            continue
        m = [made(ends, per_block, a, b) for a, b, _ in ph]
        exact = [c / x for (_, _, c), x in zip(ph, m) if x > 20]
        slow = [x / (b - a) / ((made(ends, per_block, a - 0.05, a) + made(ends, per_block, b, b + 0.05)) / 0.1)
                for (a, b, _), x in zip(ph, m)]
        overall = made(ends, per_block, ends[0], ends[-1]) / span
        inph = sum(m) / sum(b - a for a, b, _ in ph) / overall
        length = st.median([b - a for a, b, _ in ph])
        rng = random.Random(1)
        windows = [rng.uniform(ends[0], ends[-1] - length) for _ in range(2000)]
        rnd = sum(made(ends, per_block, a, a + length) for a in windows) / (2000 * length) / overall
        print(line + f"; {len(ph)} on phases of {length * 1e3:.2f} ms median: counted/made "
              f"{st.median(exact) if exact else float('nan'):.3f}; job's rate in a phase / the 50 ms around it "
              f"{st.median(slow):.3f}; in the phases / the whole loop {inph:.3f} "
              f"(random windows of that length {rnd:.3f}); {sum(1 for _, _, c in ph if c == 0)} counted nothing")


if __name__ == "__main__":
    main()
