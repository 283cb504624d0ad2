//! `gdrtrace explain [REPORT.json | RECORDING]`.
use std::path::PathBuf;

use crate::{
    classify::comm,
    cli::{ExplainArgs, Format},
    error::{Error, Result},
    explain,
    input::{self, Input, JsonError},
    judge,
    report::{Keys, Report},
};

/// Explains a saved report (or a recording, replayed first; or a report on
/// stdin). Verdicts are recomputed when an NCCL log is given.
pub fn explain(args: &ExplainArgs) -> Result<i32> {
    let path = match &args.report {
        Some(p) => p.clone(),
        None => {
            // SAFETY: isatty has no preconditions.
            if unsafe { libc::isatty(0) } == 1 {
                return Err(Error::Usage(
                    "explain needs a report (--json FILE of run, attach, validate or replay), a recording, or a report on stdin".into(),
                ));
            }
            PathBuf::from("-")
        }
    };
    let log = args.nccl_log.as_deref().map(input::read_to_string).transpose()?;
    let ucx_log = args.ucx_log.as_deref().map(input::read_to_string).transpose()?;
    let Loaded {
        mut report,
        source,
        damaged,
    } = load(&path, log.as_deref(), ucx_log.as_deref(), args.damage)?;
    if let Some(text) = args.cufile_log.as_deref().map(input::read_to_string).transpose()? {
        let mut log = crate::classify::gds::log::parse(&text);
        crate::classify::gds::log::corroborate(&mut log, &report.paths);
        report.gds.get_or_insert_with(Default::default).log = Some(log);
    }
    // Explained by this build's rules, whatever the saved report held.
    explain::fill(&mut report);
    if args.format == Format::Json {
        let doc = ExplainDoc {
            schema: SCHEMA.into(),
            source,
            verdicts: report.verdicts.clone(),
            paths: report.explain.paths,
            findings: report.explain.findings,
        };
        crate::output::print_json("the explanation", &doc)?;
    } else {
        out!("{}", crate::report::text::verdicts(&report.verdicts, ""));
        out!("{}", crate::report::text::explain(&report));
    }
    super::finish(0, damaged.into_iter().collect())
}

pub const SCHEMA: &str = "gdrtrace.explain/v1";

/// `explain --format json` (`gdrtrace.explain/v1`, docs/formats.md): the
/// verdicts, the staged or unexpected paths, and the rules that fired.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ExplainDoc {
    pub schema: String,
    /// The report or recording explained (`-`: standard input).
    pub source: String,
    pub verdicts: Vec<comm::Verdict>,
    pub paths: Vec<explain::Path>,
    pub findings: Vec<explain::Finding>,
}

/// A report read by [`load`].
pub struct Loaded {
    pub report: Report,
    /// The input's name (`standard input` for `-`).
    pub source: String,
    /// What the command ends with, when a recording had damaged lines the
    /// user did not accept (`replay::damaged`).
    pub damaged: Option<Error>,
}

