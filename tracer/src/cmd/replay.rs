//! `gdrtrace replay FILE`: rebuild the report of a recording (`--record`)
//! through the same aggregator, classification and report code as a live
//! trace, with the process facts and host facts the recording holds.
use std::{cell::RefCell, path::Path, rc::Rc};

use crate::{
    cli::{DamageArgs, ReplayArgs},
    error::{Error, Result},
    output::{self, Named, OutputFile, StreamFile},
    recording::{self, Recording},
    report::{self, Report},
    stats::{
        Aggregator,
        feed::Input,
        source::{Fact, Recorded},
    },
};

/// Feeds a recording's inputs to a fresh aggregator, in order, each with
/// the facts the live source answered while handling it.
pub fn aggregate(rec: &Recording, transfers: Option<std::io::BufWriter<StreamFile>>) -> Aggregator {
    aggregate_with(rec, transfers, false)
}

/// As `aggregate`, collecting the timeline when `timeline` is set.
pub fn aggregate_with(
    rec: &Recording,
    transfers: Option<std::io::BufWriter<StreamFile>>,
    timeline: bool,
) -> Aggregator {
    let mut f = Feeder::new(rec, transfers, timeline);
    for input in &rec.inputs {
        f.feed(input);
    }
    f.finish(rec)
}

/// A fresh aggregator fed a recording's inputs one at a time, each with the
/// facts the live source answered while handling it (`top --replay` plays
/// them at the recording's pace; `aggregate` all at once).
pub struct Feeder {
    pub agg: Aggregator,
    pending: Rc<RefCell<Vec<Fact>>>,
}

impl Feeder {
    pub fn new(rec: &Recording, transfers: Option<std::io::BufWriter<StreamFile>>, timeline: bool) -> Self {
        let pending = Rc::new(RefCell::new(Vec::new()));
        let mut agg = Aggregator::with_source(Box::new(Recorded {
            pending: pending.clone(),
            nvlink: rec.header.facts.nvlink,
        }));
        agg.transfers_mut().sink = transfers;
        if timeline {
            agg.keep_timeline(rec.header.started_ns);
        }
        Feeder { agg, pending }
    }

    pub fn feed(&mut self, (input, facts): &(Input, Vec<Fact>)) {
        *self.pending.borrow_mut() = facts.clone();
        self.agg.feed(input);
    }

    /// The judged and explained report of the inputs fed so far, `t_s`
    /// seconds into the recording (`top --replay`'s frames): the same
    /// building, judging and explaining as the whole recording's, with the
    /// footer's host-side inputs.
    pub fn snapshot(&self, rec: &Recording, t_s: f64, nccl_log: Option<&str>) -> Report {
        let mut inputs = rec.inputs();
        inputs.duration_s = t_s;
        let mut r = report::build(&self.agg, inputs);
        r.judge_with(nccl_log, rec.header.facts.nvlink);
        crate::explain::fill(&mut r);
        r
    }

    /// The aggregator once every input is in (with the footer's VmPin at attach).
    pub fn finish(mut self, rec: &Recording) -> Aggregator {
        for (pid, kib) in &rec.footer.vm_pin_kib_at_attach {
            self.agg.set_vm_pin_at_attach(*pid, Some(*kib));
        }
        self.agg
    }
}

/// The judged report of a recording (and the aggregator behind it).
pub fn rebuild(rec: &Recording, nccl_log: Option<&str>) -> std::result::Result<(Report, Aggregator), String> {
    rebuild_with(rec, nccl_log, None)
}

/// As `rebuild`, writing transfer records to `transfers` (the caller closes
/// it with `report::accounting::finish_transfers`).
pub fn rebuild_with(
    rec: &Recording,
    nccl_log: Option<&str>,
    transfers: Option<StreamFile>,
) -> std::result::Result<(Report, Aggregator), String> {
    rebuild_full(rec, nccl_log, transfers, false).map(|(r, agg, _)| (r, agg))
}

/// As `rebuild_with`, also rendering the timeline (`--trace-event`) when
/// `timeline` is set.
pub fn rebuild_full(
    rec: &Recording,
    nccl_log: Option<&str>,
    transfers: Option<StreamFile>,
    timeline: bool,
) -> std::result::Result<(Report, Aggregator, Option<String>), String> {
    let mut agg = aggregate_with(rec, transfers.map(std::io::BufWriter::new), timeline);
    let r = judged(rec, &mut agg, nccl_log);
    let timeline = agg.take_timeline().map(|t| report::timeline::render(&t, &r));
    Ok((r, agg, timeline))
}

