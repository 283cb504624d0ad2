"""An independent torch.distributed job (not `gdrtrace drive nccl`): one
process per GPU started by torch.multiprocessing.spawn under a launcher,
all-reducing a float32 buffer until --seconds pass. The transport mode comes
from the caller's environment (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE), as users
set it. Rank 0 prints "ready launcher=PID" once the communicator exists and
one all-reduce completed (the set-up is over).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, nranks, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=nranks)
    size = args.kib * 1024 if args.kib else args.mib * (1 << 20)
    x = torch.ones(size // 4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
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
    a = ap.parse_args()
    mp.spawn(rank_main, args=(a.ngpu, a), nprocs=a.ngpu)
