#!/usr/bin/env python3
"""The host benchmarks of `cargo xtask bench` for a machine without cargo
(the GPU machine: build on the development host, carry the binary).

  python3 scripts/gpu/hostbench.py [--bin dist/gdrtrace] [--rounds 21]
      [--iterations 60000] [--pipeline-threads 1,2,4] [--skip-churn]

1. pin-churn: `drive pin-churn --odirect-mib 0` untraced and under
   `gdrtrace run`, rounds interleaved with the order alternating; each
   round's ratio of the workload's own elapsed and CPU time (its summary
   file), then the median of per-round ratios and the ratio of medians.
2. pipeline: `bench pipeline` unpaced with 1, 2, 4 generator threads:
   events/s delivered, drops, the tracer's CPU per event.
3. uprobe-hit: `bench uprobe-hit`, what one probed collective costs per
   call (entry-only, summed in the kernel).

Prints a Markdown summary; the raw numbers go to $OUT/hostbench.json when
OUT is set.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def churn(binary, iterations, traced):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [binary, "drive", "pin-churn", "--iterations", str(iterations), "--odirect-mib", "0", "--summary", path]
    if traced:
        cmd = [binary, "run", "--json", path + ".report", "--"] + cmd
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    s = json.load(open(path))
    drops = None
    if traced:
        r = json.load(open(path + ".report"))
        drops = r["loss"]["ringbuf_drops"]
        os.unlink(path + ".report")
    os.unlink(path)
    return s["elapsed_s"], s["cpu_s"], drops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="dist/gdrtrace")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--iterations", type=int, default=60000)
    ap.add_argument("--pipeline-threads", default="1,2,4")
    ap.add_argument("--pipeline-calls", type=int, default=4000000)
    ap.add_argument("--skip-churn", action="store_true")
    a = ap.parse_args()
    out = {"rounds": []}
    for i in range(0 if a.skip_churn else a.rounds):
        order = [False, True] if i % 2 == 0 else [True, False]
        got = {t: churn(a.bin, a.iterations, t) for t in order}
        (ue, uc, _), (te, tc, d) = got[False], got[True]
        out["rounds"].append({"untraced_s": ue, "untraced_cpu_s": uc, "traced_s": te, "traced_cpu_s": tc, "drops": d})
        print(f"round {i + 1}: untraced {ue:.3f} s, traced {te:.3f} s ({te / ue:.3f}), drops {d}", file=sys.stderr)
    rs = out["rounds"]
    med = statistics.median
    if not rs:
        rs = [{"untraced_s": 1, "untraced_cpu_s": 1, "traced_s": 1, "traced_cpu_s": 1, "drops": 0}]
    el = med(r["traced_s"] / r["untraced_s"] for r in rs)
    cpu = med(r["traced_cpu_s"] / r["untraced_cpu_s"] for r in rs)
    rom = med(r["traced_s"] for r in rs) / med(r["untraced_s"] for r in rs)
    drops = sum(r["drops"] for r in rs)
    print(f"- pin-churn ({a.iterations} iterations, {a.rounds} rounds interleaved, drops {drops}):")
    print(f"  - elapsed: median of per-round ratios {el:.3f}, ratio of medians {rom:.3f}"
          f" (untraced median {med(r['untraced_s'] for r in rs):.3f} s)")
    print(f"  - CPU time: median of per-round ratios {cpu:.3f}")
    out["pipeline"] = []
    print("- pipeline (unpaced):\n\n  | threads | delivered/s | delivered | drops | tracer CPU us/event |\n  |---|---|---|---|---|")
    for t in [int(x) for x in a.pipeline_threads.split(",") if x]:
        p = subprocess.run([a.bin, "bench", "pipeline", "--calls", str(a.pipeline_calls), "--threads", str(t)],
                           capture_output=True, text=True)
        try:
            v = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
        except (ValueError, IndexError):
            print(f"  | {t} | failed: {p.stderr.strip()[-200:]} | | | |")
            continue
        out["pipeline"].append(v)
        print(f"  | {t} | {v['events_per_s']:.0f} | {v['delivered']} of {v['calls']} | {v['ringbuf_drops']} |"
              f" {v['tracer_cpu_us_per_event']:.2f} |")
    p = subprocess.run([a.bin, "bench", "uprobe-hit"], capture_output=True, text=True)
    try:
        out["uprobe_hit"] = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
        h = out["uprobe_hit"]
        print(f"- uprobe hit ({h['mode']}): {h['ns_per_hit']:.0f} ns per probed call"
              f" (rounds {h['ns_per_hit_min']:.0f}-{h['ns_per_hit_max']:.0f}),"
              f" the kernel counted {h['counted_calls']} calls")
    except (ValueError, IndexError):
        print(f"- uprobe hit: failed: {p.stderr.strip()[-300:]}")
    if os.environ.get("OUT"):
        json.dump(out, open(os.path.join(os.environ["OUT"], "hostbench.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
