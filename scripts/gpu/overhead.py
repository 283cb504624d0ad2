"""The tracer's overhead on an independent torch.distributed all-reduce job
(not `gdrtrace drive nccl`), measured the way docs/perf.md describes:

run:    whole jobs, traced by `gdrtrace run` and untraced, interleaved
        (alternating which goes first); each job measures 8 KiB per-call
        latency, then 256 MiB bus bandwidth. Per-round ratios, and their
        median.
attach: one long job per size; `gdrtrace attach --duration W` windows
        alternate with untraced windows of the same length; each on window
        is paired with the off window after it. Then the same procedure
        with the tracer off in both halves (off/off control).

A job measures in blocks: BLOCK calls, one synchronize, the block's time
divided by BLOCK is one per-call sample (nccl-tests style); rank 0 writes
(end time, us per call) for every block.

--job copies: the job is one process instead, an 8 KiB pinned copy loop
(a pin_memory host tensor copied to a GPU tensor and back, non_blocking:
cuMemcpyHtoDAsync and cuMemcpyDtoHAsync), in blocks of COPY_BLOCK
iterations with one synchronize; a sample is us per iteration (two
copies). Its attach part has the same on/off pairs and off/off control;
its run part whole-job rounds.

--job gds: one process reading 4 KiB blocks of a file into GPU memory
with cuFileRead (libcufile by ctypes, as scripts/gpu/gds_xfer.py; compat
mode without nvidia-fs), in blocks of GDS_BLOCK reads; a sample is us per
read. The file (GDS_FILE, default /var/tmp/gdr-gds-data/overhead.bin) is
written once first. Its attach part as the copy job's.

Part `trap`: the per-trap cost on torch's
own libraries: the copy job (libcuda) and the one-rank all-reduce job
(libnccl) under `run --collectives exact` (every call trapped) against
untraced rounds: (on - off) per iteration / the report's traps per
iteration. Part `modes`: whole jobs in each of --modes per round (`off`
untraced, the rest `run --collectives MODE`), the order rotated every
round; each mode's ratio to the round's untraced jobs, and with two `off`
the off/off control of whole jobs (where a run's cost and the machine's
own spread between jobs are told apart).

Usage (on the GPU machine, NVLink multicast off in the environment):
  python3 overhead.py bench --gdrtrace BIN --out DIR [--ngpu N] [--rounds 10]
      [--pairs 12] [--control 6] [--window 1.5] [--parts run,attach,trap,modes]
      [--modes off,auto,exact,250ms/4s,off]
      [--job allreduce|copies|gds]
  python3 overhead.py job ...   (what the bench starts)
Results: DIR/overhead.json and a summary on stdout.
"""
import argparse
import json
import os
import re
import statistics as st
import subprocess
import sys
import time

SIZES = {"8K": 8 << 10, "256M": 256 << 20}
BLOCK = {"8K": 50, "256M": 10}
COPY_BLOCK = 200
GDS_BLOCK = 200


def copy_main(a):
    """The copy job: 8 KiB pinned host <-> GPU, non_blocking, in blocks."""
    import torch

    if (os.cpu_count() or 0) >= 8:
        os.sched_setaffinity(0, set(range(4, 8)))
    n = SIZES["8K"]
    h = torch.ones(n, dtype=torch.uint8, pin_memory=True)
    g = torch.empty(n, dtype=torch.uint8, device="cuda")
    for _ in range(200):
        g.copy_(h, non_blocking=True)
        h.copy_(g, non_blocking=True)
    torch.cuda.synchronize()
    if a.ready:
        with open(a.ready, "a") as f:
            f.write(f"ready 8K launcher={os.getpid()}\n")
    out = open(a.records, "w", buffering=1) if a.records else None
    samples, iters = [], 0
    end = time.time() + a.seconds
    while time.time() < end:
        t0 = time.perf_counter()
        for _ in range(COPY_BLOCK):
            g.copy_(h, non_blocking=True)
            h.copy_(g, non_blocking=True)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / COPY_BLOCK
        samples.append(us)
        iters += COPY_BLOCK
        if out:
            out.write(f"{time.time():.6f} {us:.3f} {time.monotonic():.6f}\n")
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"8K": {"us_per_call": st.median(samples), "busbw_gbps": 0.0, "samples": len(samples),
                              "iterations": iters, "copies": 2 * iters}}, f)


