//! `gdrtrace compare BASELINE CURRENT`: exit 0 no regression, 1 regression,
//! 2 could not compare (with one line on stderr saying why).
use crate::{
    cli::{CompareArgs, CompareFormat},
    compare::{self, Thresholds, html, render},
    error::{Error, Result, exit},
    input,
    output::OutputFile,
};

/// Runs the comparison; every failure to compare is one line and exit 2
/// (`Error::Input`/`Error::Usage`).
pub fn compare(args: &CompareArgs) -> Result<i32> {
    let thresholds = match &args.thresholds {
        Some(p) => {
            Thresholds::parse(&input::read_to_string(p)?).map_err(|e| Error::Input(format!("{}: {e}", p.display())))?
        }
        None => Thresholds::default(),
    };
    let base = compare::load(&args.baseline)?;
    if base.plain_report {
        return Err(Error::Input(format!(
            "{} is a report, not a baseline: record one with `gdrtrace baseline record --from {}`",
            base.name, base.name
        )));
    }
    let cur = compare::load(&args.current)?;
    let present: Vec<&str> = base
        .baseline
        .runs
        .iter()
        .chain(&cur.baseline.runs)
        .map(|r| r.workload.as_str())
        .collect();
    if let Some(p) = &args.thresholds {
        thresholds
            .check_workloads(&present)
            .map_err(|e| Error::Input(format!("{}: {e}", p.display())))?;
    }
    // Opened once the inputs are known good: a comparison that cannot be
    // made leaves no empty page behind.
    let page = OutputFile::open_opt("--html", args.html.as_deref())?;
    let c = compare::compare(&base, &cur, &thresholds, args.allow_profile_change).map_err(Error::Input)?;
    match args.format {
        CompareFormat::Text => out!("{}", render::text(&c)),
        CompareFormat::Markdown => out!("{}", render::markdown(&c)),
        CompareFormat::Html => out!("{}", html::page(&c)),
    };
    if let Some(f) = page
        && let Err(e) = f.write(html::page(&c).as_bytes())
    {
        // The verdict is printed; the page is in the fallback file. Exit 2:
        // the command could not do all it was asked.
        errln!("gdrtrace: {}", crate::error::describe(&e));
        return Ok(exit::USAGE);
    }
    Ok(c.exit_code())
}
