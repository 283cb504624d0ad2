//! `gdrtrace baseline` and `gdrtrace compare`: their arguments.
use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

use super::{InputArgs, ValidateArgs};

#[derive(Debug, Subcommand)]
pub enum BaselineCmd {
    /// Run `validate` (or take a saved report with --from) and store its
    /// reports with this machine's profile.
    Record(BaselineRecordArgs),
}

#[derive(Debug, clap::Args)]
pub struct BaselineRecordArgs {
    /// Where to write the baseline.
    #[arg(long, value_name = "FILE", default_value = "gdrtrace-baseline.json")]
    pub out: PathBuf,
    /// Take this report (from `run`, `attach` or `validate --json`) instead
    /// of running validate.
    #[arg(long, value_name = "REPORT.json", conflicts_with_all = ["require_kernel_probes", "json", "duration", "repeat"])]
    pub from: Option<PathBuf>,
    /// Run validate this many times and keep every run of each workload:
    /// `compare` judges measured numbers against the spread they show
    /// (docs/compare.md).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Options of the validate run.
    #[command(flatten)]
    pub validate: ValidateArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum CompareFormat {
    Text,
    Markdown,
    Html,
    /// `gdrtrace.compare/v1` (docs/formats.md): every metric's verdict.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline (`gdrtrace baseline record`).
    pub baseline: PathBuf,
    /// The run to judge: a baseline file or a plain report.
    pub current: PathBuf,
    /// TOML file overriding the default thresholds (docs/compare.md).
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
    /// Compare even when the hardware/software profiles differ; every
    /// difference is listed first.
    #[arg(long)]
    pub allow_profile_change: bool,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = CompareFormat::Text)]
    pub format: CompareFormat,
    /// Also write the HTML page (with plots) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub input: InputArgs,
}
