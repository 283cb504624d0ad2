//! `gdrtrace replay FILE`: rebuild the report of a recording (`--record`)
//! through the same aggregator, classification and report code as a live
//! trace, with the process facts and host facts the recording holds.
use std::{cell::RefCell, path::Path, rc::Rc};

use crate::{
    cli::ReplayArgs,
    error::Result,
    recording::{self, Recording},
    report::{self, Report},
    stats::{Aggregator, source::Recorded},
};

/// Feeds a recording's inputs to a fresh aggregator, in order, each with
/// the facts the live source answered while handling it.
pub fn aggregate(rec: &Recording, transfers: Option<std::io::BufWriter<std::fs::File>>) -> Aggregator {
    let pending = Rc::new(RefCell::new(Vec::new()));
    let mut agg = Aggregator::with_source(Box::new(Recorded {
        pending: pending.clone(),
        nvlink: rec.header.facts.nvlink,
    }));
    agg.transfers.sink = transfers;
    for (input, facts) in &rec.inputs {
        *pending.borrow_mut() = facts.clone();
        agg.feed(input);
    }
    for (pid, kib) in &rec.footer.vm_pin_kib_at_attach {
        if let Some(p) = agg.procs.get_mut(pid) {
            p.vm_pin_kib_at_attach = Some(*kib);
        }
    }
    agg
}

/// The judged report of a recording (and the aggregator behind it).
pub fn rebuild(rec: &Recording, nccl_log: Option<&str>) -> std::result::Result<(Report, Aggregator), String> {
    rebuild_with(rec, nccl_log, None)
}

/// As `rebuild`, writing transfer records to `transfers`.
pub fn rebuild_with(
    rec: &Recording,
    nccl_log: Option<&str>,
    transfers: Option<&Path>,
) -> std::result::Result<(Report, Aggregator), String> {
    let sink = match transfers {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?,
        )),
        None => None,
    };
    let mut agg = aggregate(rec, sink);
    agg.settle();
    let inputs = recording::inputs_of(&rec.header, &rec.footer)?;
    let mut r = report::build(&agg, inputs);
    r.judge_with(nccl_log, rec.header.facts.nvlink);
    report::accounting::finish_transfers(&mut agg, &r).map_err(|e| format!("writing the transfer records: {e}"))?;
    r.workloads = rec.workloads.clone();
    Ok((r, agg))
}

/// Reads and parses a recording through the one input reader (gzip by
/// magic, size limit, regular files only), line by line; the error is one
/// line naming the file.
pub fn load(path: &Path) -> Result<Recording> {
    let mut input = crate::input::Input::open(path)?;
    recording::read(&mut input).map_err(|e| input.error(e))
}

pub fn replay(args: &ReplayArgs) -> Result<i32> {
    // Files first: nothing is read or built for an output that cannot be written.
    let log = args.nccl_log.as_deref().map(crate::input::read_to_string).transpose()?;
    let ucx_log = args.ucx_log.as_deref().map(crate::input::read_to_string).transpose()?;
    crate::output::check_writable("--transfers", args.transfers.as_deref())?;
    let json = crate::output::OutputFile::open_opt("--json", args.json.as_deref())?;
    let rec = load(&args.recording)?;
    let (report, _agg) = rebuild_with(&rec, log.as_deref(), args.transfers.as_deref())
        .map_err(|e| crate::error::Error::Input(format!("{}: {e}", args.recording.display())))?;
    super::run::emit_with(json, args.format, ucx_log.as_deref(), &report)?;
    Ok(0)
}
