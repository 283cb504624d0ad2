//! Kernel-function probe families (pinning, verbs, peer memory, dma-buf).
//!
//! Every function gets the same four thin programs from one macro: fentry and
//! fexit (preferred: cheap, need BTF and a kernel that allows them) and
//! kprobe and kretprobe (fallback, and the only way into module functions:
//! the planner loads fentry against vmlinux BTF, `Btf::from_sys_fs`, which
//! has no module functions). All
//! four call the shared body in `probes.rs`; the planner in user space picks
//! which pair to load per function and records why the others were not used.
//!
//! Arguments are read positionally and interpreted in user space per op, so
//! signature changes that only drop trailing parameters (the `vmas` argument
//! left `pin_user_pages*` in 6.5) do not move what we read:
//! ```c
//! long pin_user_pages(unsigned long start, unsigned long nr_pages,
//!                     unsigned int gup_flags, struct page **pages
//!                     /* , struct vm_area_struct **vmas  (<= 6.4) */);
//! int pin_user_pages_fast(unsigned long start, int nr_pages,
//!                         unsigned int gup_flags, struct page **pages);
//! void unpin_user_pages(struct page **pages, unsigned long npages);
//! void unpin_user_page_range_dirty_lock(struct page *page, unsigned long npages,
//!                                       bool make_dirty);
//! struct ib_umem *ib_umem_get(struct ib_device *device, unsigned long addr,
//!                             size_t size, int access);
//! int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
//!                          u64 length, struct nvidia_p2p_page_table **page_table,
//!                          void (*free_callback)(void *data), void *data);
//! struct dma_buf_attachment *dma_buf_dynamic_attach(struct dma_buf *dmabuf,
//!         struct device *dev, const struct dma_buf_attach_ops *importer_ops,
//!         void *importer_priv);
//! enum pci_p2pdma_map_type pci_p2pdma_map_segment(struct pci_p2pdma_map_state *state,
//!         struct device *dev, struct scatterlist *sg);            /* 6.2 - 6.16 */
//! enum pci_p2pdma_map_type pci_p2pdma_map_type(struct dev_pagemap *pgmap,
//!         struct device *dev);                                    /* 5.10 - 6.1, 6.17+ */
//! ```
//! For fentry/fexit the arguments come from `bpf_get_func_arg` and the return
//! value from `bpf_get_func_ret` (both 5.17+), which do not depend on the
//! argument count the way direct context reads do.
use aya_ebpf::{
    EbpfContext as _,
    helpers::generated::{bpf_get_func_arg, bpf_get_func_ret},
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use tracer_common::{MAX_ARGS, op};

use crate::probes::{on_entry, on_return};

fn result(r: Result<u32, crate::probes::Skip>) -> u32 {
    match r {
        Ok(v) => v,
        Err(e) => e.code(),
    }
}

#[inline(always)]
fn tracing_entry(ctx: *mut core::ffi::c_void, op: u32) -> u32 {
    let mut args = [0u64; MAX_ARGS];
    let mut i = 0;
    while i < MAX_ARGS {
        let mut v = 0u64;
        // SAFETY: the helper bounds-checks `i` against the function's arity.
        if unsafe { bpf_get_func_arg(ctx, i as u32, &mut v) } == 0 {
            args[i] = v;
        }
        i += 1;
    }
    result(on_entry(op, args))
}

#[inline(always)]
fn tracing_return(ctx: *mut core::ffi::c_void, op: u32) -> u32 {
    let mut ret = 0u64;
    // SAFETY: fexit context; for void functions the value is ignored by the op.
    let _ = unsafe { bpf_get_func_ret(ctx, &mut ret) };
    result(on_return(op, ret as i64))
}

#[inline(always)]
fn kprobe_entry(ctx: &ProbeContext, op: u32) -> u32 {
    let arg = |n| ctx.arg::<u64>(n).unwrap_or(0);
    result(on_entry(op, [arg(0), arg(1), arg(2), arg(3), arg(4), arg(5)]))
}

#[inline(always)]
fn kprobe_return(ctx: &RetProbeContext, op: u32) -> u32 {
    result(on_return(op, ctx.ret::<i64>()))
}

macro_rules! kernel_functions {
    ($($func:ident => $op:expr;)*) => { paste::paste! { $(
        #[fentry]
        pub fn [<fentry_ $func>](ctx: FEntryContext) -> u32 { tracing_entry(ctx.as_ptr(), $op) }
        #[fexit]
        pub fn [<fexit_ $func>](ctx: FExitContext) -> u32 { tracing_return(ctx.as_ptr(), $op) }
        #[kprobe]
        pub fn [<kprobe_ $func>](ctx: ProbeContext) -> u32 { kprobe_entry(&ctx, $op) }
        #[kretprobe]
        pub fn [<kretprobe_ $func>](ctx: RetProbeContext) -> u32 { kprobe_return(&ctx, $op) }
    )* } };
}

// The kernel rows of the catalog (tracer/src/probes/catalog.rs) name the same
// functions with the same ops: tracer/tests/it/probe_declarations.rs checks it,
// and that every program a catalog row attaches is in the object.
kernel_functions! {
    pin_user_pages => op::PIN_USER_PAGES;
    pin_user_pages_fast => op::PIN_USER_PAGES_FAST;
    pin_user_pages_remote => op::PIN_USER_PAGES_REMOTE;
    pin_user_pages_unlocked => op::PIN_USER_PAGES_UNLOCKED;
    get_user_pages => op::GET_USER_PAGES;
    get_user_pages_fast => op::GET_USER_PAGES_FAST;
    get_user_pages_remote => op::GET_USER_PAGES_REMOTE;
    get_user_pages_unlocked => op::GET_USER_PAGES_UNLOCKED;
    unpin_user_pages => op::UNPIN_USER_PAGES;
    unpin_user_pages_dirty_lock => op::UNPIN_USER_PAGES_DIRTY_LOCK;
    unpin_user_page => op::UNPIN_USER_PAGE;
    unpin_user_page_range_dirty_lock => op::UNPIN_USER_PAGE_RANGE_DIRTY_LOCK;
    unpin_folio => op::UNPIN_FOLIO;
    unpin_user_folio => op::UNPIN_USER_FOLIO;
    ib_umem_get => op::IB_UMEM_GET;
    ib_umem_release => op::IB_UMEM_RELEASE;
    ib_umem_dmabuf_get => op::IB_UMEM_DMABUF_GET;
    ib_umem_dmabuf_get_pinned => op::IB_UMEM_DMABUF_GET_PINNED;
    ib_uverbs_reg_mr => op::UVERBS_REG_MR;
    ib_uverbs_dereg_mr => op::UVERBS_DEREG_MR;
    nvidia_p2p_get_pages => op::NV_P2P_GET_PAGES;
    nvidia_p2p_get_pages_persistent => op::NV_P2P_GET_PAGES_PERSISTENT;
    nvidia_p2p_put_pages => op::NV_P2P_PUT_PAGES;
    nvidia_p2p_dma_map_pages => op::NV_P2P_DMA_MAP_PAGES;
    nvidia_p2p_dma_unmap_pages => op::NV_P2P_DMA_UNMAP_PAGES;
    dma_buf_dynamic_attach => op::DMA_BUF_DYNAMIC_ATTACH;
    dma_buf_map_attachment => op::DMA_BUF_MAP_ATTACHMENT;
    dma_buf_map_attachment_unlocked => op::DMA_BUF_MAP_ATTACHMENT_UNLOCKED;
    dma_buf_unmap_attachment => op::DMA_BUF_UNMAP_ATTACHMENT;
    dma_buf_unmap_attachment_unlocked => op::DMA_BUF_UNMAP_ATTACHMENT_UNLOCKED;
    dma_buf_detach => op::DMA_BUF_DETACH;
    pci_p2pdma_map_segment => op::P2PDMA_MAP_SEGMENT;
    pci_p2pdma_map_type => op::P2PDMA_MAP_TYPE;
}