/// A saved report or a recording (replayed), read into the typed report,
/// its verdicts judged by this build (against `log`, an NCCL log, when
/// given; UCX paths against `ucx_log`), with the input's name. One reader
/// for both kinds (gzip, size limit, regular files): the first line tells a
/// recording from a report.
pub fn load(
    path: &std::path::Path,
    log: Option<&str>,
    ucx_log: Option<&str>,
    read: crate::cli::DamageArgs,
) -> Result<Loaded> {
    let mut input = Input::open(path)?;
    input.refuse_empty()?;
    // A report's schema is its first field: a compact report of any size
    // (one line past MAX_LINE) is told from what is buffered.
    let report_first = match std::io::BufRead::fill_buf(&mut input) {
        Ok(head) => {
            let needle = b"\"gdrtrace.report/";
            head.windows(needle.len()).any(|w| w == needle)
        }
        Err(e) => return Err(input.error(e)),
    };
    // Else the first line tells, put back after (a report of sorted keys
    // has its schema last, and may be one line longer than MAX_LINE).
    let recording = if report_first {
        false
    } else {
        let mut first = Vec::new();
        std::io::BufRead::read_until(
            &mut std::io::Read::take(&mut input, input::MAX_LINE as u64 + 1),
            b'\n',
            &mut first,
        )
        .map_err(|e| input.error(e))?;
        let needle = b"\"gdrtrace.recording/";
        let recording = first.windows(needle.len()).any(|w| w == needle);
        input.unread(first);
        recording
    };
    let mut damaged = None;
    let report = if recording {
        let rec = super::replay::read(&mut input)?;
        damaged = super::replay::damaged(input.name(), &rec, read);
        let (mut report, _) = super::replay::rebuild(&rec, log).map_err(|e| input.error(e))?;
        if let Some(l) = ucx_log {
            report.corroborate_ucx(l);
        }
        report
    } else {
        let keys = Keys::default();
        let mut report = input::parse_json(&mut input, |de| crate::report::read_typed_from(de, &keys))
            .map_err(|e| refused(&input, e))?;
        let notes = rejudge(&mut report, keys.borrow().contains("facts"), log);
        for note in notes {
            errln!("gdrtrace: note: {}: {note}", input.name());
        }
        if let Some(l) = ucx_log {
            report.corroborate_ucx(l);
        }
        report
    };
    Ok(Loaded {
        report,
        source: input.name().to_string(),
        damaged,
    })
}

/// The one-line error of a document `explain` does not read as a report.
fn refused(input: &Input, e: JsonError) -> Error {
    let expected = format!("expected {} or a recording", crate::report::SCHEMA);
    match e {
        JsonError::Input(e) => e,
        JsonError::Data { path, error } if path == "schema" => {
            Error::Input(format!("{} {} ({expected})", input.name(), input::json_message(&error)))
        }
        // Read to its end without one (the report's first field is
        // `schema`: serde names it first among those missing).
        JsonError::Data { error, .. } if input::json_message(&error).starts_with("missing field `schema`") => {
            Error::Input(format!("{} has schema null ({expected})", input.name()))
        }
        JsonError::Data { path, error } => input.error(format!("not a report this gdrtrace reads: `{path}`: {error}")),
    }
}

/// A saved report, read into the typed report, with its verdicts judged
/// again (`rejudge`); the notes say where this build judges differently.
pub fn read_and_rejudge(v: serde_json::Value, log: Option<&str>) -> std::result::Result<(Report, Vec<String>), String> {
    let keys = Keys::default();
    let mut report = crate::report::read_typed_from(&v, &keys)
        .map_err(|e| format!("not a report this gdrtrace reads: `{}`: {}", e.path(), e.inner()))?;
    let notes = rejudge(&mut report, keys.borrow().contains("facts"), log);
    Ok((report, notes))
}

/// The verdicts of a saved report, judged again from the inputs it holds by
/// the function that judged them live (`judge::verdicts`), corroborated
/// with an NCCL log when given. The report's own verdicts are what the live
/// trace printed, and they stay; where this build judges the same evidence
/// differently (a report of another version), a note says so.
pub fn rejudge(r: &mut Report, had_facts: bool, log: Option<&str>) -> Vec<String> {
    let mut notes = Vec::new();
    let mut inputs = crate::report::judged::inputs_of(r);
    if !had_facts {
        inputs.facts = None;
    }
    for v in judge::verdicts(&inputs) {
        match r.verdicts.iter().find(|c| c.pid == v.pid) {
            Some(c) if c.transport != v.transport => notes.push(format!(
                "pid {}: the report says {}, this gdrtrace judges the same evidence {}",
                v.pid,
                c.transport.name(),
                v.transport.name()
            )),
            None => notes.push(format!(
                "pid {}: no verdict in the report, this gdrtrace judges it {}",
                v.pid,
                v.transport.name()
            )),
            Some(_) => {}
        }
    }
    let Some(log) = log else { return notes };
    crate::report::judged::corroborate_verdicts(r, log);
    r.nccl_log = Some(crate::report::judged::nccl_log_agreement(log, r));
    notes
}
