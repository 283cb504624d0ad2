/*
 * Test driver for gdrtrace's copy-row tests: the staging copies of
 * cuda_copy_shim.c without UCX. Opens the libcuda STAND-IN, takes a 32 MiB
 * "device" buffer, prints "ready pid=N" and blocks until a byte arrives on
 * stdin; then for SECONDS seconds retains the primary context and copies
 * the next 8176-byte fragment of the buffer to a bounce buffer
 * (cuMemcpyAsync), walking the first PAIRS fragments in turn (at most and
 * by default 4104, the whole buffer), and prints "copies=N".
 *
 * usage: copy_walk LIBCUDA SECONDS [PAIRS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define DEVICE_BYTES (32u << 20)
#define FRAGMENT 8176u
#define FRAGMENTS (DEVICE_BYTES / FRAGMENT)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static char bounce[FRAGMENT];
	CUresult (*retain)(void **, int);
	CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, void *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	unsigned long long copies = 0, pairs = FRAGMENTS;
	CUdeviceptr device;
	double until;
	void *h, *ctx;
	char go;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: copy_walk LIBCUDA SECONDS [PAIRS]\n");
		return 2;
	}
	if (argc == 4)
		pairs = strtoull(argv[3], NULL, 10);
	if (pairs == 0 || pairs > FRAGMENTS)
		pairs = FRAGMENTS;
	h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "copy_walk: %s\n", dlerror());
		return 2;
	}
	retain = (CUresult(*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	copy = (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, void *))dlsym(h, "cuMemcpyAsync");
	alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
	if (!retain || !copy || !alloc || alloc(&device, DEVICE_BYTES)) {
		fprintf(stderr, "copy_walk: %s lacks the driver calls it needs\n", argv[1]);
		return 2;
	}
	printf("ready pid=%d\n", getpid());
	fflush(stdout);
	if (read(0, &go, 1) != 1)
		return 2;
	until = now() + atof(argv[2]);
	while (now() < until) {
		CUdeviceptr at = device + (CUdeviceptr)(copies % pairs) * FRAGMENT;

		retain(&ctx, 0);
		if (copy((uintptr_t)bounce, at, FRAGMENT, 0))
			return 1;
		copies++;
	}
	printf("copies=%llu\n", copies);
	return 0;
}
