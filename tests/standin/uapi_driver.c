/*
 * Test driver for gdrtrace's library-probe tests: loads the libibverbs
 * STAND-IN (and optionally the libcuda stand-in) with dlopen and calls it the
 * way an application would, printing what the stand-in returned so the test
 * can compare it with what the tracer captured.
 *
 * usage: uapi_driver [--late] [--ns DIR] [--cuda LIBCUDA] LIBIBVERBS K D
 *
 *   Prints "ready pid=N" once the libraries are loaded (with --late: before
 *   loading them) and blocks until a byte arrives on stdin. Then:
 *   --late    dlopens the library only now, and waits (bounded) until the
 *             uprobes of the tracer are visible in its own text (int3) before
 *             calling anything;
 *   --ns DIR  first enters a new mount namespace, mounts a tmpfs on DIR
 *             (private to that namespace), copies LIBIBVERBS into it and
 *             dlopens that copy: its path exists only in this namespace.
 *   For each of IBVERBS_1.0 and IBVERBS_1.1 (dlvsym): K ibv_reg_mr calls on
 *   buf + i*4096 with length (i+1)*4096, then ibv_dereg_mr on the first D.
 *   Lines: "mr ver=V ptr=P addr=A len=L lkey=X rkey=Y" and "dereg ptr=P ret=R".
 *   With --cuda: cuMemAlloc_v2 of 1 MiB, cuMemcpyHtoD_v2 of 4096 bytes and
 *   cuMemcpyHtoD_v2_ptds of 8192 bytes from pageable host memory
 *   ("cuda dptr=P").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef void *(*reg_mr_fn)(void *pd, void *addr, size_t length, int access);
typedef int (*dereg_mr_fn)(void *mr);
typedef int (*cu_alloc_fn)(unsigned long long *dptr, size_t n);
typedef int (*cu_copy_fn)(unsigned long long dst, const void *src, size_t n);

struct mr { /* struct ibv_mr */
	void *context, *pd, *addr;
	size_t length;
	uint32_t handle, lkey, rkey;
};

static void die(const char *what)
{
	fprintf(stdout, "error: %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(2);
}

static void *must_dlvsym(void *h, const char *sym, const char *ver)
{
	void *f = dlvsym(h, sym, ver);

	if (!f) {
		fprintf(stdout, "error: dlvsym %s@%s: %s\n", sym, ver, dlerror());
		fflush(stdout);
		exit(2);
	}
	return f;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Whether a uprobe breakpoint is installed at f (x86: int3; arm64: BRK). */
static int probed(const void *f)
{
#if defined(__x86_64__) || defined(__i386__)
	return *(const volatile unsigned char *)f == 0xcc;
#elif defined(__aarch64__)
	return (*(const volatile uint32_t *)f & 0xffe0001f) == 0xd4200000;
#else
	(void)f;
	return 1;
#endif
}

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY), out;

	if (in < 0)
		die(from);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (out < 0)
		die(to);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			die("write");
	if (n < 0)
		die("read");
	close(in);
	close(out);
}

static void *load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stdout, "error: dlopen %s: %s\n", path, dlerror());
		fflush(stdout);
		exit(2);
	}
	return h;
}