def gds_main(a):
    """The cuFile job: 4 KiB cuFileRead calls into a GPU buffer, in blocks."""
    import ctypes

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gds_xfer

    if (os.cpu_count() or 0) >= 8:
        os.sched_setaffinity(0, set(range(4, 8)))
    path = os.environ.get("GDS_FILE", "/var/tmp/gdr-gds-data/overhead.bin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    block, span = 4096, 64 << 20
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20) * (span >> 20))
    lib, _ = gds_xfer.libcufile()
    lib.cuFileDriverOpen.restype = gds_xfer.Error
    lib.cuFileHandleRegister.restype = gds_xfer.Error
    lib.cuFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(gds_xfer.Descr)]
    lib.cuFileRead.restype = ctypes.c_ssize_t
    lib.cuFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.c_long]
    if lib.cuFileDriverOpen().err != 0:
        raise SystemExit("overhead: cuFileDriverOpen failed")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    fh = ctypes.c_void_p()
    d = gds_xfer.Descr(type=1, handle=fd, fs_ops=None)
    e = lib.cuFileHandleRegister(ctypes.byref(fh), ctypes.byref(d))
    if e.err != 0:
        raise SystemExit(f"overhead: cuFileHandleRegister: {e.err}")
    buf = torch.empty(block, dtype=torch.uint8, device="cuda")
    ptr = buf.data_ptr()
    off, reads = 0, 0

    def one():
        nonlocal off, reads
        if lib.cuFileRead(fh, ptr, block, off, 0) != block:
            raise SystemExit(f"overhead: cuFileRead at {off} failed")
        off = (off + block) % span
        reads += 1

    for _ in range(GDS_BLOCK):
        one()
    if a.ready:
        with open(a.ready, "a") as f:
            f.write(f"ready 8K launcher={os.getpid()}\n")
    out = open(a.records, "w", buffering=1) if a.records else None
    samples = []
    end = time.time() + a.seconds
    while time.time() < end:
        t0 = time.perf_counter()
        for _ in range(GDS_BLOCK):
            one()
        us = (time.perf_counter() - t0) * 1e6 / GDS_BLOCK
        samples.append(us)
        if out:
            out.write(f"{time.time():.6f} {us:.3f} {time.monotonic():.6f}\n")
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"8K": {"us_per_call": st.median(samples), "busbw_gbps": 0.0, "samples": len(samples),
                              "reads": reads, "bytes": reads * block}}, f)


