//! Whether the kernel single-steps a probed function's first instruction.
//!
//! An x86-64 uprobe replaces the instruction at the probe point with a
//! breakpoint. Branches (`call`, `jmp`, `jcc`, relative), `nop` and, on
//! recent kernels, `push reg` are emulated at the breakpoint
//! (`arch/x86/kernel/uprobes.c`); any other instruction is copied to a
//! page of the process and single-stepped there, a second trap (the debug
//! exception) on every hit. Measured on the development host (2 vCPUs,
//! kernel 6.18, 2026-12-04, `perf probe` with no program, 30,000 hits
//! each): 0.9 us a hit on a `push %rbx`, 10.3 us on a `sub $8,%rsp`, 9.9
//! us on a `lea`, 12.2 us on an `endbr64`. So a trap's cost is a property
//! of the function probed, not of the machine alone: the stand-ins the
//! trap cost is calibrated on begin with a `push`, and Debian's
//! `ibv_reg_mr` with a `mov`. `calibrate.rs` measures both kinds; the
//! duty cycle's estimates correct each row by its own kind.

/// The instruction at the start of `code` is emulated at the breakpoint
/// (not single-stepped), as far as the x86-64 kernels since 6.1 go:
/// relative branches, `nop` (with `0x66` prefixes) and `push` of a
/// general register. Older kernels single-step the push too: the
/// calibration's stand-ins begin with one, so its figure for an emulated
/// entry is that kernel's cost of it either way.
pub fn emulated(code: &[u8]) -> bool {
    let mut i = 0;
    while code.get(i) == Some(&0x66) {
        i += 1;
    }
    let prefixed = i > 0;
    match (code.get(i), code.get(i + 1)) {
        (Some(0x90), _) => true,
        (Some(0xe8 | 0xe9 | 0xeb | 0x70..=0x7f), _) => !prefixed,
        (Some(0x0f), Some(0x80..=0x8f)) => !prefixed,
        (Some(0x50..=0x57), _) => !prefixed,
        // REX.B push of r8-r15.
        (Some(0x41), Some(0x50..=0x57)) => !prefixed,
        _ => false,
    }
}

/// `endbr64`: the first instruction of every function of a CET build
/// (`-fcf-protection`, Ubuntu's and Fedora's default). It changes no
/// register and not the stack: it only marks a target of indirect
/// branches.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Where to probe a function at `offset` of a file's bytes, and whether the
/// kernel single-steps the instruction there. A function that begins with
/// an `endbr64` followed by an emulated instruction is probed on that one
/// (4 bytes in): every path into the function passes it, with the
/// arguments and the return address where they were at the first byte,
/// and each hit costs one emulated trap instead of a single-stepped one
/// (12.2 against 0.9 us on the development host). Where the bytes are not
/// there (an offset beyond the file), the first byte, not stepped: that
/// says nothing.
pub fn probe_point(data: &[u8], offset: u64) -> (u64, bool) {
    if cfg!(not(target_arch = "x86_64")) {
        return (offset, false);
    }
    let Some(code) = usize::try_from(offset).ok().and_then(|o| data.get(o..)) else {
        return (offset, false);
    };
    if code.is_empty() {
        return (offset, false);
    }
    if code.starts_with(&ENDBR64) && emulated(&code[ENDBR64.len()..]) {
        return (offset + ENDBR64.len() as u64, false);
    }
    (offset, !emulated(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prologues_are_told_apart() {
        // push %rbx; push %rbp; push %r15.
        assert!(emulated(&[0x53, 0x48, 0x89]));
        assert!(emulated(&[0x55]));
        assert!(emulated(&[0x41, 0x57]));
        // jmp rel32 (a PLT-style thunk), call rel32, je rel8, jne rel32.
        assert!(emulated(&[0xe9, 0, 0, 0, 0]));
        assert!(emulated(&[0xe8, 0, 0, 0, 0]));
        assert!(emulated(&[0x74, 0x05]));
        assert!(emulated(&[0x0f, 0x85, 0, 0, 0, 0]));
        assert!(emulated(&[0x66, 0x90]));
        // sub $8,%rsp (the stand-in libcuda's cuMemcpyDtoHAsync_v2).
        assert!(!emulated(&[0x48, 0x83, 0xec, 0x08]));
        // endbr64 (CET builds: Ubuntu's libraries).
        assert!(!emulated(&[0xf3, 0x0f, 0x1e, 0xfa]));
        // mov %ecx,%r8d (Debian's ibv_reg_mr).
        assert!(!emulated(&[0x41, 0x89, 0xc8]));
        // push %r8 needs REX.B, not REX.W alone; lea.
        assert!(!emulated(&[0x48, 0x8d, 0x47, 0x01]));
        assert!(!emulated(&[]));
    }

    #[test]
    fn offsets_outside_the_file_say_nothing() {
        let data = [0x55, 0x48, 0x83, 0xec, 0x08];
        assert_eq!(probe_point(&data, 0), (0, false));
        assert_eq!(probe_point(&data, 1), (1, true));
        assert_eq!(probe_point(&data, 5), (5, false));
        assert_eq!(probe_point(&data, u64::MAX), (u64::MAX, false));
    }

    #[test]
    fn an_endbr64_is_stepped_over_when_what_follows_is_emulated() {
        // endbr64; push %rbp: probed on the push.
        let data = [0x90, 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(probe_point(&data, 1), (5, false));
        // endbr64; lea 0x1(%rdi),%eax: the endbr64 stays, single-stepped.
        let data = [0xf3, 0x0f, 0x1e, 0xfa, 0x8d, 0x47, 0x01];
        assert_eq!(probe_point(&data, 0), (0, true));
        // A lone endbr64 at the end of the bytes.
        assert_eq!(probe_point(&ENDBR64, 0), (0, true));
    }
}
