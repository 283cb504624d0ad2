/*
 * STAND-IN for libnccl, for gdrtrace's tests only (no GPU needed). It is NOT
 * NCCL: it exports ncclGetUniqueId, ncclCommInitRank, ncclAllReduce and
 * ncclCommDestroy under NCCL's names with nccl.h's prototypes (NCCL 2.2x),
 * built as `libnccl.so.2` so the tracer recognises it by file name, and
 * moves each all-reduce's bytes the way the transport its environment
 * selects would move them through the host:
 *   NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1: send(2)/recv(2) of the whole
 *     buffer with the peer rank on the socket in $STANDIN_NCCL_PEER_FD
 *     (NCCL's NET/Socket transport uses these syscalls);
 *   otherwise: copies through a host buffer (standing in for SHM, and for
 *     P2P, which needs GPUs).
 * STANDIN_NCCL_SOCKET_CALLS=N (tests of a verdict that changes while a job
 * runs; NCCL itself keeps a communicator's transport): the socket carries
 * only the first N all-reduces, the host buffer the rest.
 * With NCCL_DEBUG=INFO it prints, on stdout, the INFO lines of NCCL's own
 * log that gdrtrace's log parser reads (`ncclCommInitRank comm ... rank ...`,
 * `Channel 00/0 : 0[0] -> 1[1] via ...`), as NCCL prints them: a stand-in
 * for the NCCL log, naming the transport this stand-in used. The `commId`
 * they print is NCCL's (2.26+) hash of the 128-byte id the caller passed by
 * value, computed with NCCL's own `getHash` (copied below), so a test can
 * check what the tracer read at the call's entry against it.
 * NCCL_RAS_ADDR=HOST:PORT (set explicitly; NCCL's default 28028 is never
 * taken here): from init on, a thread answers clients there as NCCL's RAS
 * service does (src/ras/client_support.cc, protocol 2: `CLIENT PROTOCOL 2`
 * -> `SERVER PROTOCOL 2`, `SET FORMAT json` -> `OK`, `VERBOSE STATUS` ->
 * the status in NCCL 2.28's JSON, then close), listing the communicator's
 * hash, its size and its ranks: this one with getpid(), and the peer with
 * $STANDIN_NCCL_PEER_PID when set (else as a missing rank). If the address
 * is taken (another rank on this host serves it), no thread, as in NCCL.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define API __attribute__((noinline, used, visibility("default")))

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct standin_comm {
	int rank, nranks, fd, socket;
	long calls, socket_calls;
	unsigned long long hash;
} *ncclComm_t;

enum { CHUNK = 64 << 10 };

static int env_on(const char *k)
{
	const char *v = getenv(k);

	return v && *v && strcmp(v, "0") != 0;
}

static void info(ncclComm_t c, const char *msg)
{
	const char *d = getenv("NCCL_DEBUG");

	if (!d || strcmp(d, "INFO") != 0)
		return;
	printf("standin:%d:%d [%d] NCCL INFO %s\n", (int)getpid(), (int)gettid(), c->rank, msg);
	fflush(stdout);
}

/* NCCL's getHash (src/include/bitops.h, NCCL 2.26 to 2.28: eatHash into
 * {1, 1}, then digestHash), as NCCL applies it to the id (`commHash`). */
static uint64_t nccl_get_hash(const void *bytes, size_t size)
{
	uint64_t acc[2] = { 1, 1 };
	const char *ptr = bytes;

	acc[0] ^= size;
	while (size != 0) {
		acc[0] += acc[1];
		acc[1] ^= acc[0];
		acc[0] ^= acc[0] >> 31;
		acc[0] *= 0x9de62bbc8cef3ce3;
		acc[1] ^= acc[1] >> 32;
		acc[1] *= 0x485cd6311b599e79;
		size_t chunk = size < sizeof(uint64_t) ? size : sizeof(uint64_t);
		uint64_t x = 0;
		memcpy(&x, ptr, chunk);
		ptr += chunk;
		size -= chunk;
		acc[0] += x;
	}
	uint64_t h = acc[0];
	h ^= h >> 31;
	h *= 0xbac3bd562846de6b;
	h += acc[1];
	h ^= h >> 32;
	h *= 0x995a187a14e7b445;
	return h;
}

