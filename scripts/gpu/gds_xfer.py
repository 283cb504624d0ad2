"""A cuFile (GPUDirect Storage) workload that the project did not build into
gdrtrace: writes a GPU buffer to a file with cuFileWrite and reads it back
with cuFileRead, ITERATIONS times, then checks the bytes, through libcufile
by ctypes (the `cufile` mode) or through torch's `torch.cuda.gds.GdsFile`
(the `torch` mode). Prints one JSON line: bytes written and read, seconds,
GB/s, whether the data came back intact.

    python3 gds_xfer.py --file PATH [--mode cufile|torch] [--size 64M]
                        [--iterations 8] [--no-odirect] [--register]
                        [--start-after SECONDS]

With --start-after, the file is opened (cuFile's set-up done) and
"gds_xfer: ready" printed, then the I/O waits that long: a tracer attached
after that line sees every byte moved and none of the set-up.

cuFile writes its log to cufile.log in the working directory. Without
nvidia-fs it runs in compat mode (POSIX I/O through host bounce buffers).
"""
import argparse
import ctypes
import json
import os
import sys
import time


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def libcufile():
    """libcufile: torch's copy first (what torch.cuda.gds loads), then CUDA's."""
    import torch  # noqa: F401  (loads the CUDA runtime torch ships)

    names = []
    try:
        import nvidia.cu13 as cu

        names.append(os.path.join(list(cu.__path__)[0], "lib", "libcufile.so.0"))
    except Exception:
        pass
    names += ["libcufile.so.0", "/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0"]
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError:
            continue
    raise SystemExit("gds_xfer: libcufile not found")


class Error(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]


class Descr(ctypes.Structure):
    # CUfileDescr_t: type, union { int fd; void *handle; }, const CUfileFSOps_t *fs_ops
    _fields_ = [("type", ctypes.c_int), ("handle", ctypes.c_void_p), ("fs_ops", ctypes.c_void_p)]


def run_cufile(a, buf, size):
    lib, path = libcufile()
    lib.cuFileDriverOpen.restype = Error
    lib.cuFileHandleRegister.restype = Error
    lib.cuFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
    lib.cuFileBufRegister.restype = Error
    lib.cuFileBufRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.cuFileBufDeregister.restype = Error
    lib.cuFileBufDeregister.argtypes = [ctypes.c_void_p]
    for f in (lib.cuFileRead, lib.cuFileWrite):
        f.restype = ctypes.c_ssize_t
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.c_long]
    e = lib.cuFileDriverOpen()
    if e.err != 0:
        raise SystemExit(f"gds_xfer: cuFileDriverOpen: {e.err} (cu {e.cu_err})")
    flags = os.O_RDWR | os.O_CREAT | (0 if a.no_odirect else os.O_DIRECT)
    fd = os.open(a.file, flags, 0o644)
    d = Descr(type=1, handle=fd, fs_ops=None)  # CU_FILE_HANDLE_TYPE_OPAQUE_FD
    fh = ctypes.c_void_p()
    e = lib.cuFileHandleRegister(ctypes.byref(fh), ctypes.byref(d))
    if e.err != 0:
        raise SystemExit(f"gds_xfer: cuFileHandleRegister: {e.err} (cu {e.cu_err})")
    ptr = buf.data_ptr()
    if a.register:
        e = lib.cuFileBufRegister(ptr, size, 0)
        if e.err != 0:
            raise SystemExit(f"gds_xfer: cuFileBufRegister: {e.err}")
    ready(a)
    wrote = read = 0
    t0 = time.time()
    for i in range(a.iterations):
        n = lib.cuFileWrite(fh, ptr, size, 0, 0)
        if n != size:
            raise SystemExit(f"gds_xfer: cuFileWrite returned {n}")
        wrote += n
    t1 = time.time()
    buf.zero_()
    import torch

    torch.cuda.synchronize()
    for i in range(a.iterations):
        n = lib.cuFileRead(fh, ptr, size, 0, 0)
        if n != size:
            raise SystemExit(f"gds_xfer: cuFileRead returned {n}")
        read += n
    t2 = time.time()
    if a.register:
        lib.cuFileBufDeregister(ptr)
    lib.cuFileHandleDeregister(fh)
    os.close(fd)
    return wrote, read, t1 - t0, t2 - t1, path


def ready(a):
    """Set-up is done: say so, and wait --start-after seconds."""
    if a.start_after:
        print("gds_xfer: ready", flush=True)
        time.sleep(a.start_after)


def run_torch(a, buf, size):
    import torch

    f = torch.cuda.gds.GdsFile(a.file, os.O_CREAT | os.O_RDWR | (0 if a.no_odirect else os.O_DIRECT))
    if a.register:
        torch.cuda.gds.gds_register_buffer(buf)
    ready(a)
    wrote = read = 0
    t0 = time.time()
    for i in range(a.iterations):
        f.save_storage(buf.untyped_storage(), 0)
        wrote += size
    t1 = time.time()
    buf.zero_()
    torch.cuda.synchronize()
    for i in range(a.iterations):
        f.load_storage(buf.untyped_storage(), 0)
        read += size
    t2 = time.time()
    if a.register:
        torch.cuda.gds.gds_deregister_buffer(buf)
    del f
    return wrote, read, t1 - t0, t2 - t1, "torch.cuda.gds"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", required=True)
    p.add_argument("--mode", choices=["cufile", "torch"], default="cufile")
    p.add_argument("--size", type=parse_size, default=64 << 20)
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--no-odirect", action="store_true")
    p.add_argument("--register", action="store_true")
    p.add_argument("--start-after", type=float, default=0.0)
    a = p.parse_args()
    import torch

    size = a.size
    pattern = torch.arange(size, dtype=torch.int64, device="cuda").remainder(251).to(torch.uint8)
    buf = pattern.clone()
    torch.cuda.synchronize()
    wrote, read, tw, tr, lib = (run_torch if a.mode == "torch" else run_cufile)(a, buf, size)
    torch.cuda.synchronize()
    ok = bool(torch.equal(buf, pattern))
    print(json.dumps({"mode": a.mode, "lib": lib, "pid": os.getpid(), "size": size, "iterations": a.iterations,
                      "odirect": not a.no_odirect, "registered": a.register, "bytes_written": wrote,
                      "bytes_read": read, "write_s": tw, "read_s": tr,
                      "write_gb_s": wrote / tw / 1e9 if tw else 0, "read_gb_s": read / tr / 1e9 if tr else 0,
                      "verified": ok}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
