//! `gdrtrace drive ...`: run a workload without tracing.
use crate::{
    cli::Drive,
    drive::{copy_loop, cuda_copy, gds, nccl, nixl, pin_churn, syscalls, ucx, verbs},
    error::{Error, Result},
};

/// Prints a workload's summary lines and writes its JSON summary if asked.
fn report(lines: &[String], summary: &impl serde::Serialize, path: Option<&std::path::Path>) -> Result<()> {
    for line in lines {
        outln!("{line}");
    }
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(summary).map_err(|e| Error::Workload(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

pub fn drive(d: &Drive) -> Result<i32> {
    match d {
        Drive::PinChurn(o) => {
            let s = pin_churn::run(o)?;
            outln!("{}", s.line());
            if let Some(note) = &s.odirect_note {
                outln!("pin-churn: note: {note}");
            }
            outln!(
                "pin-churn: elapsed {:.3} s, cpu {:.3} s, mean register latency {:.1} us",
                s.elapsed_s,
                s.cpu_s,
                s.register_ns_total as f64 / s.registrations.max(1) as f64 / 1e3
            );
            Ok(0)
        }
        Drive::Syscalls(o) => {
            let s = syscalls::run(o);
            report(&[s.line()], &s, o.summary.as_deref())?;
            Ok(0)
        }
        Drive::Verbs(o) => {
            let r = verbs::run(o).map_err(|e| Error::Workload(e.to_string()))?;
            report(&r.summary_lines(), &r, o.summary.as_deref())?;
            if r.writes.as_ref().is_some_and(|w| !w.verified) {
                return Err(Error::Workload(
                    "verbs: RDMA WRITE data did not arrive intact (verified=false)".into(),
                ));
            }
            Ok(0)
        }
        Drive::CudaCopy(o) => {
            let r = cuda_copy::run(o).map_err(|e| Error::Workload(e.to_string()))?;
            report(&r.summary_lines(), &r, o.summary.as_deref())?;
            Ok(0)
        }
        Drive::Nccl(o) if o.is_rank() => Ok(nccl::run_rank(o)),
        Drive::Ucx(o) => {
            // Files first: the perftest does not run for an output that cannot be written.
            crate::output::check_writable("--log", o.log.as_deref())?;
            crate::output::check_writable("--summary", o.summary.as_deref())?;
            let s = ucx::run(o).map_err(|e| match e {
                ucx::UcxError::Usage(_) => Error::Usage(e.to_string()),
                _ => Error::Workload(e.to_string()),
            })?;
            report(&[s.line()], &s, o.summary.as_deref())?;
            Ok(0)
        }
        Drive::Nixl(o) => {
            crate::output::check_writable("--log", o.log.as_deref())?;
            crate::output::check_writable("--summary", o.summary.as_deref())?;
            let s = nixl::run(o).map_err(|e| Error::Workload(e.to_string()))?;
            report(&[s.line()], &s, None)?;
            Ok(0)
        }
        Drive::Nccl(o) => {
            let r = nccl::run(o).map_err(|e| Error::Workload(e.to_string()))?;
            report(&r.summary_lines(), &r, o.summary.as_deref())?;
            Ok(0)
        }
        Drive::CopyLoop(o) => {
            let s = copy_loop::run(o).map_err(Error::Workload)?;
            report(&[s.line()], &s, o.summary.as_deref())?;
            Ok(0)
        }
        Drive::Gds(o) => {
            crate::output::check_writable("--summary", o.summary.as_deref())?;
            let s = gds::run(o).map_err(Error::Workload)?;
            report(&[s.line()], &s, o.summary.as_deref())?;
            if !s.verified {
                return Err(Error::Workload(
                    "gds: the buffer read back differs from what was written (verified=false)".into(),
                ));
            }
            Ok(0)
        }
    }
}
