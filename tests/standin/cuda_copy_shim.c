/*
 * STAND-IN for UCX's cuda_copy staging, for gdrtrace's integration tests
 * only (no GPU here): preloaded (LD_PRELOAD) into a UCX process whose data
 * moves over tcp (Debian's ucx_perftest), it makes the driver calls a UCX
 * built with CUDA makes per fragment when GPU memory goes over tcp
 * (a NIXL READ with the UCX backend on one GPU): cuDevicePrimaryCtxRetain
 * and one cuMemcpyAsync, through the libcuda stand-in
 * ($GDRTRACE_STANDIN_CUDA, standin_cuda.c). It is NOT UCX: UCX's own bytes
 * still move from and to host memory; the copies go between a 32 MiB
 * "device" buffer (cuMemAlloc of the stand-in) and the fragment.
 *
 * Each data send first copies the next fragment of the device buffer to a
 * bounce buffer (device to host); each data receive copies what arrived to
 * the next fragment (host to device). Fragments are 8176 bytes apart, as
 * UCX's tcp segments (8 KiB less its header) are, and walk the buffer in
 * turn: 4104 device addresses per process, as a 32 MiB READ has.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;

#define DEVICE_BYTES (32u << 20)
#define FRAGMENT 8176u
#define FRAGMENTS (DEVICE_BYTES / FRAGMENT)
/* Smaller sends and receives are UCX's own control messages. */
#define DATA_BYTES 1024

static CUresult (*retain)(CUcontext *, int);
static CUresult (*copy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static CUdeviceptr device;
static char bounce[FRAGMENT];
static unsigned next;

__attribute__((constructor)) static void load(void)
{
	const char *lib = getenv("GDRTRACE_STANDIN_CUDA");
	CUresult (*alloc)(CUdeviceptr *, size_t);
	void *h;

	real_send = (ssize_t(*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
	real_recv = (ssize_t(*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
	if (!lib)
		return;
	h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "cuda_copy_shim: %s\n", dlerror());
		exit(2);
	}
	retain = (CUresult(*)(CUcontext *, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	copy_async = (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))dlsym(h, "cuMemcpyAsync");
	alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
	if (!retain || !copy_async || !alloc || alloc(&device, DEVICE_BYTES)) {
		fprintf(stderr, "cuda_copy_shim: %s lacks the driver calls it needs\n", lib);
		exit(2);
	}
}

/* One fragment between the device buffer and host memory at `host`. */
static void stage(uintptr_t host, size_t n, int to_device)
{
	CUdeviceptr at;
	CUcontext ctx;

	if (!device || n < DATA_BYTES)
		return;
	at = device + (CUdeviceptr)(next++ % FRAGMENTS) * FRAGMENT;
	if (n > FRAGMENT)
		n = FRAGMENT;
	retain(&ctx, 0);
	if (to_device)
		copy_async(at, host, n, 0);
	else
		copy_async((uintptr_t)bounce, at, n, 0);
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	stage((uintptr_t)buf, len, 0);
	return real_send(fd, buf, len, flags);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	ssize_t r = real_recv(fd, buf, len, flags);

	if (r > 0)
		stage((uintptr_t)buf, (size_t)r, 1);
	return r;
}
