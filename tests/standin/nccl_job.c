/*
 * A two-rank "job" over the libnccl STAND-IN, for gdrtrace's attach tests:
 * shaped like a torch.multiprocessing job (a launcher process and one
 * process per rank, its children), so attach sees what it sees of a real
 * one, minus the GPUs.
 *
 *   nccl_job LIBNCCL SECONDS [KIB]
 *
 * The launcher makes a socket pair and forks two ranks. Each rank dlopens
 * LIBNCCL, creates its communicator (ncclCommInitRank), prints
 * "rank R ready pid=P", then calls ncclAllReduce on KIB KiB (default 1024)
 * until SECONDS have passed (after NCCL_JOB_WARMUP_MS milliseconds, if set),
 * and prints "rank R calls=N". The transport
 * comes from the environment, as for NCCL: NCCL_P2P_DISABLE=1 and
 * NCCL_SHM_DISABLE=1 move the bytes over the socket pair. With
 * NCCL_DEBUG=INFO the stand-in prints NCCL's INFO lines on stdout.
 *
 * The ranks pass one 128-byte ncclUniqueId by value, made by the launcher
 * as NCCL's is (an 8-byte random magic, then the root's socket address,
 * zeros after it): from NCCL_JOB_ID_SEED when set, so that two jobs share
 * one id. NCCL_JOB_RANK=R starts rank R alone (of 2): one "node" of a job
 * whose other rank runs elsewhere; it copies through the host (no peer).
 * NCCL_JOB_INIT_DELAY_MS delays ncclCommInitRank after the library loads.
 * NCCL_JOB_SLOT_MS=S: each rank also prints "rank R slots=N,N,..." after
 * its count, its calls in each S ms of its loop (the last slot partial),
 * so a test can tell how steady the job's own rate was.
 * NCCL_JOB_BOOTSTRAP=PORT joins two such ranks over TCP on 127.0.0.1:PORT
 * before init, as NCCL's bootstrap does (rank 0 listens, rank 1 connects):
 * the connection stays open for the job's life and carries its peer's
 * data (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: two "nodes" over TCP); the
 * first rank done ends the other one's loop. The ranks tell each other
 * their pids over it ($STANDIN_NCCL_PEER_PID, which the stand-in's RAS
 * service lists, as NCCL's RAS knows every rank's pid).
 * SIGUSR1 to the launcher ends the job early, as if its SECONDS were up
 * (a test that has seen what it needs spares the CPU the rest would take).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef int (*init_fn)(void **comm, int nranks, ncclUniqueId id, int rank);
typedef int (*allreduce_fn)(const void *s, void *r, size_t count, int dt, int op, void *comm, void *stream);
typedef int (*destroy_fn)(void *comm);

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The call index both ranks stop at (shared by the launcher's mapping):
 * rank 0 sets it when time is up, one past the call it is about to make;
 * its peer, at most in that same call (each call needs both), stops there
 * too, so neither is left waiting on the other. */
static long *stop_at;

/* Set by SIGUSR1 in the launcher (the same mapping, after stop_at). */
static long *ended_early;

static void end_early(int sig)
{
	(void)sig;
	__atomic_store_n(ended_early, 1, __ATOMIC_SEQ_CST);
}

/* The id both ranks pass (made before the fork), and whether one rank runs alone. */
static ncclUniqueId job_id;
static int solo;

static void make_id(void)
{
	const char *seed = getenv("NCCL_JOB_ID_SEED");
	unsigned long long magic = seed ? strtoull(seed, NULL, 0) : ((unsigned long long)getpid() << 32) ^ (unsigned long long)time(NULL);

	memset(&job_id, 0, sizeof job_id);
	memcpy(job_id.internal, &magic, sizeof magic);
	/* Stands for a sockaddr_in6 of the root (28 bytes). */
	for (int i = 8; i < 36; i++)
		job_id.internal[i] = (char)((magic >> (8 * (i % 8))) ^ (unsigned)(i * 37));
}

/* The bootstrap connection: each rank's pid to the other. */
static int swap_pids(int fd)
{
	int mine = (int)getpid(), peer = 0;
	char s[16];

	if (write(fd, &mine, sizeof mine) != sizeof mine || recv(fd, &peer, sizeof peer, MSG_WAITALL) != sizeof peer)
		return -1;
	snprintf(s, sizeof s, "%d", peer);
	setenv("STANDIN_NCCL_PEER_PID", s, 1);
	return 0;
}

/* NCCL_JOB_BOOTSTRAP: the TCP connection between two solo ranks, or -1. */
static int bootstrap(int rank)
{
	const char *port = getenv("NCCL_JOB_BOOTSTRAP");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd;

	if (!port)
		return -1;
	a.sin_port = htons((unsigned short)atoi(port));
	if (rank == 0) {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
		    bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) {
			perror("bootstrap listen");
			return -2;
		}
		fd = accept(l, NULL, NULL);
		close(l);
		return fd < 0 || swap_pids(fd) ? -2 : fd;
	}
	/* The peer may not listen yet: retry for up to a minute. */
	for (int i = 0; i < 600; i++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			return swap_pids(fd) ? -2 : fd;
		if (fd >= 0)
			close(fd);
		usleep(100 * 1000);
	}
	perror("bootstrap connect");
	return -2;
}

