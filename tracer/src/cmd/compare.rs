//! `gdrtrace compare BASELINE CURRENT`: exit 0 no regression, 1 regression,
//! 2 could not compare (with one line on stderr saying why).
use crate::{
    cli::{CompareArgs, CompareFormat},
    compare::{self, Thresholds, html, render},
    error::{Error, Result, exit},
    input,
    output::{self, Named, OutputFile},
};

/// Runs the comparison; every failure to compare is one line and exit 2
/// (`Error::Input`/`Error::Usage`).
pub fn compare(args: &CompareArgs) -> Result<i32> {
    output::check_distinct(&[
        Named::input("BASELINE", Some(&args.baseline)),
        Named::input("CURRENT", Some(&args.current)),
        Named::input("--thresholds", args.thresholds.as_deref()),
        Named::output("--html", args.html.as_deref()),
    ])?;
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
        CompareFormat::Json => crate::output::document(
            &serde_json::to_string_pretty(&compare::json::document(&c))
                .map_err(|e| Error::Workload(format!("encoding the comparison: {e}")))?,
        ),
    };
    let mut code = c.exit_code();
    if let Some(f) = page
        && let Err(e) = f.write(html::page(&c).as_bytes())
    {
        // The verdict is printed; the page is in the fallback file. Exit 2:
        // the command could not do all it was asked.
        errln!("gdrtrace: {}", crate::error::describe(&e));
        code = exit::USAGE;
    }
    // A verdict nobody could read (stdout full or failing) is not a
    // regression: exit 2, with the write error (printed by main).
    output::flush_stdout();
    if output::stdout_error().is_some() {
        code = exit::USAGE;
    }
    Ok(code)
}
