/*
 * STAND-IN for libcuda, for gdrtrace's integration tests only (no GPU, no
 * NVIDIA driver needed). It is NOT libcuda: it exports a few driver API
 * entry points under libcuda's exported names, including the suffixed
 * variants the real library exports for one API function
 * (`cuMemcpyHtoD`, `cuMemcpyHtoD_v2`, `cuMemcpyHtoD_v2_ptds`, ...), with
 * the CUDA 13 `cuda.h` prototypes. Built as `libcuda.so.1` so the tracer
 * recognises it by file name.
 *
 * "Device memory" is ordinary host memory; the returned CUdeviceptr values
 * are real addresses, so copies are carried out.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;

#define API __attribute__((noinline, used, visibility("default")))

/* CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize); */
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	void *p = malloc(bytesize ? bytesize : 1);

	if (!p)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return 0;
}

/* CUresult cuMemFree_v2(CUdeviceptr dptr); */
API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	free((void *)(uintptr_t)dptr);
	return 0;
}

static CUresult copy(CUdeviceptr dst, const void *src, size_t n)
{
	memmove((void *)(uintptr_t)dst, src, n);
	return 0;
}

/* CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n): the
 * unsuffixed legacy name, still exported by libcuda. */
API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(dst, src, n);
}

/* CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n); */
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(dst, src, n) + (int)(n == (size_t)-1);
}

/* Per-thread default stream variant of the same function. */
API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(dst, src, n) + (int)(n == (size_t)-2);
}

/* CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
 * A different table row: must not be attached as a variant of cuMemcpyHtoD. */
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	(void)s;
	return copy(dst, src, n) + (int)(n == (size_t)-3);
}

API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	(void)s;
	return copy(dst, src, n) + (int)(n == (size_t)-4);
}

/* CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
 * The copy back of `gdrtrace drive copy-loop` (`bench copies`). */
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	memmove(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

/* Not a variant suffix the tracer knows: must not be attached. */
API CUresult cuMemcpyHtoD_v2_unknownsuffix(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(dst, src, n) + (int)(n == (size_t)-5);
}

/* CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags):
 * pinning is a no-op here; the libcufile stand-in registers its bounce
 * buffer with it, as libcufile's compat mode does. */
API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	(void)flags;
	return p && bytesize ? 0 : 1; /* CUDA_ERROR_INVALID_VALUE */
}

/* CUresult cuMemHostUnregister(void *p); */
API CUresult cuMemHostUnregister(void *p)
{
	return p ? 0 : 1;
}

typedef void *CUcontext;

/* CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev): one
 * primary context per device, the same one at every call (UCX's cuda_copy
 * transport retains it around each copy). */
API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, int dev)
{
	static char primary[8];

	if (dev < 0 || dev >= 8)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*pctx = &primary[dev];
	return 0;
}

/* CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s):
 * unified addressing, either side host or "device". */
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return copy(dst, (const void *)(uintptr_t)src, n);
}
