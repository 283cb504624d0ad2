//! RAII guards around the raw libibverbs objects used by `drive verbs`.
//!
//! Each guard owns one verbs object and releases it in `Drop`, so every
//! early return in `run` cleans up. Lifetimes tie children to their parents
//! (MR/QP -> PD -> context, QP -> CQ), so the compiler enforces the teardown
//! order libibverbs requires. Errors from destroy calls inside `Drop` cannot
//! be propagated and are ignored; the MR guards offer a checked `dereg`.

use std::ffi::CStr;
use std::io;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use rdma_sys as sys;

/// Converts a libibverbs return code into an `io::Error`. Most verbs return
/// the errno value itself (positive); a few return -1 and set `errno`.
pub(super) fn rc_error(rc: libc::c_int) -> io::Error {
    match rc {
        -1 => io::Error::last_os_error(),
        rc if rc < 0 => io::Error::from_raw_os_error(-rc),
        rc => io::Error::from_raw_os_error(rc),
    }
}

/// The list returned by `ibv_get_device_list`.
pub(super) struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    // struct ibv_device **ibv_get_device_list(int *num_devices);
    pub(super) fn get() -> Result<Self, io::Error> {
        let mut num: libc::c_int = 0;
        // SAFETY: `num` is a valid out-pointer; the returned array is owned by
        // the guard and freed exactly once in Drop.
        let list = unsafe { sys::ibv_get_device_list(&mut num) };
        let list = NonNull::new(list).ok_or_else(io::Error::last_os_error)?;
        Ok(Self {
            list,
            len: usize::try_from(num).unwrap_or(0),
        })
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn device(&self, i: usize) -> Option<*mut sys::ibv_device> {
        // SAFETY: the array holds `len` valid device pointers (NULL-terminated).
        (i < self.len).then(|| unsafe { *self.list.as_ptr().add(i) })
    }

    // const char *ibv_get_device_name(struct ibv_device *device);
    pub(super) fn name(&self, i: usize) -> Option<String> {
        let dev = self.device(i)?;
        // SAFETY: `dev` comes from the live list; the name is a NUL-terminated
        // string owned by the device and copied out before the list is freed.
        let name = unsafe { sys::ibv_get_device_name(dev) };
        if name.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated per the libibverbs contract.
        Some(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }

    pub(super) fn names(&self) -> Vec<String> {
        (0..self.len).filter_map(|i| self.name(i)).collect()
    }

    /// `ibv_device::transport_type` of device `i`.
    pub(super) fn transport(&self, i: usize) -> Option<sys::ibv_transport_type::Type> {
        // SAFETY: the pointer is a live `struct ibv_device` from the list.
        self.device(i).map(|d| unsafe { (*d).transport_type })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // void ibv_free_device_list(struct ibv_device **list);
        // SAFETY: `list` came from ibv_get_device_list and is freed only here.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// An open device context (`ibv_open_device`).
pub(super) struct Context<'l> {
    pub(super) ptr: NonNull<sys::ibv_context>,
    _list: PhantomData<&'l DeviceList>,
}

impl<'l> Context<'l> {
    // struct ibv_context *ibv_open_device(struct ibv_device *device);
    pub(super) fn open(list: &'l DeviceList, i: usize) -> Result<Self, io::Error> {
        let dev = list
            .device(i)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
        // SAFETY: `dev` is a valid device from the still-live list.
        let ptr = unsafe { sys::ibv_open_device(dev) };
        let ptr = NonNull::new(ptr).ok_or_else(io::Error::last_os_error)?;
        Ok(Self {
            ptr,
            _list: PhantomData,
        })
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // int ibv_close_device(struct ibv_context *context);
        // SAFETY: opened by ibv_open_device; all children borrow `self` and are gone.
        unsafe { sys::ibv_close_device(self.ptr.as_ptr()) };
    }
}

/// A protection domain (`ibv_alloc_pd`).
pub(super) struct Pd<'c> {
    pub(super) ptr: NonNull<sys::ibv_pd>,
    _ctx: PhantomData<&'c ()>,
}

impl<'c> Pd<'c> {
    // struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
    pub(super) fn alloc(ctx: &'c Context<'_>) -> Result<Self, io::Error> {
        // SAFETY: `ctx` is an open context that outlives the PD ('c).
        let ptr = unsafe { sys::ibv_alloc_pd(ctx.ptr.as_ptr()) };
        let ptr = NonNull::new(ptr).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, _ctx: PhantomData })
    }
}

impl Drop for Pd<'_> {
    fn drop(&mut self) {
        // int ibv_dealloc_pd(struct ibv_pd *pd);
        // SAFETY: allocated by ibv_alloc_pd; MRs and QPs borrowing it are gone.
        unsafe { sys::ibv_dealloc_pd(self.ptr.as_ptr()) };
    }
}

/// Page-aligned, zero-filled anonymous host memory (`mmap`).
pub(super) struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

impl HostBuffer {
    // void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
    pub(super) fn new(len: usize) -> Result<Self, io::Error> {
        // SAFETY: anonymous private mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    pub(super) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Writes `f(offset)` into every byte (touches every page). Needs `&mut`,
    /// so it cannot run while an `Mr` borrows the buffer.
    pub(super) fn fill_with(&mut self, f: impl Fn(usize) -> u8) {
        // SAFETY: we own `len` writable bytes and no MR (hence no DMA) exists.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        for (i, b) in s.iter_mut().enumerate() {
            *b = f(i);
        }
    }

