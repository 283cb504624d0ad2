//! A process's address space as `/proc/PID/maps` shows it at first sight:
//! what CUDA state predates the probes.
use serde::{Deserialize, Serialize};

/// What a range of a process's address space is, as `/proc/PID/maps` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MapKind {
    /// A mapping of `/dev/nvidiactl` or `/dev/nvidiaN`: memory the driver
    /// allocated and mapped into the process (pinned host allocations).
    NvidiaDriver,
    /// A mapping of `/dev/nvidia-uvm`: managed memory, mapped by the UVM
    /// driver at the GPU's own virtual address.
    NvidiaUvm,
    /// A shared anonymous mapping (`rw-s`, `/dev/zero (deleted)`) in a
    /// process with the NVIDIA devices mapped: how `cuMemHostAlloc` (torch's
    /// `pin_memory()`) maps pinned host memory with driver 580 on the H200
    /// machine (docs/validation/2026-12-01-gpu-h200.md); heap memory is
    /// private (`rw-p`), and `/dev/shm` segments have their own path.
    SharedAnon,
    /// No access (`---p`), 1 MiB or more: addresses the CPU cannot touch,
    /// so no host buffer lies there (CUDA reserves its device address range
    /// this way).
    NoAccess,
    /// Anything else: host memory.
    Host,
}

/// One range of a process's address space (`/proc/PID/maps`, adjacent
/// lines of one kind merged).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    #[serde(with = "hex_u64")]
    pub start: u64,
    #[serde(with = "hex_u64")]
    pub end: u64,
    pub kind: MapKind,
    /// The device file, for driver mappings.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

/// Addresses as `"0x…"` strings, like every address in a recording (exact
/// in any JSON tool); plain integers read too.
mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Num {
            N(u64),
            S(String),
        }
        match Num::deserialize(d)? {
            Num::N(n) => Ok(n),
            Num::S(s) => s
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .ok_or_else(|| serde::de::Error::custom(format!("not a 0x address: {s}"))),
        }
    }
}

/// A process's address space as it was when the tracer first saw it, kept
/// when the NVIDIA devices were mapped then: its CUDA state (allocations,
/// pinned buffers) predates the probes, and this is what is known of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressSpace {
    /// `VmPin` then (KiB): memory pinned by registrations before tracing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_pin_kib: Option<u64>,
    /// Sorted, non-overlapping.
    pub mappings: Vec<Mapping>,
}

impl AddressSpace {
    /// Reads `/proc/PID/maps` text; None when no NVIDIA device is mapped
    /// (nothing of CUDA predates the trace).
    pub fn parse(maps: &str, vm_pin_kib: Option<u64>) -> Option<Self> {
        const RESERVATION: u64 = 1 << 20;
        let mut out: Vec<Mapping> = Vec::new();
        let mut nvidia = false;
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            let path = f.nth(3).unwrap_or("");
            let Some((a, b)) = range.split_once('-') else { continue };
            let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            let kind = if path == "/dev/nvidia-uvm" {
                MapKind::NvidiaUvm
            } else if path == "/dev/nvidiactl"
                || path
                    .strip_prefix("/dev/nvidia")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
            {
                MapKind::NvidiaDriver
            } else if perms.starts_with("---") && path.is_empty() && end - start >= RESERVATION {
                MapKind::NoAccess
            } else if perms.get(3..4) == Some("s") && path.starts_with("/dev/zero") {
                MapKind::SharedAnon
            } else {
                MapKind::Host
            };
            nvidia |= matches!(kind, MapKind::NvidiaDriver | MapKind::NvidiaUvm);
            let path = if kind == MapKind::NvidiaDriver || kind == MapKind::NvidiaUvm {
                path.to_string()
            } else {
                String::new()
            };
            match out.last_mut() {
                Some(m) if m.end == start && m.kind == kind && m.path == path => m.end = end,
                _ => out.push(Mapping { start, end, kind, path }),
            }
        }
        nvidia.then_some(AddressSpace {
            vm_pin_kib,
            mappings: out,
        })
    }

    /// The mapping that held `addr`, if any.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.end <= addr);
        self.mappings.get(i).filter(|m| m.start <= addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as a CUDA process shows them (layout of a torch job: device
    /// address reservation, driver and UVM mappings, heap, libraries).
    const MAPS: &str = "\
200000000-300200000 ---p 00000000 00:00 0 
300200000-300400000 rw-s 00000000 00:05 12 /dev/nvidiactl
300400000-300600000 rw-s 00000000 00:05 12 /dev/nvidiactl
300600000-302000000 ---p 00000000 00:00 0 
55d0c0000000-55d0c4000000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000200000 rw-s 00000000 00:05 13 /dev/nvidia-uvm
7f1000000000-7f1000001000 ---p 00000000 00:00 0 
7f1000001000-7f1000801000 rw-p 00000000 00:00 0 
7f2000000000-7f2000010000 rw-s 00000000 00:05 14 /dev/nvidia0
7f3000000000-7f3000100000 r-xp 00000000 08:01 99 /usr/lib/libcuda.so.1
7fe324000000-7fe328000000 rw-s 00000000 00:01 12310 /dev/zero (deleted)
";

    #[test]
    fn address_space_at_first_sight() {
        let s = AddressSpace::parse(MAPS, Some(12)).expect("NVIDIA devices mapped");
        let kind = |a: u64| s.find(a).map(|m| m.kind);
        assert_eq!(kind(0x2_1000_0000), Some(MapKind::NoAccess));
        assert_eq!(kind(0x3_0030_0000), Some(MapKind::NvidiaDriver));
        // Two adjacent nvidiactl lines are one range.
        assert_eq!(
            s.find(0x3_0030_0000).map(|m| (m.start, m.end)),
            Some((0x3_0020_0000, 0x3_0060_0000))
        );
        assert_eq!(kind(0x7f00_0000_1000), Some(MapKind::NvidiaUvm));
        assert_eq!(kind(0x7f20_0000_0000), Some(MapKind::NvidiaDriver));
        assert_eq!(kind(0x55d0_c000_0100), Some(MapKind::Host));
        // A guard page is no reservation; it merges with the host memory after it.
        assert_eq!(kind(0x7f10_0000_0800), Some(MapKind::Host));
        assert_eq!(kind(0x1000), None, "not mapped then");
        // A pinned host buffer from torch's pin_memory(), as the H200 machine showed it.
        assert_eq!(kind(0x7fe3_2400_0000), Some(MapKind::SharedAnon));
        assert!(AddressSpace::parse("55d0c0000000-55d0c4000000 rw-p 00000000 00:00 0 [heap]\n", None).is_none());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"start\":\"0x200000000\""), "{json}");
        assert_eq!(serde_json::from_str::<AddressSpace>(&json).unwrap(), s);
    }
}
