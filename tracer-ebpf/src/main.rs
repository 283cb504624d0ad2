//! gdrtrace's eBPF programs. Probes live in one file per family; the shared
//! entry/return machinery is in `probes.rs`.
#![no_std]
#![no_main]
// `atomic_xadd` (probes::add_copy): the BPF target's atomics lack fetch_add.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for atomic_xadd")]

mod discover;
mod doctor;
mod kfuncs;
mod maps;
mod probes;
mod sched;
mod syscalls;
mod uapi;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