    /// Copies the current contents out without forming a reference into
    /// memory the device may write by DMA.
    pub(super) fn snapshot(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: `len` readable bytes at `ptr`; `out` does not overlap them.
        unsafe { ptr::copy_nonoverlapping(self.ptr.as_ptr(), out.as_mut_ptr(), self.len) };
        out
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // int munmap(void *addr, size_t length);
        // SAFETY: the mapping was created by `new`; any MR on it borrowed `self`
        // and has been deregistered already.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A registered memory region (`ibv_reg_mr`). Borrows the PD and the buffer.
pub(super) struct Mr<'a> {
    ptr: *mut sys::ibv_mr,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> Mr<'a> {
    // Exported symbol that the C `ibv_reg_mr(pd, addr, length, access)` macro
    // resolves to (via the inline `__ibv_reg_mr`) when `access` is a
    // compile-time constant without IBV_ACCESS_OPTIONAL_RANGE:
    // struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
    pub(super) fn register(pd: &'a Pd<'_>, buf: &'a HostBuffer, access: u32) -> Result<Self, io::Error> {
        let access = libc::c_int::try_from(access).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `buf` is `len` bytes of mapped memory that outlives the MR
        // ('a), and `pd` is a live protection domain.
        let ptr = unsafe { sys::ibv_reg_mr(pd.ptr.as_ptr(), buf.ptr.as_ptr().cast(), buf.len, access) };
        if ptr.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr,
            _borrows: PhantomData,
        })
    }

    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: `ptr` is a live MR owned by this guard.
        unsafe { (*self.ptr).lkey }
    }

    pub(super) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.ptr).rkey }
    }

    /// Deregisters now and reports the error, instead of silently in Drop.
    // int ibv_dereg_mr(struct ibv_mr *mr);
    pub(super) fn dereg(mut self) -> Result<(), io::Error> {
        let p = std::mem::replace(&mut self.ptr, ptr::null_mut());
        // SAFETY: `p` is the live MR; the guard no longer owns it (Drop skips null).
        let rc = unsafe { sys::ibv_dereg_mr(p) };
        if rc == 0 { Ok(()) } else { Err(rc_error(rc)) }
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // int ibv_dereg_mr(struct ibv_mr *mr);
            // SAFETY: live MR owned by this guard, released once.
            unsafe { sys::ibv_dereg_mr(self.ptr) };
        }
    }
}

/// A completion queue (`ibv_create_cq`).
pub(super) struct Cq<'c> {
    pub(super) ptr: NonNull<sys::ibv_cq>,
    _ctx: PhantomData<&'c ()>,
}

impl<'c> Cq<'c> {
    // struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
    //                              void *cq_context, struct ibv_comp_channel *channel,
    //                              int comp_vector);
    pub(super) fn create(ctx: &'c Context<'_>, cqe: i32) -> Result<Self, io::Error> {
        // SAFETY: live context; no channel (we poll), no user context.
        let ptr = unsafe { sys::ibv_create_cq(ctx.ptr.as_ptr(), cqe, ptr::null_mut(), ptr::null_mut(), 0) };
        let ptr = NonNull::new(ptr).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, _ctx: PhantomData })
    }
}

impl Drop for Cq<'_> {
    fn drop(&mut self) {
        // int ibv_destroy_cq(struct ibv_cq *cq);
        // SAFETY: created by ibv_create_cq; QPs using it borrow it and are gone.
        unsafe { sys::ibv_destroy_cq(self.ptr.as_ptr()) };
    }
}

/// A queue pair (`ibv_create_qp`).
pub(super) struct Qp<'a> {
    pub(super) ptr: NonNull<sys::ibv_qp>,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> Qp<'a> {
    // struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);
    pub(super) fn create_rc(pd: &'a Pd<'_>, cq: &'a Cq<'_>, max_send_wr: u32) -> Result<Self, io::Error> {
        // SAFETY: ibv_qp_init_attr is plain data (ints, nullable pointers);
        // all-zero is a valid value.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.ptr.as_ptr();
        init.recv_cq = cq.ptr.as_ptr();
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = max_send_wr;
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: `init` is fully initialised; pd and cq outlive the QP ('a).
        let ptr = unsafe { sys::ibv_create_qp(pd.ptr.as_ptr(), &mut init) };
        let ptr = NonNull::new(ptr).ok_or_else(io::Error::last_os_error)?;
        Ok(Self {
            ptr,
            _borrows: PhantomData,
        })
    }

    pub(super) fn qp_num(&self) -> u32 {
        // SAFETY: live QP owned by this guard.
        unsafe { (*self.ptr.as_ptr()).qp_num }
    }

    // int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    pub(super) fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: sys::ibv_qp_attr_mask) -> Result<(), io::Error> {
        let mask = libc::c_int::try_from(mask.0).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: live QP; `attr` is a valid, initialised ibv_qp_attr.
        let rc = unsafe { sys::ibv_modify_qp(self.ptr.as_ptr(), attr, mask) };
        if rc == 0 { Ok(()) } else { Err(rc_error(rc)) }
    }
}

impl Drop for Qp<'_> {
    fn drop(&mut self) {
        // int ibv_destroy_qp(struct ibv_qp *qp);
        // SAFETY: created by ibv_create_qp and destroyed once, before its CQ/PD.
        unsafe { sys::ibv_destroy_qp(self.ptr.as_ptr()) };
    }
}
