/*
 * STAND-IN for libibverbs, for gdrtrace's integration tests only (no RDMA
 * hardware, no rdma-core needed). It is NOT libibverbs: it exports a few
 * functions with libibverbs' names, prototypes and ELF symbol versions so
 * the tracer's uprobes can be exercised against them.
 *
 * Like Debian's libibverbs.so.1 (rdma-core), it exports two different
 * functions for `ibv_reg_mr` (and `ibv_dereg_mr`):
 *   ibv_reg_mr@IBVERBS_1.0    the 1.0 compatibility entry point
 *   ibv_reg_mr@@IBVERBS_1.1   the default, which calls ibv_reg_mr_iova2
 * (see standin_ibverbs.map). Built as `libibverbs.so.1` so the tracer
 * recognises it by file name.
 *
 * Returned MRs are heap objects laid out like `struct ibv_mr` (lkey at
 * offset 36, rkey at 40) with keys that tell which entry point made them:
 *   IBVERBS_1.0:       lkey = 0x10001000 + n, rkey = 0x10002000 + n
 *   ibv_reg_mr_iova2:  lkey = 0x11001000 + n, rkey = 0x11002000 + n
 * where n counts registrations in this process.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Same layout as rdma-core's struct ibv_mr (verbs.h). */
struct ibv_mr {
	void *context;
	void *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

_Static_assert(offsetof(struct ibv_mr, lkey) == 36, "lkey at 36 as in rdma-core");
_Static_assert(offsetof(struct ibv_mr, rkey) == 40, "rkey at 40 as in rdma-core");

static uint32_t registrations;

#define NOINLINE __attribute__((noinline, used))

static struct ibv_mr *new_mr(void *pd, void *addr, size_t length, uint32_t tag)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	uint32_t n;

	if (!mr)
		return NULL;
	n = ++registrations;
	mr->context = (void *)0xc0;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->handle = n;
	mr->lkey = tag | (0x1000 + n);
	mr->rkey = tag | (0x2000 + n);
	return mr;
}

/* struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
 *                                 uint64_t iova, unsigned int access); */
NOINLINE struct ibv_mr *ibv_reg_mr_iova2(void *pd, void *addr, size_t length, uint64_t iova,
					 unsigned int access)
{
	(void)iova;
	(void)access;
	return new_mr(pd, addr, length, 0x11000000u);
}

/* struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
 *                                uint64_t iova, int access); */
NOINLINE struct ibv_mr *ibv_reg_mr_iova(void *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/* ibv_reg_mr@IBVERBS_1.0: the compatibility entry point, a function of its own. */
NOINLINE struct ibv_mr *stand_in_reg_mr_1_0(void *pd, void *addr, size_t length, int access)
{
	(void)access;
	return new_mr(pd, addr, length, 0x10000000u);
}
__asm__(".symver stand_in_reg_mr_1_0, ibv_reg_mr@IBVERBS_1.0");

/* ibv_reg_mr@@IBVERBS_1.1 (default): forwards to ibv_reg_mr_iova2 as rdma-core does. */
NOINLINE struct ibv_mr *stand_in_reg_mr_1_1(void *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}
__asm__(".symver stand_in_reg_mr_1_1, ibv_reg_mr@@IBVERBS_1.1");

/* int ibv_dereg_mr(struct ibv_mr *mr): IBVERBS_1.0 and @@IBVERBS_1.1. */
NOINLINE int stand_in_dereg_mr_1_0(struct ibv_mr *mr)
{
	free(mr);
	return 0;
}
__asm__(".symver stand_in_dereg_mr_1_0, ibv_dereg_mr@IBVERBS_1.0");

NOINLINE int stand_in_dereg_mr_1_1(struct ibv_mr *mr)
{
	if (!mr)
		return 22; /* EINVAL */
	free(mr);
	return 0;
}
__asm__(".symver stand_in_dereg_mr_1_1, ibv_dereg_mr@@IBVERBS_1.1");

/* struct ibv_pd *ibv_alloc_pd(struct ibv_context *context); */
NOINLINE void *ibv_alloc_pd(void *context)
{
	(void)context;
	return calloc(1, 64);
}

/* int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask); */
NOINLINE int ibv_modify_qp(void *qp, void *attr, int attr_mask)
{
	(void)qp;
	(void)attr;
	return attr_mask < 0;
}
