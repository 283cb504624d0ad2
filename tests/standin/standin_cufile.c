/*
 * STAND-IN for libcufile (GPUDirect Storage's cuFile), for gdrtrace's tests
 * only: no GPU, no nvidia-fs needed. It is NOT libcufile. It exports the
 * cuFile entry points gdrtrace probes under their real names, with the
 * prototypes of cufile.h (libcufile 1.15, CUDA 13.0), and is built as
 * libcufile.so.0 so the tracer recognises it by file name.
 *
 * It moves the bytes the way the real library does in each mode:
 *
 *   compat (the default, and what libcufile does without nvidia-fs): POSIX
 *     pread/pwrite on the file's fd through a pinned bounce buffer
 *     (cuMemHostRegister'd at cuFileDriverOpen), plus cuMemcpyHtoDAsync /
 *     cuMemcpyDtoHAsync between it and the "GPU" buffer, through the
 *     libcuda stand-in (libcuda.so.1, loaded by the caller or found by name);
 *   direct (when the device node $GDRTRACE_STANDIN_NVFS, default
 *     /dev/nvidia-fs0, opens, and CUFILE_FORCE_COMPAT_MODE is not true):
 *     an ioctl on that node per I/O, as libcufile drives nvidia-fs, and the
 *     bytes moved without a syscall or a copy through host memory (the file
 *     is mmap'ed and copied to the "GPU" buffer, standing for the DMA
 *     nvidia-fs makes the NVMe device do). A test makes the node with
 *     mknod; it is a STAND-IN for nvidia-fs's device, not nvidia-fs.
 *
 * "GPU memory" is host memory in the stand-ins.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define API __attribute__((noinline, used, visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;

/* cufile.h */
typedef enum CUfileOpError {
	CU_FILE_SUCCESS = 0,
	CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
	CU_FILE_INVALID_VALUE = 5002,
	CU_FILE_IO_ERROR = 5025,
	CU_FILE_INTERNAL_ERROR = 5030,
} CUfileOpError;

typedef struct CUfileError {
	CUfileOpError err;
	CUresult cu_err;
} CUfileError_t;

typedef enum CUfileFileHandleType {
	CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,
	CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
	CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3,
} CUfileFileHandleType;