int main(int argc, char **argv)
{
	const char *ns_dir = NULL, *cuda = NULL, *lib;
	char ns_path[4096];
	int late = 0, i, k, d;
	void *h = NULL, *hc = NULL;
	char go;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--late"))
			late = 1;
		else if (!strcmp(argv[i], "--ns") && i + 1 < argc)
			ns_dir = argv[++i];
		else if (!strcmp(argv[i], "--cuda") && i + 1 < argc)
			cuda = argv[++i];
		else
			break;
	}
	if (argc - i != 3) {
		fprintf(stderr, "usage: %s [--late] [--ns DIR] [--cuda LIBCUDA] LIBIBVERBS K D\n", argv[0]);
		return 2;
	}
	lib = argv[i];
	k = atoi(argv[i + 1]);
	d = atoi(argv[i + 2]);

	if (ns_dir) {
		if (unshare(CLONE_NEWNS))
			die("unshare(CLONE_NEWNS)");
		if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL))
			die("making mounts private");
		if (mount("gdrtrace-test", ns_dir, "tmpfs", 0, "size=16m,mode=0755"))
			die("mounting a tmpfs");
		snprintf(ns_path, sizeof(ns_path), "%s/libibverbs.so.1", ns_dir);
		copy_file(lib, ns_path);
		lib = ns_path;
	}
	if (!late) {
		h = load(lib);
		if (cuda)
			hc = load(cuda);
	}
	/* Line-buffered from here: a reader sees each call's line as it is
	 * made (the SIGKILL test reads the progress at the kill). */
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready pid=%d lib=%s\n", (int)getpid(), lib);
	fflush(stdout);
	if (read(0, &go, 1) != 1)
		return 3;

	if (late) {
		double t0 = now_s(), waited;
		const char *fns[][2] = {
			{"ibv_reg_mr", "IBVERBS_1.0"}, {"ibv_reg_mr", "IBVERBS_1.1"},
			{"ibv_reg_mr_iova2", "IBVERBS_1.8"}, {"ibv_dereg_mr", "IBVERBS_1.0"},
			{"ibv_dereg_mr", "IBVERBS_1.1"}, {"ibv_modify_qp", "IBVERBS_1.1"},
		};
		size_t j, ready = 0;

		h = load(lib);
		printf("dlopened\n");
		fflush(stdout);
		/* The tracer rescans every 250 ms; wait for its probes (10 s bound). */
		while (ready < sizeof(fns) / sizeof(fns[0]) && now_s() - t0 < 10.0) {
			for (ready = 0, j = 0; j < sizeof(fns) / sizeof(fns[0]); j++)
				ready += probed(must_dlvsym(h, fns[j][0], fns[j][1]));
			if (ready < sizeof(fns) / sizeof(fns[0]))
				usleep(5000);
		}
		waited = now_s() - t0;
		/* The attach loop attaches a whole file in one go; entry and return
		 * probes of the last function may be microseconds apart. */
		usleep(100000);
		printf("probes %s after %.3f s\n", ready == sizeof(fns) / sizeof(fns[0]) ? "seen" : "NOT seen",
		       waited);
		fflush(stdout);
	}

	{
		const char *versions[2] = {"IBVERBS_1.0", "IBVERBS_1.1"};
		size_t page = 4096;
		char *buf = aligned_alloc(page, page * (size_t)(k + 1));
		void **mrs = calloc((size_t)k * 2, sizeof(void *));
		int v;

		if (!buf || !mrs)
			die("allocating");
		for (v = 0; v < 2; v++) {
			reg_mr_fn reg = (reg_mr_fn)must_dlvsym(h, "ibv_reg_mr", versions[v]);
			dereg_mr_fn dereg = (dereg_mr_fn)must_dlvsym(h, "ibv_dereg_mr", versions[v]);

			for (i = 0; i < k; i++) {
				struct mr *m = reg((void *)0x5d00, buf + (size_t)i * page, (size_t)(i + 1) * page, 7);

				if (!m)
					die("ibv_reg_mr");
				mrs[v * k + i] = m;
				printf("mr ver=%s ptr=%#lx addr=%#lx len=%zu lkey=%u rkey=%u\n", versions[v],
				       (unsigned long)(uintptr_t)m, (unsigned long)(uintptr_t)m->addr, m->length, m->lkey,
				       m->rkey);
			}
			for (i = 0; i < d && i < k; i++) {
				void *m = mrs[v * k + i];

				printf("dereg ptr=%#lx ret=%d\n", (unsigned long)(uintptr_t)m, dereg(m));
			}
		}
	}
	if (hc) {
		cu_alloc_fn alloc = (cu_alloc_fn)dlsym(hc, "cuMemAlloc_v2");
		cu_copy_fn htod = (cu_copy_fn)dlsym(hc, "cuMemcpyHtoD_v2");
		cu_copy_fn htod_ptds = (cu_copy_fn)dlsym(hc, "cuMemcpyHtoD_v2_ptds");
		unsigned long long dptr = 0;
		static char host[8192];

		if (!alloc || !htod || !htod_ptds)
			die("dlsym libcuda stand-in");
		if (alloc(&dptr, 1 << 20) || htod(dptr, host, 4096) || htod_ptds(dptr + 4096, host, 8192))
			die("libcuda stand-in call");
		printf("cuda dptr=%#llx\n", dptr);
	}
	printf("done\n");
	fflush(stdout);
	return 0;
}
