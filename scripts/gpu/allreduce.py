"""An independent torch.distributed job (not `gdrtrace drive nccl`): one
process per GPU started by torch.multiprocessing.spawn under a launcher,
all-reducing a float32 buffer until --seconds pass. The transport mode comes
from the caller's environment (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE), as users
set it. Rank 0 prints "ready launcher=PID" once the communicator exists and
one all-reduce completed (the set-up is over).

With --hosts N the ranks are placed on N emulated hosts, as separate
processes the launcher starts (not torch.multiprocessing): rank r gets
NCCL_HOSTID=gdrtrace-emu-<r // (nranks / N)> in its own environment (so it is
in /proc/PID/environ, where tracers read it) and GPU r % --ngpu; NCCL then
connects ranks of different hosts only through its network, as between
nodes. --nccl-log PREFIX sets NCCL_DEBUG=INFO and NCCL_DEBUG_FILE=PREFIX.rankR.log
per rank. --drop P drops P of the packets arriving on each rank's TCP
sockets once the first all-reduce connected them (sockdrop.py: a socket
filter, for machines with no packet filter).
"""
import argparse
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, nranks, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.cuda.set_device(args.device if args.device is not None else rank)
    dist.init_process_group("nccl", rank=rank, world_size=nranks)
    size = args.kib * 1024 if args.kib else args.mib * (1 << 20)
    x = torch.ones(size // 4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if args.drop:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import sockdrop
        n = sockdrop.drop_on_tcp_sockets(args.drop)
        print(f"rank {rank}: dropping {args.drop:.1%} of the packets arriving on its {n} TCP sockets", flush=True)
    if rank == 0:
        print(f"ready launcher={os.getppid()} rank0={os.getpid()}", flush=True)
    end = time.time() + args.seconds
    calls = 0
    # --progress: rank 0's calls so far, every quarter second ("time calls").
    progress = open(args.progress, "w", buffering=1) if rank == 0 and args.progress else None
    next_mark = time.time()
    while time.time() < end:
        dist.all_reduce(x)
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
            if progress and time.time() >= next_mark:
                progress.write(f"{time.time():.6f} {calls}\n")
                next_mark += 0.25
    torch.cuda.synchronize()
    print(f"rank {rank} calls={calls}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ngpu", type=int, default=torch.cuda.device_count())
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--kib", type=int, default=0, help="buffer size in KiB (overrides --mib)")
    ap.add_argument("--progress", help="rank 0 writes 'time calls' lines here every 0.25 s")
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--hosts", type=int, default=1, help="emulated hosts (NCCL_HOSTID per rank); nranks = hosts * ngpu")
    ap.add_argument("--nccl-log", help="per-rank NCCL_DEBUG=INFO log PREFIX.rankR.log")
    ap.add_argument("--drop", type=float, default=0, help="share of the packets arriving on each rank's TCP sockets to drop (sockdrop.py)")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--nranks", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--device", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a.rank, a.nranks, a)
    elif a.hosts > 1:
        nranks = a.hosts * a.ngpu
        per_host = nranks // a.hosts
        ranks = []
        for r in range(nranks):
            env = dict(os.environ, NCCL_HOSTID=f"gdrtrace-emu-{r // per_host}")
            if a.nccl_log:
                env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=f"{a.nccl_log}.rank{r}.log")
            argv = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--nranks", str(nranks),
                    "--device", str(r % a.ngpu), "--seconds", str(a.seconds), "--port", str(a.port)]
            argv += ["--kib", str(a.kib)] if a.kib else ["--mib", str(a.mib)]
            if a.progress:
                argv += ["--progress", a.progress]
            if a.drop:
                argv += ["--drop", str(a.drop)]
            ranks.append(subprocess.Popen(argv, env=env))
        sys.exit(max(p.wait() for p in ranks))
    else:
        mp.spawn(rank_main, args=(a.ngpu, a), nprocs=a.ngpu)