/* The communicator RAS lists (the last one initialised), and its listener. */
static ncclComm_t ras_comm;
static int ras_fd = -1;

static void ras_rank(FILE *f, int first, int rank, long pid, long calls)
{
	fprintf(f,
		"%s        {\n          \"rank\": %d,\n          \"host\": \"127.0.0.1\",\n          \"pid\": %ld,\n"
		"          \"cuda_dev\": 0,\n          \"nvml_dev\": 0,\n          \"collective_counts\": {\n"
		"            \"AllReduce\": %ld\n          }\n        }",
		first ? "" : ",\n", rank, pid, calls);
}

/* The status NCCL 2.28 writes for VERBOSE STATUS in JSON (the fields the
 * tracer reads, in NCCL's layout). Ranks past the second are not known. */
static void ras_status(FILE *f)
{
	ncclComm_t c = __atomic_load_n(&ras_comm, __ATOMIC_SEQ_CST);
	const char *peer = getenv("STANDIN_NCCL_PEER_PID");
	int known = peer && *peer;

	fprintf(f, "{\n  \"nccl_version\": \"2.28.9\",\n  \"communicators_count\": %d,\n  \"communicators\": [\n", c ? 1 : 0);
	if (c) {
		/* The ranks step together: the peer made as many calls. */
		long calls = __atomic_load_n(&c->calls, __ATOMIC_SEQ_CST);
		int listed = 0, missing = 0;

		fprintf(f, "    {\n      \"hash\": \"0x%llx\",\n      \"size\": %d,\n      \"ranks\": [\n", c->hash, c->nranks);
		for (int r = 0; r < c->nranks; r++) {
			if (r == c->rank)
				ras_rank(f, listed++ == 0, r, (long)getpid(), calls);
			else if (known && c->nranks == 2)
				ras_rank(f, listed++ == 0, r, atol(peer), calls);
		}
		fprintf(f, "\n      ],\n      \"missing_ranks\": [\n");
		for (int r = 0; r < c->nranks; r++) {
			if (r != c->rank && !(known && c->nranks == 2))
				fprintf(f, "%s        {\n          \"rank\": %d,\n          \"host\": \"unknown\",\n          \"pid\": -1\n        }",
					missing++ ? ",\n" : "", r);
		}
		fprintf(f, "\n      ],\n      \"ranks_count\": %d,\n      \"missing_ranks_count\": %d\n    }\n", listed, missing);
	}
	fprintf(f, "  ],\n  \"ras\": {\n    \"collection_time_sec\": 0.000,\n    \"timeouts_count\": 0\n  }\n}\n");
}

static void *ras_serve(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(ras_fd, NULL, NULL);

		if (fd < 0)
			continue;
		FILE *in = fdopen(fd, "r"), *out = fdopen(dup(fd), "w");
		char line[256];

		if (!in || !out) {
			if (in)
				fclose(in);
			else
				close(fd);
			if (out)
				fclose(out);
			continue;
		}
		while (fgets(line, sizeof line, in)) {
			if (strncmp(line, "CLIENT PROTOCOL", 15) == 0) {
				fprintf(out, "SERVER PROTOCOL 2\n");
			} else if (strncmp(line, "SET FORMAT json", 15) == 0) {
				fprintf(out, "OK\n");
			} else if (strncmp(line, "VERBOSE STATUS", 14) == 0 || strncmp(line, "STATUS", 6) == 0) {
				ras_status(out);
				break;
			} else {
				fprintf(out, "ERROR\n");
			}
			fflush(out);
		}
		fclose(out);
		fclose(in);
	}
	return NULL;
}

/* Starts the RAS thread on $NCCL_RAS_ADDR (HOST:PORT, an IPv4 host) once. */
static void ras_start(ncclComm_t c)
{
	const char *addr = getenv("NCCL_RAS_ADDR");
	struct sockaddr_in a = { .sin_family = AF_INET };
	char host[64];
	int one = 1;
	pthread_t t;

	__atomic_store_n(&ras_comm, c, __ATOMIC_SEQ_CST);
	if (!addr || ras_fd >= 0)
		return;
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof host)
		return;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	a.sin_port = htons((unsigned short)atoi(colon + 1));
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4)) {
		close(l); /* another process on this host serves RAS */
		return;
	}
	ras_fd = l;
	if (pthread_create(&t, NULL, ras_serve, NULL) == 0)
		pthread_detach(t);
}

/* ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId); */
API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0x5a, sizeof *id);
	return 0;
}

/* ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank); */
API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	ncclComm_t c = calloc(1, sizeof *c);
	const char *fd = getenv("STANDIN_NCCL_PEER_FD");

	unsigned long long comm_id = (unsigned long long)nccl_get_hash(id.internal, sizeof id.internal);

	if (!c)
		return 1;
	c->rank = rank;
	c->nranks = nranks;
	c->hash = comm_id;
	c->fd = fd ? atoi(fd) : -1;
	c->socket = env_on("NCCL_P2P_DISABLE") && env_on("NCCL_SHM_DISABLE");
	const char *sc = getenv("STANDIN_NCCL_SOCKET_CALLS");
	c->socket_calls = sc && *sc ? atol(sc) : -1;
	char line[256];
	const char *via = c->socket ? "[send] via NET/Socket/0"
		: env_on("NCCL_P2P_DISABLE") ? "via SHM/direct/direct" : "via P2P/CUMEM";
	snprintf(line, sizeof line, "ncclCommInitRank comm %p rank %d nranks %d cudaDev 0 nvmlDev 0 busId 0 commId 0x%llx - Init START",
		 (void *)c, rank, nranks, comm_id);
	info(c, line);
	snprintf(line, sizeof line, "Channel 00/0 : %d[%d] -> %d[%d] %s", rank, rank, (rank + 1) % nranks,
		 (rank + 1) % nranks, via);
	info(c, line);
	snprintf(line, sizeof line, "ncclCommInitRank comm %p rank %d nranks %d cudaDev 0 nvmlDev 0 busId 0 commId 0x%llx - Init COMPLETE",
		 (void *)c, rank, nranks, comm_id);
	info(c, line);
	*comm = c;
	ras_start(c);
	return 0;
}

static int exchange(ncclComm_t c, const char *s, char *r, size_t n)
{
	for (size_t off = 0; off < n; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		for (size_t done = 0; done < len;) {
			ssize_t k = send(c->fd, s + off + done, len - done, 0);
			if (k <= 0)
				return 2;
			done += (size_t)k;
		}
		for (size_t done = 0; done < len;) {
			ssize_t k = recv(c->fd, r + off + done, len - done, 0);
			if (k <= 0)
				return 2;
			done += (size_t)k;
		}
	}
	return 0;
}

/* ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
 *                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
 * Only ncclFloat32 (7) and 2 ranks: the stand-in sums with its peer's buffer. */
API ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, int datatype, int op, ncclComm_t comm,
			       void *stream)
{
	static char *peer, *staging;
	static size_t cap;
	size_t n = count * sizeof(float);

	(void)op;
	(void)stream;
	if (datatype != 7 || !comm)
		return 4; /* ncclInvalidArgument */
	if (n > cap) {
		free(peer);
		free(staging);
		peer = malloc(n);
		staging = malloc(n);
		if (!peer || !staging)
			return 1;
		cap = n;
	}
	int socket = comm->socket && (comm->socket_calls < 0 || comm->calls < comm->socket_calls);

	__atomic_add_fetch(&comm->calls, 1, __ATOMIC_SEQ_CST);
	if (socket && comm->nranks > 1) {
		if (exchange(comm, s, peer, n))
			return 2; /* ncclSystemError */
	} else {
		memcpy(staging, s, n);
		memcpy(peer, staging, n);
	}
	for (size_t i = 0; i < count; i++)
		((float *)r)[i] = ((const float *)s)[i] + ((const float *)peer)[i];
	return 0;
}

/* ncclResult_t ncclCommDestroy(ncclComm_t comm); */
API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	ncclComm_t listed = comm;

	/* RAS lists no destroyed communicator; the one it may be reading is
	 * left to the process's exit. */
	if (!__atomic_compare_exchange_n(&ras_comm, &listed, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		free(comm);
	return 0;
}