/// The judged and explained report of a recording's aggregator once every
/// input is in.
pub fn judged(rec: &Recording, agg: &mut Aggregator, nccl_log: Option<&str>) -> Report {
    agg.settle();
    let mut r = report::build(agg, rec.inputs());
    r.judge_with(nccl_log, rec.header.facts.nvlink);
    crate::explain::fill(&mut r);
    r.workloads = rec.workloads.clone();
    r
}

/// Reads and parses a recording through the one input reader (gzip by
/// magic, size limit, regular files only), line by line; the error is one
/// line naming the file. Damaged lines are said as in [`read`].
pub fn load(path: &Path) -> Result<Recording> {
    let mut input = crate::input::Input::open(path)?;
    input.refuse_empty()?;
    read(&mut input)
}

/// Parses a recording from `input`; each damaged line is said on stderr,
/// with its number (the first `Damage::NAMED`, then how many more), as it
/// is skipped. [`damaged`] says how the command ends.
pub fn read(input: &mut crate::input::Input) -> Result<Recording> {
    let rec = recording::read(input).map_err(|e| input.error(e))?;
    let d = &rec.damage;
    for x in &d.first {
        errln!(
            "gdrtrace: {}: line {} is damaged, skipped: {}",
            input.name(),
            x.line,
            crate::error::cut_middle(&x.why, crate::error::MAX_LINE)
        );
    }
    let more = d.lines - d.first.len() as u64;
    if more > 0 {
        errln!("gdrtrace: {}: {more} more damaged lines skipped", input.name());
    }
    Ok(rec)
}

/// The error a command that read `rec` from `name` ends with (exit 2, after
/// its output) when lines were damaged, unless the user accepts them
/// (`--skip-damaged`).
pub fn damaged(name: &str, rec: &Recording, read: DamageArgs) -> Option<Error> {
    let n = rec.damage.lines;
    (n > 0 && !read.skip_damaged).then(|| {
        Error::Input(format!(
            "{name}: {n} damaged line{} skipped, counted in the report's loss (--skip-damaged accepts them: exit 0)",
            if n == 1 { "" } else { "s" }
        ))
    })
}

pub fn replay(args: &ReplayArgs) -> Result<i32> {
    output::check_distinct(&[
        Named::input("RECORDING", Some(&args.recording)),
        Named::input("--nccl-log", args.nccl_log.as_deref()),
        Named::input("--ucx-log", args.ucx_log.as_deref()),
        Named::output("--json", args.json.as_deref()),
        Named::output("--transfers", args.transfers.as_deref()),
        Named::output("--trace-event", args.trace_event.as_deref()),
    ])?;
    // Files first: nothing is read or built for an output that cannot be written.
    let log = args.nccl_log.as_deref().map(crate::input::read_to_string).transpose()?;
    let ucx_log = args.ucx_log.as_deref().map(crate::input::read_to_string).transpose()?;
    let transfers = OutputFile::open_opt("--transfers", args.transfers.as_deref())?;
    let json = OutputFile::open_opt("--json", args.json.as_deref())?;
    let trace_event = OutputFile::open_opt("--trace-event", args.trace_event.as_deref())?;
    let rec = load(&args.recording)?;
    let damaged = damaged(&args.recording.display().to_string(), &rec, args.damage);
    let (report, mut agg, timeline) = rebuild_full(
        &rec,
        log.as_deref(),
        transfers.map(OutputFile::stream),
        trace_event.is_some(),
    )
    .map_err(|e| Error::Input(format!("{}: {e}", args.recording.display())))?;
    // Every output is tried, the report printed whatever failed: a failed
    // output names its flag and path (exit 1), never the recording.
    let mut errors = Vec::new();
    if let Err(e) = report::accounting::finish_transfers(&mut agg, &report) {
        errors.push(e);
    }
    if let Err(e) = super::run::write_timeline(trace_event, timeline) {
        errors.push(e);
    }
    if let Err(e) = super::run::emit_with(json, Some(args.format), ucx_log.as_deref(), &report) {
        errors.push(e);
    }
    errors.extend(damaged);
    super::finish(0, errors)
}
