//! `gdrtrace compare BASELINE CURRENT`: exit 0 no regression, 1 regression,
//! 2 could not compare (with one line on stderr saying why).
use crate::{
    cli::{CompareArgs, CompareFormat},
    compare::{self, Thresholds, html, render},
};

fn run(args: &CompareArgs) -> Result<i32, String> {
    let thresholds = match &args.thresholds {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            Thresholds::parse(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => Thresholds::default(),
    };
    let base = compare::load(&args.baseline)?;
    if base.plain_report {
        return Err(format!(
            "{} is a report, not a baseline: record one with `gdrtrace baseline record --from {}`",
            base.name, base.name
        ));
    }
    let cur = compare::load(&args.current)?;
    let c = compare::compare(&base, &cur, &thresholds, args.allow_profile_change)?;
    if let Some(path) = &args.html {
        std::fs::write(path, html::page(&c)).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    match args.format {
        CompareFormat::Text => print!("{}", render::text(&c)),
        CompareFormat::Markdown => print!("{}", render::markdown(&c)),
        CompareFormat::Html => print!("{}", html::page(&c)),
    }
    Ok(c.exit_code())
}

/// Runs the comparison; every failure to compare is one line and exit 2.
pub fn compare(args: &CompareArgs) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gdrtrace: {e}");
            2
        }
    }
}
