//! The explain rules about GPUDirect Storage (registered in `RULES`): a
//! file path's cause, decided by the judge (`judge/files.rs`,
//! `classify::gds::Cause`), with the evidence behind it (the host's
//! nvidia-fs, the file, cufile.json, cuFile's own log).
use super::*;
use crate::classify::{
    gds::{Cause, GdsProcess},
    path::{Path, PeerKind},
};

/// The rules a file path can be explained by.
pub(super) const FILE_RULES: &[&str] = &[
    "gds-forced-compat",
    "gds-nvidia-fs-not-loaded",
    "gds-file-not-o-direct",
    "gds-denylisted",
    "gds-filesystem-not-supported",
    "gds-io-small-or-unaligned",
    "gds-p2p-blocked",
    "gds-buffer-not-registered",
];

fn gds_process(r: &Report, pid: u32) -> Option<&GdsProcess> {
    r.gds.as_ref().and_then(|g| g.process(pid))
}

fn describe(p: &Path) -> String {
    format!(
        "{}: {} via {}, {} of {} bytes through host memory",
        p.label(),
        p.transport.name(),
        p.via,
        p.staged_bytes,
        p.bytes
    )
}

/// What else the report holds that bears on a cause.
fn context(r: &Report, p: &Path, cause: Cause) -> Vec<String> {
    let mut ev = Vec::new();
    let g = gds_process(r, p.pid);
    match cause {
        Cause::NvfsNotLoaded => {
            if let Some(h) = &r.facts.gds {
                ev.push(format!(
                    "nvidia_fs {} in /proc/modules; nvidia-fs devices: {}",
                    if h.nvidia_fs { "is" } else { "is not" },
                    if h.devices.is_empty() {
                        "none".to_string()
                    } else {
                        h.devices.join(", ")
                    }
                ));
            }
            if let Some(c) = g.and_then(|g| g.config.as_ref()) {
                ev.push(format!(
                    "{}: allow_compat_mode {}, use_pci_p2pdma {}",
                    c.path,
                    c.allow_compat_mode.map_or("unset (true)".into(), |v| v.to_string()),
                    c.use_pci_p2pdma.map_or("unset (false)".into(), |v| v.to_string())
                ));
            }
        }
        Cause::ForcedCompat => {
            if let Some(g) = g {
                ev.extend(g.env.iter().map(|(k, v)| format!("{k}={v}")));
            }
        }
        _ => {}
    }
    if let Some(g) = g
        && g.bounce_buffers > 0
        && p.host_staged
    {
        ev.push(format!(
            "{} pinned host bounce buffers ({} bytes) registered with CUDA",
            g.bounce_buffers, g.bounce_bytes
        ));
    }
    let log = r.gds.as_ref().and_then(|g| g.log.as_ref());
    for l in log.into_iter().flat_map(|l| &l.processes).filter(|l| l.pid == p.pid) {
        ev.extend(l.lines.iter().take(4).map(|x| format!("cuFile's log: {x}")));
        if let Some(a) = l.agrees {
            ev.push(format!(
                "cuFile's log {} the tracer's file paths",
                if a { "agrees with" } else { "disagrees with" }
            ));
        }
    }
    ev
}

/// The file paths whose cause is of one kind, per process.
fn by_cause(r: &Report, cause: Cause) -> Hits {
    let mut out: Hits = Vec::new();
    for p in r.paths.iter().filter(|p| p.peer_kind == PeerKind::File) {
        let Some(c) = p.cause.as_deref().filter(|c| Cause::of_sentence(c) == Some(cause)) else {
            continue;
        };
        let mut ev = vec![describe(p), c.to_string()];
        ev.extend(context(r, p, cause));
        match out.iter_mut().find(|(pid, _)| *pid == p.pid) {
            Some((_, e)) => e.extend(ev.into_iter().filter(|x| !e.contains(x)).collect::<Vec<_>>()),
            None => out.push((p.pid, ev)),
        }
    }
    out
}

pub fn forced_compat(r: &Report) -> Hits {
    by_cause(r, Cause::ForcedCompat)
}

pub fn nvidia_fs_not_loaded(r: &Report) -> Hits {
    by_cause(r, Cause::NvfsNotLoaded)
}

pub fn not_o_direct(r: &Report) -> Hits {
    by_cause(r, Cause::NotODirect)
}

pub fn denylisted(r: &Report) -> Hits {
    by_cause(r, Cause::Denylisted)
}

pub fn fs_unsupported(r: &Report) -> Hits {
    by_cause(r, Cause::FsUnsupported)
}

pub fn small_or_unaligned(r: &Report) -> Hits {
    by_cause(r, Cause::SmallOrUnaligned)
}

pub fn p2p_blocked(r: &Report) -> Hits {
    by_cause(r, Cause::P2pBlocked)
}

pub fn buffer_not_registered(r: &Report) -> Hits {
    by_cause(r, Cause::BufferNotRegistered)
}