static int rank_main(const char *lib, int rank, int fd, double secs, size_t count)
{
	char fdstr[16];
	void *h, *comm = NULL;
	ncclUniqueId id = job_id;
	long calls = 0;

	int tcp = solo ? bootstrap(rank) : -1;

	if (tcp == -2)
		return 1;
	if (tcp >= 0)
		fd = tcp;
	snprintf(fdstr, sizeof fdstr, "%d", fd);
	setenv("STANDIN_NCCL_PEER_FD", fdstr, 1);
	h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	init_fn init = (init_fn)dlsym(h, "ncclCommInitRank");
	allreduce_fn allreduce = (allreduce_fn)dlsym(h, "ncclAllReduce");
	destroy_fn destroy = (destroy_fn)dlsym(h, "ncclCommDestroy");
	if (!init || !allreduce || !destroy)
		return 1;
	/* NCCL_JOB_INIT_DELAY_MS: wait between loading the library and the
	 * init call, so a tracer that attaches the library on its next look at
	 * the maps sees ncclCommInitRank. */
	const char *delay = getenv("NCCL_JOB_INIT_DELAY_MS");
	if (delay)
		usleep(atoi(delay) * 1000);
	/* NCCL_JOB_NRANKS: the rank count passed to init (1 with NCCL_JOB_RANK=0:
	 * a one-rank communicator). */
	const char *nr = getenv("NCCL_JOB_NRANKS");
	if (init(&comm, nr ? atoi(nr) : 2, id, rank))
		return 1;
	float *s = calloc(count, sizeof(float)), *r = calloc(count, sizeof(float));
	if (!s || !r)
		return 1;
	printf("rank %d ready pid=%d\n", rank, (int)getpid());
	fflush(stdout);
	/* NCCL_JOB_WARMUP_MS: wait before the first call (a traced run's tracer
	 * attaches the library on its next look at the maps). */
	const char *warm = getenv("NCCL_JOB_WARMUP_MS");
	if (warm)
		usleep(atoi(warm) * 1000);
	const char *slot_env = getenv("NCCL_JOB_SLOT_MS");
	double slot = slot_env ? atoi(slot_env) / 1000.0 : 0;
	enum { SLOTS = 4096 };
	static long slots[SLOTS];
	long used = 0;
	double begin = now_s(), end = begin + secs;
	for (;; calls++) {
		long at = __atomic_load_n(stop_at, __ATOMIC_SEQ_CST);
		if (at >= 0 && calls >= at)
			break;
		if ((rank == 0 || solo) && at < 0 && (now_s() >= end || __atomic_load_n(ended_early, __ATOMIC_SEQ_CST)))
			__atomic_store_n(stop_at, calls + 1, __ATOMIC_SEQ_CST);
		if (allreduce(s, r, count, 7, 0, comm, NULL)) {
			/* Over TCP, the peer that finished first closed it. */
			if (tcp >= 0 && calls > 0)
				break;
			return 1;
		}
		if (slot > 0) {
			long i = (long)((now_s() - begin) / slot);
			if (i >= 0 && i < SLOTS) {
				slots[i]++;
				if (i + 1 > used)
					used = i + 1;
			}
		}
	}
	destroy(comm);
	printf("rank %d calls=%ld\n", rank, calls);
	if (slot > 0) {
		printf("rank %d slots=", rank);
		for (long i = 0; i < used; i++)
			printf(i ? ",%ld" : "%ld", slots[i]);
		printf("\n");
	}
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	int sv[2], status, bad = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: nccl_job LIBNCCL SECONDS [KIB]\n");
		return 2;
	}
	double secs = atof(argv[2]);
	size_t count = (argc > 3 ? (size_t)atol(argv[3]) : 1024) * 1024 / sizeof(float);
	stop_at = mmap(NULL, 2 * sizeof *stop_at, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (stop_at == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	*stop_at = -1;
	ended_early = stop_at + 1;
	*ended_early = 0;
	signal(SIGUSR1, end_early);
	make_id();
	const char *only = getenv("NCCL_JOB_RANK");
	solo = only != NULL;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("socketpair");
		return 1;
	}
	int started = 0;
	for (int rank = 0; rank < 2; rank++) {
		if (solo && rank != atoi(only))
			continue;
		started++;
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			return 1;
		}
		if (p == 0) {
			close(sv[1 - rank]);
			_exit(rank_main(argv[1], rank, sv[rank], secs, count));
		}
	}
	close(sv[0]);
	close(sv[1]);
	for (int i = 0; i < started; i++) {
		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bad = 1;
	}
	return bad;
}