def rank_main(rank, n, a):
    """One rank of the job (top level: torch.multiprocessing pickles it)."""
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    # Each rank (and its NCCL threads) on its own cores, the same in every
    # job: 8 KiB latency moved 23 -> 40 us between unpinned jobs.
    if (os.cpu_count() or 0) >= 8 * n:
        os.sched_setaffinity(0, set(range(4 + 4 * rank, 8 + 4 * rank)))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    # Line-buffered: the job is ended with SIGTERM, which flushes nothing.
    out = open(a.records, "w", buffering=1) if rank == 0 and a.records else None
    summary = {}
    for name in a.sizes.split(","):
        x = torch.ones(SIZES[name] // 4, device="cuda")
        block = BLOCK[name]
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        if rank == 0 and a.ready:
            with open(a.ready, "a") as f:
                f.write(f"ready {name} launcher={os.getppid()}\n")
        samples = []
        end = time.time() + a.seconds
        while time.time() < end:
            t0 = time.perf_counter()
            for _ in range(block):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            us = (time.perf_counter() - t0) * 1e6 / block
            samples.append(us)
            if out:
                out.write(f"{time.time():.6f} {us:.3f} {time.monotonic():.6f}\n")
        med = st.median(samples)
        # nccl-tests' bus bandwidth factor, 2(n-1)/n; one rank (a one-GPU
        # machine) moves nothing between ranks, so its figure is the
        # algorithm bandwidth.
        factor = 2 * (n - 1) / n if n > 1 else 1.0
        busbw = SIZES[name] * factor / (med * 1e-6) / 1e9
        # Calls this rank made: the warm-up and every block.
        summary[name] = {"us_per_call": med, "busbw_gbps": busbw, "samples": len(samples),
                         "calls": 20 + block * len(samples)}
    if out:
        out.close()
    if rank == 0 and a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    dist.destroy_process_group()


def job(a):
    if a.job == "copies":
        copy_main(a)
        return
    if a.job == "gds":
        gds_main(a)
        return
    import torch.multiprocessing as mp

    mp.spawn(rank_main, args=(a.ngpu, a), nprocs=a.ngpu)


def sh(cmd, timeout):
    """Runs a job in its own session; one that hangs (a rank stuck in NCCL's
    set-up was seen once) is killed with its whole group after `timeout` s."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        out += f"\n[killed after {timeout} s]\n"
    return out


def job_cmd(a, sizes, seconds, port, summary=None, records=None, ready=None):
    cmd = [sys.executable, os.path.abspath(__file__), "job", "--job", a.job, "--ngpu", str(a.ngpu),
           "--sizes", sizes, "--seconds", str(seconds), "--port", str(port)]
    for flag, v in (("--summary", summary), ("--records", records), ("--ready", ready)):
        if v:
            cmd += [flag, v]
    return cmd


def collectives(a):
    """The tracer's --collectives flag, when one was asked for."""
    return ["--collectives", a.collectives] if a.collectives else []


def sampled(rep):
    """What the duty cycle did in one report: (counted, estimated) all-reduce
    calls and the sampled share of the busiest rank's time."""
    rows = [c for c in rep.get("collectives", []) if c["op"] == "ncclAllReduce"]
    est = sum(c["calls"] for c in rows)
    counted = sum((c.get("counted") or {"calls": c["calls"]})["calls"] for c in rows)
    shares = [p["collectives_sampled"]["sampled_us"] / max(1, p["collectives_sampled"]["traced_us"])
              for p in rep.get("processes", []) if p.get("collectives_sampled")]
    return counted, est, (min(shares) if shares else 1.0)


def copies_of(rep):
    """Copies in a report (counted or estimated) and their verdicts."""
    ops = [o for o in rep.get("operations", []) if o["name"] in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync")]
    return sum(o["calls"] for o in ops), sorted({o["transport"] for o in ops})


def traps_per_s(rep):
    """The busiest process's probe traps per second of the trace (entries of
    every op, returns of the ops that have one: copies)."""
    hits = {h["op"]: h["hits"] for h in rep.get("probe_hits", [])}
    traps = sum(n * (2 if op.startswith(("cuMemcpy", "cuFileRead", "cuFileWrite")) else 1) for op, n in hits.items())
    return traps / max(rep.get("duration_s") or 1e-9, 1e-9)


def traps_after_budget(path, budget=1000.0):
    """From a recording's kernel totals: the most traps any process counted
    in a 1 s window after its first second over `budget` (copies trap twice
    a call, collectives once), and when that first second began (s into the
    trace); (None, None) when no process went over."""
    per, start = {}, None
    for line in open(path):
        if start is None and '"header"' in line:
            start = json.loads(line).get("started_ns", 0) / 1e9
        if '"aggregates"' not in line:
            continue
        v = json.loads(line)
        if v.get("type") != "aggregates":
            continue
        t = v["t_ns"] / 1e9
        tot = {}
        for r in v.get("rows", []):
            op = r.get("op", "")
            w = 2 if op.startswith("cuMemcpy") else 1 if op.startswith("nccl") else 0
            tot[r["pid"]] = tot.get(r["pid"], 0) + w * r["calls"]
        for pid, n in tot.items():
            # Lines are written when the totals change: a process's calls
            # began after the trace did (its first point: nothing counted).
            per.setdefault(pid, [(start, 0)] if start else []).append((t, n))
    worst, first = None, None
    for pts in per.values():
        t0 = next((pts[i][0] for i in range(1, len(pts))
                   if (pts[i][1] - pts[i - 1][1]) / max(pts[i][0] - pts[i - 1][0], 1e-6) > budget), None)
        if t0 is None:
            continue
        first = t0 - (start or pts[0][0]) if first is None else min(first, t0 - (start or pts[0][0]))
        # The totals only change where a line is written: the count at t is
        # that of the last line at or before t, and the busiest second
        # (t - 1, t] after t0's second ends at a line.
        def at(t):
            n = 0
            for tk, nk in pts:
                if tk > t:
                    break
                n = nk
            return n
        # No line after its first second: nothing counted after it.
        worst = max([worst or 0] + [nj - at(tj - 1.0) for tj, nj in pts if tj - 1.0 >= t0 + 1.0])
    return worst, first


def off_phase_traps(text):
    """The traps gdrtrace said fell in off phases (links being attached or
    closed: not counted), from its closing lines; 0 when it said none."""
    m = re.search(r"(\d+) trap\(s\) of the sampled rows in off phases", text)
    return int(m.group(1)) if m else 0


def run_part(a, res, mode=None, tag="run"):
    rows = []
    sizes = "8K" if a.job == "copies" or tag == "trap" else a.sizes
    flags = ["--collectives", mode] if mode else collectives(a)
    for r in range(a.rounds if tag == "run" else a.trap_rounds):
        got, off_traps = {}, 0
        for traced in ([True, False] if r % 2 == 0 else [False, True]):
            summ = f"{a.out}/{tag}-{r}-{'on' if traced else 'off'}.json"
            cmd = job_cmd(a, sizes, a.window, 29700 + 2 * r + traced, summary=summ)
            if traced:
                cmd = [a.gdrtrace, "run", *flags, "--json", f"{a.out}/{tag}-{r}-report.json",
                       "--record", f"{a.out}/{tag}-{r}.rec", "--"] + cmd
            text = sh(cmd, timeout=60)
            if traced:
                off_traps = off_phase_traps(text)
            open(f"{a.out}/{tag}-{r}-{'on' if traced else 'off'}.txt", "w").write(text)
            try:
                got[traced] = json.load(open(summ))
            except (OSError, ValueError) as e:
                print(f"run round {r} ({'on' if traced else 'off'}): no summary ({e}): {text[-400:]}", flush=True)
        if len(got) < 2:
            continue
        big = got[True].get("256M", {"busbw_gbps": 1.0}), got[False].get("256M", {"busbw_gbps": 1.0})
        row = {
            "round": r,
            "lat8k_on": got[True]["8K"]["us_per_call"], "lat8k_off": got[False]["8K"]["us_per_call"],
            "bw256m_on": big[0]["busbw_gbps"], "bw256m_off": big[1]["busbw_gbps"],
            "copies_made": got[True]["8K"].get("copies"),
        }
        row["lat8k_ratio"] = row["lat8k_on"] / row["lat8k_off"]
        row["bw256m_ratio"] = row["bw256m_on"] / max(row["bw256m_off"], 1e-9)
        try:
            rep = json.load(open(f"{a.out}/{tag}-{r}-report.json"))
        except (OSError, ValueError):
            rep = {"loss": {"ringbuf_drops": None, "complete": False}, "verdicts": []}
        row["drops"] = rep["loss"]["ringbuf_drops"]
        row["complete"] = rep["loss"]["complete"]
        row["verdicts"] = sorted({v["transport"] for v in rep.get("verdicts", [])})
        row["counted"], row["estimated"], row["sampled_share"] = sampled(rep)
        row["copies_reported"], row["copy_verdicts"] = copies_of(rep)
        row["traps_per_s"] = traps_per_s(rep)
        # Not in any count: spread over the job's loop, a mean a second.
        row["off_phase_traps"] = off_traps
        row["off_phase_traps_per_s"] = off_traps / a.window
        try:
            row["max_traps_1s_after_budget"], row["over_budget_at_s"] = traps_after_budget(f"{a.out}/{tag}-{r}.rec")
        except (OSError, ValueError, KeyError) as e:
            row["max_traps_1s_after_budget"], row["over_budget_at_s"] = None, None
            print(f"{tag} round {r}: no trap timeline ({e})", flush=True)
        own = got[True]["8K"].get("calls")
        if a.job == "copies" and row["copies_made"]:
            row["count_err"] = row["copies_reported"] / row["copies_made"] - 1
        elif own:
            row["count_err"] = row["estimated"] / (own * a.ngpu) - 1
        # The job's own per-iteration traps: its copies (entry and return)
        # or its all-reduces (entry only); set-up rows are not its cost.
        mine = "cuMemcpy" if a.job == "copies" else "ncclAllReduce"
        row["traps"] = sum(h["hits"] * (2 if h["op"].startswith("cuMemcpy") else 1)
                           for h in rep.get("probe_hits", []) if h["op"].startswith(mine))
        # Iterations the traced job made: copies / 2, or calls at one a sample block.
        iters = (row["copies_made"] or 0) / 2 if a.job == "copies" else None
        if iters:
            row["ns_per_trap"] = (row["lat8k_on"] - row["lat8k_off"]) * 1e3 * iters / max(row["traps"], 1)
        elif row["estimated"]:
            row["ns_per_trap"] = (row["lat8k_on"] - row["lat8k_off"]) * 1e3 * row["estimated"] / max(row["traps"], 1)
        rows.append(row)
        print(f"{tag} round {r} ({a.job}): copies {row['copies_made']} made, {row['copies_reported']} reported "
              f"{row['copy_verdicts']}; all-reduces {row['estimated']} estimated ({row['counted']} counted); "
              f"count error {row.get('count_err')}; traps/s {row['traps_per_s']:.0f}, most in a second after the "
              f"first over budget {row['max_traps_1s_after_budget']} (over at {row['over_budget_at_s']} s), "
              f"besides {row['off_phase_traps']} uncounted in off phases ({row['off_phase_traps_per_s']:.0f}/s of the loop); "
              f"ns/trap {row.get('ns_per_trap')}", flush=True)
        print(f"{tag} round {r}: 8K {row['lat8k_off']:.1f} -> {row['lat8k_on']:.1f} us ({row['lat8k_ratio']:.4f}), "
              f"256M {row['bw256m_off']:.1f} -> {row['bw256m_on']:.1f} GB/s ({row['bw256m_ratio']:.4f}), "
              f"drops {row['drops']}, verdicts {row['verdicts']}", flush=True)
    if not rows:
        res[tag] = {"rounds": [], "median_lat8k_ratio": float("nan"), "median_bw256m_ratio": float("nan"),
                    "drops": 0}
        return
    per_trap = [x["ns_per_trap"] for x in rows if x.get("ns_per_trap") is not None]
    res[tag] = {
        "rounds": rows,
        "median_lat8k_ratio": st.median(x["lat8k_ratio"] for x in rows),
        "median_bw256m_ratio": st.median(x["bw256m_ratio"] for x in rows),
        "drops": sum(x["drops"] or 0 for x in rows),
        "median_ns_per_trap": st.median(per_trap) if per_trap else None,
        "max_traps_per_s": max(x["traps_per_s"] for x in rows),
        "max_traps_1s_after_budget": max((x["max_traps_1s_after_budget"] or 0) for x in rows),
        "max_off_phase_traps_per_s": max(x["off_phase_traps_per_s"] for x in rows),
        "count_errors": [round(x["count_err"], 4) for x in rows if x.get("count_err") is not None],
    }


def modes_part(a, res):
    """Whole jobs in each of `--modes` (`off` untraced, anything else a
    `--collectives` mode of `run`), the order rotated every round so that
    each mode takes each place in turn. A mode's per-round ratio is its 8
    KiB latency over the mean of the round's untraced jobs; with two `off`
    in the list their ratio to each other is the off/off control: how far
    two untraced jobs of one round differ by themselves."""
    modes = a.modes.split(",")
    rows = []
    for r in range(a.rounds):
        k = r % len(modes)
        order = list(enumerate(modes))[k:] + list(enumerate(modes))[:k]
        got, info = {}, {}
        for i, mode in order:
            tag = f"modes-{r}-{i}"
            summ = f"{a.out}/{tag}.json"
            blocks = f"{a.out}/{tag}.blocks"
            cmd = job_cmd(a, "8K", a.window, 29800 + (r * len(modes) + i) % 150, summary=summ, records=blocks)
            if mode != "off":
                cmd = [a.gdrtrace, "run", "--collectives", mode, "--json", f"{a.out}/{tag}-report.json",
                       "--record", f"{a.out}/{tag}.rec", "--"] + cmd
            text = sh(cmd, timeout=60)
            open(f"{a.out}/{tag}.txt", "w").write(text)
            try:
                got[i] = json.load(open(summ))["8K"]["us_per_call"]
            except (OSError, ValueError, KeyError) as e:
                print(f"modes round {r} {mode}: no summary ({e}): {text[-400:]}", flush=True)
                continue
            try:
                # The spread of the job's own blocks: a job slow all along,
                # or slow in part of it.
                us = sorted(float(x.split()[1]) for x in open(blocks) if x.strip())
                q = [us[int(f * (len(us) - 1))] for f in (0.1, 0.5, 0.9)]
                print(f"modes round {r} {mode}: {len(us)} blocks, p10/p50/p90 {q[0]:.1f}/{q[1]:.1f}/{q[2]:.1f} us",
                      flush=True)
            except (OSError, ValueError, IndexError):
                pass
            if mode != "off":
                try:
                    rep = json.load(open(f"{a.out}/{tag}-report.json"))
                    hits = sorted(((h["hits"], h["op"]) for h in rep.get("probe_hits", [])), reverse=True)
                    try:
                        worst, _ = traps_after_budget(f"{a.out}/{tag}.rec")
                    except (OSError, ValueError, KeyError):
                        worst = None
                    info[i] = {"traps_per_s": round(traps_per_s(rep)), "top_hits": hits[:4],
                               "max_traps_1s_after_budget": worst, "off_phase_traps": off_phase_traps(text)}
                except (OSError, ValueError):
                    pass
        offs = [got[i] for i, m in enumerate(modes) if m == "off" and i in got]
        if not offs or len(got) < len(modes):
            continue
        base = st.mean(offs)
        row = {"round": r, "order": [m for _, m in order], "us": {f"{i}:{m}": got[i] for i, m in enumerate(modes)},
               "ratio": {f"{i}:{m}": got[i] / base for i, m in enumerate(modes)}, "traced": info}
        if len(offs) >= 2:
            row["off_off"] = offs[0] / offs[1]
        rows.append(row)
        print(f"modes round {r} (order {' '.join(row['order'])}): "
              + ", ".join(f"{k} {v:.2f} us ({row['ratio'][k]:.4f})" for k, v in row["us"].items())
              + (f"; off/off {row['off_off']:.4f}" if "off_off" in row else "")
              + "".join(f"; {modes[i]}: {v['traps_per_s']} traps/s, most in a second after the first over "
                        f"budget {v['max_traps_1s_after_budget']}, {v['off_phase_traps']} uncounted, top {v['top_hits'][:2]}"
                        for i, v in info.items()), flush=True)
    med = {}
    for i, m in enumerate(modes):
        vals = [x["ratio"][f"{i}:{m}"] for x in rows]
        if vals:
            med[f"{i}:{m}"] = {"median": st.median(vals), "min": min(vals), "max": max(vals)}
    ctl = [x["off_off"] for x in rows if "off_off" in x]
    res["modes"] = {"modes": modes, "rounds": rows, "median_ratio": med,
                    "off_off": {"median": st.median(ctl), "min": min(ctl), "max": max(ctl)} if ctl else None}


def trap_part(a, res):
    """Per-trap cost on torch's own libraries: every call trapped (exact)."""
    run_part(a, res, mode="exact", tag="trap")


def windows_median(samples, lo, hi):
    v = [us for t, us in samples if lo <= t <= hi]
    return (st.median(v), len(v)) if v else (None, 0)


def attach_part(a, res):
    out = {}
    for size in (("8K",) if a.job in ("copies", "gds") else ("8K", "256M")):
        rec, ready = f"{a.out}/attach-{size}.records", f"{a.out}/attach-{size}.ready"
        total = 14 + (a.pairs + a.control) * (2 * a.window + 2.5)
        jp = subprocess.Popen(job_cmd(a, size, total, 29800 + len(out), records=rec, ready=ready),
                              stdout=open(f"{a.out}/attach-{size}.job.txt", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
        for _ in range(1200):
            if os.path.exists(ready) and "ready" in open(ready).read():
                break
            time.sleep(0.1)
        launcher = int(open(ready).read().split("launcher=")[1].split()[0])
        time.sleep(2)
        windows = []
        for i in range(a.pairs + a.control):
            control = i >= a.pairs
            if control:
                on0 = time.time()
                time.sleep(a.window)
                on1 = time.time()
                close_ms = None
            else:
                p = subprocess.Popen([a.gdrtrace, "attach", *collectives(a), "--pid", str(launcher),
                                      "--duration", f"{a.window}s",
                                      "--json", f"{a.out}/attach-{size}-{i}.json"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                on0 = None
                err = []
                for line in p.stderr:
                    err.append(line)
                    if "attached to" in line and on0 is None:
                        on0 = time.time()
                p.wait()
                on1 = time.time()
                open(f"{a.out}/attach-{size}-{i}.err", "w").write("".join(err))
                close_ms = next((float(l.split(" in ")[1].split()[0]) for l in err if "closed" in l), None)
                on0 = on0 or on1 - a.window
            # The window the probes were live, without its edges.
            off0 = time.time() + 0.3
            time.sleep(a.window + 0.3)
            off1 = time.time()
            windows.append({"i": i, "control": control, "on": (on0 + 0.2, on1 - 0.2), "off": (off0, off1),
                            "close_ms": close_ms})
        os.killpg(jp.pid, 15)
        jp.wait()
        samples = []
        for line in open(rec):
            t, us = line.split()[:2]
            samples.append((float(t), float(us)))
        pairs = []
        for w in windows:
            on, n_on = windows_median(samples, *w["on"])
            off, n_off = windows_median(samples, *w["off"])
            if on and off:
                pairs.append({**w, "on_us": on, "off_us": off, "ratio": on / off, "n_on": n_on, "n_off": n_off})
        reports = [json.load(open(f"{a.out}/attach-{size}-{i}.json")) for i in range(a.pairs)
                   if os.path.exists(f"{a.out}/attach-{size}-{i}.json")]
        on_off = [p["ratio"] for p in pairs if not p["control"]]
        off_off = [p["ratio"] for p in pairs if p["control"]]
        out[size] = {
            "pairs": pairs,
            "median_on_off": st.median(on_off) if on_off else None,
            "median_off_off": st.median(off_off) if off_off else None,
            "drops": sum(r["loss"]["ringbuf_drops"] for r in reports),
            "verdicts": sorted({v["transport"] for r in reports for v in r.get("verdicts", [])}),
            "attach_ms": [r["workloads"][0]["attach"]["latency_ms"] for r in reports],
            "sampled": [sampled(r) for r in reports],
            "copies": [copies_of(r) for r in reports],
            "paths": sorted({(p["op"], p["transport"], p["host_staged"]) for r in reports for p in r.get("paths", [])}),
            "traps_per_s": [traps_per_s(r) for r in reports],
            "close_ms": [p["close_ms"] for p in pairs if p["close_ms"] is not None],
        }
        o = out[size]
        print(f"attach {size}: on/off median {o['median_on_off']}, off/off median {o['median_off_off']}, "
              f"drops {o['drops']}, verdicts {o['verdicts']}, attach ms {[round(x) for x in o['attach_ms']]}, "
              f"close ms {[round(x) for x in o['close_ms']]}, sampled share "
              f"{[round(s[2], 3) for s in o['sampled']]}, copies {o['copies'][:3]}, "
              f"traps/s {[round(x) for x in o['traps_per_s']]}, paths {o['paths']}", flush=True)
    res["attach"] = out


def summarize(res):
    """The figures docs/perf.md quotes, one line each."""
    for tag in ("run", "trap"):
        if tag in res:
            r = res[tag]
            print(f"{tag} ({res['job']}): {len(r['rounds'])} rounds; median per-round ratio 8K latency "
                  f"{r['median_lat8k_ratio']:.4f}, 256M busbw {r['median_bw256m_ratio']:.4f}; drops {r['drops']}; "
                  f"ns per trap {r.get('median_ns_per_trap')}; max traps/s {r.get('max_traps_per_s')}; most traps in "
                  f"a second after the first over budget {r.get('max_traps_1s_after_budget')} (besides at most "
                  f"{r.get('max_off_phase_traps_per_s')}/s uncounted in off phases); count errors "
                  f"{r.get('count_errors')}")
    if "modes" in res:
        m = res["modes"]
        print(f"modes ({res['job']}, {len(m['rounds'])} rounds): "
              + ", ".join(f"{k} median {v['median']:.4f} ({v['min']:.4f}-{v['max']:.4f})" for k, v in m["median_ratio"].items())
              + (f"; off/off median {m['off_off']['median']:.4f} ({m['off_off']['min']:.4f}-{m['off_off']['max']:.4f})"
                 if m["off_off"] else ""))
    for size, o in res.get("attach", {}).items():
        print(f"attach {size}: median on/off {o['median_on_off']}, off/off {o['median_off_off']}, drops {o['drops']}")


def bench(a):
    os.makedirs(a.out, exist_ok=True)
    res = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "ngpu": a.ngpu, "job": a.job,
           "window_s": a.window, "block": BLOCK, "collectives": a.collectives or "auto (default)"}
    parts = a.parts.split(",")
    for part in parts:
        {"run": run_part, "attach": attach_part, "trap": trap_part, "modes": modes_part}[part](a, res)
        # What is known so far survives a later part's failure or timeout.
        json.dump(res, open(f"{a.out}/overhead.json", "w"), indent=1)
    json.dump(res, open(f"{a.out}/overhead.json", "w"), indent=1)
    summarize(res)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job")
    j.add_argument("--ngpu", type=int, default=0, help="ranks, one per GPU (0: every GPU)")
    j.add_argument("--sizes", default="8K")
    j.add_argument("--seconds", type=float, default=2.0)
    j.add_argument("--port", type=int, default=29700)
    j.add_argument("--summary")
    j.add_argument("--records")
    j.add_argument("--ready")
    j.add_argument("--job", choices=["allreduce", "copies", "gds"], default="allreduce")
    b = sub.add_parser("bench")
    b.add_argument("--gdrtrace", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--ngpu", type=int, default=0)
    b.add_argument("--rounds", type=int, default=10)
    b.add_argument("--pairs", type=int, default=12)
    b.add_argument("--control", type=int, default=6)
    b.add_argument("--window", type=float, default=1.5)
    b.add_argument("--parts", default="attach,run")
    b.add_argument("--collectives", help="the tracer's --collectives mode (default: its own, auto)")
    b.add_argument("--job", choices=["allreduce", "copies", "gds"], default="allreduce")
    b.add_argument("--trap-rounds", type=int, default=2)
    b.add_argument("--modes", default="off,auto,exact,250ms/4s,off",
                   help="part modes: each round's jobs, `off` untraced, the rest --collectives modes")
    b.add_argument("--sizes", default="8K,256M", help="the all-reduce job's sizes in run rounds")
    a = ap.parse_args()
    if not a.ngpu:
        a.ngpu = int(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU "))
    if a.cmd == "job":
        job(a)
    else:
        bench(a)