typedef struct CUfileDescr_t {
	CUfileFileHandleType type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;

typedef struct CUfileDrvProps {
	struct {
		unsigned int major_version;
		unsigned int minor_version;
		size_t poll_thresh_size;
		size_t max_direct_io_size;
		unsigned int dstatusflags;
		unsigned int dcontrolflags;
	} nvfs;
	unsigned int fflags;
	unsigned int max_device_cache_size;
	unsigned int per_buffer_cache_size;
	unsigned int max_device_pinned_mem_size;
	unsigned int max_batch_io_size;
	unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

typedef enum CUfileOpcode { CUFILE_READ = 0, CUFILE_WRITE } CUfileOpcode_t;
typedef enum CUfileBatchMode { CUFILE_BATCH = 1 } CUfileBatchMode_t;
typedef enum CUfileStatus { CUFILE_WAITING = 1, CUFILE_COMPLETE = 0x10, CUFILE_FAILED = 0x20 } CUfileStatus_t;

typedef struct CUfileIOParams {
	CUfileBatchMode_t mode;
	union {
		struct {
			void *devPtr_base;
			off_t file_offset;
			off_t devPtr_offset;
			size_t size;
		} batch;
	} u;
	CUfileHandle_t fh;
	CUfileOpcode_t opcode;
	void *cookie;
} CUfileIOParams_t;

typedef struct CUfileIOEvents {
	void *cookie;
	CUfileStatus_t status;
	size_t ret;
} CUfileIOEvents_t;

typedef void *CUfileBatchHandle_t;

/* The libcuda entry points compat mode copies through (cuda.h). */
typedef CUresult (*host_register_fn)(void *p, size_t n, unsigned int flags);
typedef CUresult (*host_unregister_fn)(void *p);
typedef CUresult (*htod_fn)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
typedef CUresult (*dtoh_fn)(void *dst, CUdeviceptr src, size_t n, CUstream s);

#define BOUNCE (4u << 20)
#define NVFS_IOCTL_READ 0x7402 /* stand-in request numbers */
#define NVFS_IOCTL_WRITE 0x7403

static struct {
	int open;
	int direct;
	int nvfs_fd;
	void *bounce;
	host_register_fn host_register;
	host_unregister_fn host_unregister;
	htod_fn htod;
	dtoh_fn dtoh;
} drv = { .nvfs_fd = -1 };

struct handle {
	int fd;
};

static CUfileError_t status(CUfileOpError err)
{
	CUfileError_t e = { err, 0 };
	return e;
}

static int truthy(const char *v)
{
	return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"));
}

/* CUfileError_t cuFileDriverOpen(void); */
API CUfileError_t cuFileDriverOpen(void)
{
	const char *dev = getenv("GDRTRACE_STANDIN_NVFS");
	void *cuda;

	if (drv.open++)
		return status(CU_FILE_SUCCESS);
	if (!truthy(getenv("CUFILE_FORCE_COMPAT_MODE")))
		drv.nvfs_fd = open(dev ? dev : "/dev/nvidia-fs0", O_RDWR | O_CLOEXEC);
	drv.direct = drv.nvfs_fd >= 0;
	if (drv.direct)
		return status(CU_FILE_SUCCESS);
	/* Compat mode: a pinned bounce buffer and libcuda's copies. */
	cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!cuda)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	drv.host_register = (host_register_fn)dlsym(cuda, "cuMemHostRegister_v2");
	drv.host_unregister = (host_unregister_fn)dlsym(cuda, "cuMemHostUnregister");
	drv.htod = (htod_fn)dlsym(cuda, "cuMemcpyHtoDAsync_v2");
	drv.dtoh = (dtoh_fn)dlsym(cuda, "cuMemcpyDtoHAsync_v2");
	if (!drv.host_register || !drv.htod || !drv.dtoh)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (posix_memalign(&drv.bounce, 4096, BOUNCE))
		return status(CU_FILE_INTERNAL_ERROR);
	if (drv.host_register(drv.bounce, BOUNCE, 0) != 0)
		return status(CU_FILE_INTERNAL_ERROR);
	return status(CU_FILE_SUCCESS);
}

/* CUfileError_t cuFileDriverClose_v2(void); and cuFileDriverClose(void) */
API CUfileError_t cuFileDriverClose_v2(void)
{
	if (!drv.open || --drv.open)
		return status(CU_FILE_SUCCESS);
	if (drv.bounce) {
		if (drv.host_unregister)
			drv.host_unregister(drv.bounce);
		free(drv.bounce);
		drv.bounce = NULL;
	}
	if (drv.nvfs_fd >= 0)
		close(drv.nvfs_fd);
	drv.nvfs_fd = -1;
	return status(CU_FILE_SUCCESS);
}

API CUfileError_t cuFileDriverClose(void)
{
	return cuFileDriverClose_v2();
}

/* CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props); */
API CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props)
{
	if (!drv.open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	memset(props, 0, sizeof(*props));
	props->nvfs.major_version = drv.direct ? 2 : 0;
	props->nvfs.minor_version = drv.direct ? 26 : 0;
	props->nvfs.max_direct_io_size = 16u << 20;
	/* CU_FILE_NVME_SUPPORTED (bit 4) where "nvidia-fs" answered. */
	props->nvfs.dstatusflags = drv.direct ? 1u << 4 : 0;
	props->max_batch_io_size = 128;
	return status(CU_FILE_SUCCESS);
}

/* CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr); */
API CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)
{
	struct handle *h;

	if (!drv.open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (!fh || !descr || descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD)
		return status(CU_FILE_INVALID_VALUE);
	h = calloc(1, sizeof(*h));
	if (!h)
		return status(CU_FILE_INTERNAL_ERROR);
	h->fd = descr->handle.fd;
	*fh = h;
	return status(CU_FILE_SUCCESS);
}

/* void cuFileHandleDeregister(CUfileHandle_t fh); */
API void cuFileHandleDeregister(CUfileHandle_t fh)
{
	free(fh);
}

/* CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags); */
API CUfileError_t cuFileBufRegister(const void *buf, size_t length, int flags)
{
	(void)flags;
	return status(buf && length ? CU_FILE_SUCCESS : CU_FILE_INVALID_VALUE);
}

/* CUfileError_t cuFileBufDeregister(const void *bufPtr_base); */
API CUfileError_t cuFileBufDeregister(const void *buf)
{
	return status(buf ? CU_FILE_SUCCESS : CU_FILE_INVALID_VALUE);
}

/* The direct mode's "DMA": the file's pages, mapped, to or from the buffer. */
static ssize_t direct_io(struct handle *h, char *buf, size_t size, off_t off, int write)
{
	long page = sysconf(_SC_PAGESIZE);
	off_t start = off & ~(off_t)(page - 1);
	size_t len = size + (size_t)(off - start);
	struct stat st;
	char *map;

	if (ioctl(drv.nvfs_fd, write ? NVFS_IOCTL_WRITE : NVFS_IOCTL_READ, &size) < 0 && errno != ENOTTY)
		return -1;
	if (fstat(h->fd, &st) < 0)
		return -1;
	if (write && st.st_size < off + (off_t)size && ftruncate(h->fd, off + (off_t)size) < 0)
		return -1;
	if (!write && st.st_size < off + (off_t)size)
		size = st.st_size > off ? (size_t)(st.st_size - off) : 0;
	if (!size)
		return 0;
	map = mmap(NULL, len, write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, h->fd, start);
	if (map == MAP_FAILED)
		return -1;
	if (write)
		memcpy(map + (off - start), buf, size);
	else
		memcpy(buf, map + (off - start), size);
	munmap(map, len);
	return (ssize_t)size;
}

/* Compat mode: POSIX I/O through the bounce buffer, and copies. */
static ssize_t compat_io(struct handle *h, CUdeviceptr buf, size_t size, off_t off, int write)
{
	size_t done = 0;

	while (done < size) {
		size_t n = size - done < BOUNCE ? size - done : BOUNCE;
		ssize_t got;

		if (write) {
			if (drv.dtoh(drv.bounce, buf + done, n, NULL) != 0)
				return -1;
			got = pwrite(h->fd, drv.bounce, n, off + (off_t)done);
		} else {
			got = pread(h->fd, drv.bounce, n, off + (off_t)done);
			if (got > 0 && drv.htod(buf + done, drv.bounce, (size_t)got, NULL) != 0)
				return -1;
		}
		if (got < 0)
			return -1;
		done += (size_t)got;
		if ((size_t)got < n)
			break;
	}
	return (ssize_t)done;
}

static ssize_t io(CUfileHandle_t fh, void *base, size_t size, off_t foff, off_t boff, int write)
{
	struct handle *h = fh;

	if (!drv.open || !h || !base) {
		errno = EINVAL;
		return -1;
	}
	if (drv.direct)
		return direct_io(h, (char *)base + boff, size, foff, write);
	return compat_io(h, (CUdeviceptr)(uintptr_t)base + (CUdeviceptr)boff, size, foff, write);
}

/* ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
 *                    off_t bufPtr_offset); */
API ssize_t cuFileRead(CUfileHandle_t fh, void *buf, size_t size, off_t foff, off_t boff)
{
	return io(fh, buf, size, foff, boff, 0);
}

/* ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
 *                     off_t bufPtr_offset); */
API ssize_t cuFileWrite(CUfileHandle_t fh, const void *buf, size_t size, off_t foff, off_t boff)
{
	return io(fh, (void *)buf, size, foff, boff, 1);
}

/* CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
 *     off_t *file_offset_p, off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream_t stream);
 * The stand-in's streams are synchronous. */
API CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *buf, size_t *size_p, off_t *foff_p, off_t *boff_p,
				  ssize_t *bytes_p, CUstream s)
{
	(void)s;
	*bytes_p = io(fh, buf, *size_p, *foff_p, *boff_p, 0);
	return status(*bytes_p < 0 ? CU_FILE_IO_ERROR : CU_FILE_SUCCESS);
}

API CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *buf, size_t *size_p, off_t *foff_p, off_t *boff_p,
				   ssize_t *bytes_p, CUstream s)
{
	(void)s;
	*bytes_p = io(fh, buf, *size_p, *foff_p, *boff_p, 1);
	return status(*bytes_p < 0 ? CU_FILE_IO_ERROR : CU_FILE_SUCCESS);
}

/* Batch I/O: a batch is its results, filled at submission. */
struct batch {
	unsigned nr, done;
	CUfileIOEvents_t ev[];
};

/* CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr); */
API CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr)
{
	struct batch *b = calloc(1, sizeof(*b) + nr * sizeof(CUfileIOEvents_t));

	if (!b)
		return status(CU_FILE_INTERNAL_ERROR);
	b->nr = nr;
	*batch_idp = b;
	return status(CU_FILE_SUCCESS);
}

/* CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
 *                                   CUfileIOParams_t *iocbp, unsigned int flags); */
API CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp,
				      unsigned int flags)
{
	struct batch *b = batch_idp;
	unsigned i;

	(void)flags;
	if (nr > b->nr)
		return status(CU_FILE_INVALID_VALUE);
	for (i = 0; i < nr; i++) {
		CUfileIOParams_t *p = &iocbp[i];
		ssize_t r = io(p->fh, p->u.batch.devPtr_base, p->u.batch.size, p->u.batch.file_offset,
			       p->u.batch.devPtr_offset, p->opcode == CUFILE_WRITE);

		b->ev[i].cookie = p->cookie;
		b->ev[i].status = r < 0 ? CUFILE_FAILED : CUFILE_COMPLETE;
		b->ev[i].ret = r < 0 ? 0 : (size_t)r;
	}
	b->done = nr;
	return status(CU_FILE_SUCCESS);
}

/* CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
 *                                      CUfileIOEvents_t *iocbp, struct timespec *timeout); */
API CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
					 CUfileIOEvents_t *iocbp, void *timeout)
{
	struct batch *b = batch_idp;
	unsigned n = b->done < *nr ? b->done : *nr;

	(void)min_nr;
	(void)timeout;
	memcpy(iocbp, b->ev, n * sizeof(*iocbp));
	*nr = n;
	return status(CU_FILE_SUCCESS);
}

/* void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp); */
API void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp)
{
	free(batch_idp);
}
