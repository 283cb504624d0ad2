//! Command-line interface.
mod bench;
mod compare;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

pub use self::bench::*;
pub use self::compare::*;
use crate::{
    drive::{
        copy_loop::CopyLoopOpts, cuda_copy::CudaCopyOpts, gds::GdsOpts, nccl::NcclOpts, nixl::NixlOpts,
        pin_churn::PinChurnOpts, syscalls::SyscallsOpts, tcp::TcpOpts, ucx::UcxOpts, verbs::VerbsOpts,
    },
    units::parse_duration,
};

const EXAMPLES: &str = "\
Examples:
  gdrtrace doctor                      # what this kernel lets the tracer do
  gdrtrace validate                    # run the workloads this machine supports, traced
  gdrtrace run -- ib_write_bw -d rxe0  # trace a command and its children
  gdrtrace run --json out.json -- ./train.sh
  gdrtrace attach -p 4242,4243 --interval 1s --duration 60s
  gdrtrace top --pid 4242              # the same targets, as a live full-screen view
  gdrtrace run --record job.rec -- ./train.sh && gdrtrace replay job.rec
  gdrtrace explain out.json --nccl-log nccl.log  # root causes of staged paths
  gdrtrace run --ucx-log ucx.log -- ./launch_ucx_job.sh   # UCX paths, checked against UCX_PROTO_INFO lines
  gdrtrace drive ucx --mode cuda-no-ipc --size 64M   # ucx_perftest server and client, forced staging
  gdrtrace drive pin-churn --iterations 500
  gdrtrace baseline record --out base.json     # validate, stored with this machine's profile
  gdrtrace compare base.json current.json --format markdown --html compare.html
  gdrtrace serve --listen :9464               # node agent: Prometheus metrics of every GPU/RDMA process
";

const RUN_HELP: &str = "\
Signals and exit status:
  The exit status is the command's (128+N when signal N ended it).
  SIGINT or SIGTERM is passed on to the command (a Ctrl-C from the terminal
  already reached it) and tracing goes on until it exits; a second signal
  prints the report at once and exits 128+signal, leaving the command running.
  --duration: at the deadline the report is printed and the command (with
  every process traced with it) gets SIGTERM, SIGKILL 10 s later if still
  running; the exit status is the command's own.
  Before the command starts: 126 not executable, 127 not found, 2 bad
  usage or an output file that cannot be written (nothing is run then).
";

#[derive(Debug, Parser)]
#[command(name = "gdrtrace", version = crate::version::VERSION, about = "eBPF transport tracer for GPU communication: which path did each transfer take?", after_help = EXAMPLES)]
pub struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The bound on input files, on the commands that read them.
#[derive(Debug, Clone, clap::Args)]
pub struct InputArgs {
    /// Largest input file read (reports, recordings, baselines, thresholds,
    /// NCCL and UCX logs), counted after gzip decompression (e.g. 512M, 4G).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size, default_value = "1G")]
    pub max_input_size: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report what this host supports: kernel, lockdown, BTF, which BPF
    /// program kinds load and attach, capabilities, probe targets.
    Doctor(DoctorArgs),
    /// Trace a command and its children, then print the report.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Attach to running processes (and their descendants) and trace them
    /// until Ctrl-C, --duration, or the last target exits.
    Attach(AttachArgs),
    /// A full-screen live view of traced processes (as `attach` traces
    /// them): per process and communicator the verdict and its basis, moved
    /// and staged bytes/s, registrations/s, VmPin, the hot operations, and
    /// the evidence and cause of the selected row (docs/top.md).
    #[command(after_help = TOP_HELP)]
    Top(TopArgs),
    /// Run the workloads this machine supports under the tracer and check
    /// that the tracer's counts match the workloads' own.
    Validate(ValidateArgs),
    /// Print the GPU/NIC topology: GPUs and RDMA NICs, the NVLink or PCIe
    /// path of each pair, ACS, IOMMU, link state, BAR1 use, NIC counters.
    Topo(DoctorArgs),
    /// Explain a saved report or a recording: transport verdicts, staged or
    /// unexpected paths and their root causes (one rule table).
    Explain(ExplainArgs),
    /// Rebuild the report (and explanation) from a recording made with
    /// --record, through the same aggregation and classification code.
    Replay(ReplayArgs),
    /// One job across nodes: join the reports or recordings of several
    /// nodes (or ranks) per NCCL communicator, by the id every rank passed
    /// to ncclCommInitRank (NCCL's commId): ranks, hosts, transports, and
    /// which ranks fell back and why.
    #[command(after_help = JOB_HELP)]
    Job(JobArgs),
    /// Run a workload (without tracing).
    #[command(subcommand)]
    Drive(Drive),
    /// Record a baseline: reports with the hardware/software profile they
    /// were made on (docs/compare.md).
    #[command(subcommand)]
    Baseline(BaselineCmd),
    /// Compare a run against a baseline; exit 0 no regression, 1 regression,
    /// 2 could not compare.
    Compare(CompareArgs),
    /// Node agent: find every GPU or RDMA process as it starts, trace it
    /// with the cheap plan, and serve Prometheus metrics (docs/serve.md).
    Serve(crate::serve::ServeArgs),
    /// The tracer's own cost: pipeline throughput and uprobe detach time
    /// (docs/perf.md; `cargo xtask bench` runs the whole set).
    #[command(subcommand)]
    Bench(Bench),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell) on stdout, e.g. `gdrtrace completions bash >
    /// /usr/share/bash-completion/completions/gdrtrace`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff) on stdout (`gdrtrace man | man -l -`),
    /// or write one page per command into a directory.
    Man(ManArgs),
}

impl Command {
    /// `--max-input-size` of a command that reads input files.
    pub fn max_input_size(&self) -> Option<u64> {
        let input = match self {
            Command::Run(a) => &a.trace.input,
            Command::Attach(a) => &a.trace.input,
            Command::Validate(a) => &a.trace.input,
            Command::Baseline(BaselineCmd::Record(a)) => &a.validate.trace.input,
            Command::Top(a) => &a.input,
            Command::Explain(a) => &a.input,
            Command::Replay(a) => &a.input,
            Command::Job(a) => &a.input,
            Command::Compare(a) => &a.input,
            Command::Doctor(_)
            | Command::Topo(_)
            | Command::Drive(_)
            | Command::Serve(_)
            | Command::Bench(_)
            | Command::Completions(_)
            | Command::Man(_) => return None,
        };
        Some(input.max_input_size)
    }
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write gdrtrace.1 and a page per command (gdrtrace-run.1, ...) into
    /// DIR instead of printing gdrtrace.1.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// What to print on stdout (json: docs/formats.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The same as --format json (deprecated).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

impl DoctorArgs {
    /// `--format`, with the deprecated `--json` switch read as `--format json`.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}

/// What a command prints on stdout: text for people, or one JSON document
/// with a versioned schema (docs/formats.md). Files named by flags
/// (`--json FILE`, `--out FILE`) are outputs of their own.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Stop tracing after this long (e.g. 500ms, 10s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// What to print on stdout: the report as text or JSON (`validate`:
    /// `gdrtrace.validate/v1`, `baseline record`: `gdrtrace.baseline-record/v1`;
    /// docs/formats.md). With json, the traced command's stdout goes to stderr.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Event ring buffer size in bytes (a power of two, at least one page).
    #[arg(long, default_value_t = tracer_common::RINGBUF_BYTES as u64)]
    pub ringbuf_bytes: u64,
    /// NCCL log (NCCL_DEBUG=INFO output) to corroborate the verdicts with;
    /// read at the end, but it must exist when tracing starts (create it
    /// first when the job writes it: `touch nccl.log`).
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// UCX log (UCX_PROTO_INFO=y and/or UCX_LOG_LEVEL=info output) to
    /// corroborate the UCX paths with.
    #[arg(long, value_name = "FILE")]
    pub ucx_log: Option<PathBuf>,
    /// Record the event stream (and the process facts read while tracing)
    /// to FILE as JSON lines (`gdrtrace.recording/v1`), for `gdrtrace replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Write one JSON line per transfer (copy, registration, pinned batch,
    /// communicator) with its verdict and evidence to FILE.
    #[arg(long, value_name = "FILE")]
    pub transfers: Option<PathBuf>,
    /// Write the timeline to FILE as Chrome Trace Event JSON (Perfetto,
    /// chrome://tracing, speedscope): a slice per call with its verdict and
    /// evidence, a track per process and thread, bytes/s counters (docs/timeline.md).
    #[arg(long, value_name = "FILE")]
    pub trace_event: Option<PathBuf>,
    /// Do not attach uprobes to installed libcuda/libibverbs/libnccl up front
    /// (libraries mapped by traced processes are still attached).
    #[arg(long)]
    pub no_installed_libraries: bool,
    /// How collectives, group and UCX data calls (a uprobe trap each) are
    /// counted: `auto` (run, attach: every call while each process makes
    /// at most 1000 a second; above, the probes are duty-cycled and the
    /// off phases estimated from the rates around them and marked as such),
    /// `auto:HZ`, `exact` (validate), or `ON/PERIOD` (e.g. 1s/10s).
    #[arg(long, value_name = "MODE")]
    pub collectives: Option<crate::sampling::Mode>,
    #[command(flatten)]
    pub input: InputArgs,
    /// Ask NCCL's RAS service (NCCL 2.24+) once, when the first NCCL
    /// communicator whose set-up was not traced is seen, for its identity
    /// (commId, rank): at HOST:PORT, default localhost:28028. Off unless
    /// given: RAS queries run through every process of the job (docs/job.md).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, require_equals = true,
          default_missing_value = crate::identity::ras::DEFAULT_ADDR)]
    pub nccl_ras: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The command to trace, after `--` (flags before `--` are gdrtrace's:
    /// an unknown one is an error, never taken for the command).
    /// Arguments are passed as they are, UTF-8 or not.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// How a command reads recordings (`replay`, `explain`, `job`, `top --replay`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct DamageArgs {
    /// Accept a recording with damaged lines (not text, not JSON, nested
    /// too deep, no record type): each is still named on stderr and counted
    /// in the report's loss, and the command exits 0 (without it, 2).
    #[arg(long)]
    pub skip_damaged: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A JSON report from `run`, `attach`, `validate` or `replay` (--json
    /// FILE), or a recording (--record FILE); the report is read from stdin
    /// when omitted.
    pub report: Option<PathBuf>,
    /// NCCL log (NCCL_DEBUG=INFO output) to corroborate the verdicts with.
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// UCX log (UCX_PROTO_INFO=y / UCX_LOG_LEVEL=info output) to
    /// corroborate the UCX paths with.
    #[arg(long, value_name = "FILE")]
    pub ucx_log: Option<PathBuf>,
    /// cuFile's log (cufile.log) to corroborate the file paths with.
    #[arg(long, value_name = "FILE")]
    pub cufile_log: Option<PathBuf>,
    /// What to print on stdout (json: `gdrtrace.explain/v1`, docs/formats.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub damage: DamageArgs,
}

const JOB_HELP: &str = "Examples:
  gdrtrace run --json node0.json -- python train.py     # on each node
  gdrtrace attach --nccl-ras --pid 4242 --json n0.json  # after set-up: ask NCCL's RAS
  gdrtrace job node0.json node1.json                    # one view per communicator
  gdrtrace job --format json node*.json rank*.rec.gz
  gdrtrace job --prometheus http://prometheus:9090 --match 'namespace=\"team-a\"'";

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// Reports (`--json FILE` of run, attach, validate or replay) and/or
    /// recordings (`--record FILE`), one per node or rank.
    #[arg(
        required_unless_present = "prometheus",
        conflicts_with = "prometheus",
        value_name = "FILE"
    )]
    pub files: Vec<PathBuf>,
    /// Read `gdrtrace serve`'s series from this Prometheus (http://HOST:PORT)
    /// instead of files: every node the fleet watches.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Label matchers the series must have (PromQL, e.g.
    /// `namespace="team-a",node=~"gpu-.*"`), with `--prometheus`.
    #[arg(long = "match", value_name = "SELECTOR", default_value = "", requires = "prometheus")]
    pub selector: String,
    /// Output format (json: schema gdrtrace.job/v1, docs/job.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub damage: DamageArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A recording (`--record FILE` of run, attach or validate).
    pub recording: PathBuf,
    /// Write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Format of the report printed on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// NCCL log (NCCL_DEBUG=INFO output) to corroborate the verdicts with.
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// UCX log (UCX_PROTO_INFO=y / UCX_LOG_LEVEL=info output) to
    /// corroborate the UCX paths with.
    #[arg(long, value_name = "FILE")]
    pub ucx_log: Option<PathBuf>,
    /// Write one JSON line per transfer to FILE.
    #[arg(long, value_name = "FILE")]
    pub transfers: Option<PathBuf>,
    /// Write the timeline to FILE as Chrome Trace Event JSON (as `run`'s).
    #[arg(long, value_name = "FILE")]
    pub trace_event: Option<PathBuf>,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub damage: DamageArgs,
}

/// Which running processes to trace (`attach`, `top`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TargetArgs {
    /// Process ids to attach to (comma-separated), each with its descendants.
    #[arg(short = 'p', long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// A cgroup v2 directory (absolute, or relative to /sys/fs/cgroup), e.g. a pod's.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Every running process with this command name.
    #[arg(long)]
    pub comm: Option<String>,
    /// Trace every process on the machine.
    #[arg(long)]
    pub all: bool,
}

impl TargetArgs {
    /// Whether any target flag was given.
    pub fn any(&self) -> bool {
        !self.pid.is_empty() || self.cgroup.is_some() || self.comm.is_some() || self.all
    }
}

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Print a compact per-process summary every interval (e.g. 1s).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<std::time::Duration>,
    /// Stream the interval records as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
}

const TOP_HELP: &str = "\
Keys:
  up/down, j/k   select a row          enter, d   detail pane (evidence, cause;
                                                   PgUp/PgDn scroll it)
  s / S          next / previous sort  r          reverse the order
  p, space       pause the display (tracing goes on)
  q, Esc, Ctrl-C quit (the terminal is restored; --json, --record and
                 --trace-event are written at exit)
Without a terminal, top says so and exits 2: use `gdrtrace attach --interval 1s`.

Examples:
  gdrtrace top --pid 4242              # a job and its descendants
  gdrtrace top --all --json top.json   # every process; the report at exit
  gdrtrace top --replay job.rec.gz     # a recording, played into the same view";

#[derive(Debug, clap::Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Play a recording (`--record FILE` of run, attach, validate or top)
    /// into the view instead of tracing.
    #[arg(long, value_name = "RECORDING", conflicts_with_all = ["pid", "cgroup", "comm", "all", "record", "collectives", "duration"])]
    pub replay: Option<PathBuf>,
    /// How fast a recording plays (`--replay`): 1 is the pace it was
    /// recorded at, 10 ten times faster.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed, requires = "replay")]
    pub speed: f64,
    /// How often the view is refreshed (e.g. 500ms, 2s).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: std::time::Duration,
    /// Stop tracing after this long; the view then quits.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Write the JSON report to FILE at exit.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Record the event stream to FILE (`gdrtrace.recording/v1`), for
    /// `replay` and `top --replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Write the timeline to FILE as Chrome Trace Event JSON at exit.
    #[arg(long, value_name = "FILE")]
    pub trace_event: Option<PathBuf>,
    /// NCCL log to corroborate the verdicts of the report at exit with
    /// (and of the replayed recording's view).
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// How collectives are counted (as `attach --collectives`).
    #[arg(long, value_name = "MODE")]
    pub collectives: Option<crate::sampling::Mode>,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub damage: DamageArgs,
}

/// A positive, finite playback factor.
fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a playback factor (a number above 0, e.g. 1, 0.5, 10)"
        )),
    }
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Exit 3 when a kernel probe family is unavailable (for VM and
    /// regression runs where kernel probes are expected).
    #[arg(long)]
    pub require_kernel_probes: bool,
    /// Iterations of the pin-churn workload (at least 1).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Leave out the UCX workloads (ucx_perftest), e.g. where a dedicated
    /// check covers them.
    #[arg(long)]
    pub no_ucx: bool,
}

#[derive(Debug, Subcommand)]
pub enum Drive {
    /// io_uring fixed-buffer registration churn and O_DIRECT I/O (CPU only).
    PinChurn(PinChurnOpts),
    /// RDMA verbs: MR registration churn and RDMA WRITE between two RC QPs.
    Verbs(VerbsOpts),
    /// CUDA copies: H2D/D2H from pinned and pageable memory, D2D, and
    /// GPU->GPU with and without peer access, over a size sweep.
    CudaCopy(CudaCopyOpts),
    /// NCCL all-reduce or all-gather across the local GPUs, one process per
    /// GPU, over a size sweep (or for --duration).
    Nccl(NcclOpts),
    /// getppid(2) in a loop: the pipeline benchmark's event source.
    Syscalls(SyscallsOpts),
    /// ucx_perftest as a server and a client on this host, with host or
    /// CUDA memory, in a forced transport mode (UCX_TLS).
    Ucx(UcxOpts),
    /// A NIXL transfer (its UCX backend) between two processes: WRITE
    /// (push), READ (pull), or both; needs a Python that imports NIXL.
    Nixl(NixlOpts),
    /// Small asynchronous copies through a libcuda (the stand-in by
    /// default), host to device and back: `bench copies`' job.
    CopyLoop(CopyLoopOpts),
    /// One TCP connection over loopback (sender and receiver in this
    /// process), with the kernel's count of its retransmitted segments.
    Tcp(TcpOpts),
    /// GPUDirect Storage: a GPU buffer written to a file and read back
    /// through libcufile (cuFileWrite, cuFileRead), then checked.
    Gds(GdsOpts),
}

/// A usage error as one message: clap's first line, then what it adds to
/// help (a similar flag, subcommand or value; the possible values), indented
/// beneath; the usage block is left to `--help`, which the first line names.
pub fn usage_error(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let first = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ");
    let mut out = format!("gdrtrace: {first} (see 'gdrtrace --help')");
    for l in lines
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        out.push_str("\n  ");
        out.push_str(l);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).expect_err("a usage error");
        usage_error(&e.render().to_string())
    }

    #[test]
    fn usage_errors_keep_clap_suggestions_without_the_usage_block() {
        let e = error_of(&["gdrtrace", "atach"]);
        assert!(e.starts_with("gdrtrace: unrecognized subcommand 'atach'"), "{e}");
        assert!(e.contains("\n  tip: a similar subcommand exists: 'attach'"), "{e}");
        assert!(!e.contains("Usage:") && !e.contains("For more information"), "{e}");
        let e = error_of(&["gdrtrace", "attach", "--pidd", "1"]);
        assert!(e.contains("tip: a similar argument exists: '--pid'"), "{e}");
        let e = error_of(&["gdrtrace", "doctor", "--format", "jsn"]);
        assert!(e.contains("[possible values: text, json]"), "{e}");
        assert!(e.contains("tip: a similar value exists: 'json'"), "{e}");
        // Without a suggestion: one line.
        let e = error_of(&["gdrtrace", "attach", "--interval", "x"]);
        assert_eq!(e.lines().count(), 1, "{e}");
    }

    #[test]
    fn max_input_size_is_only_on_commands_that_read_inputs() {
        for readers in [
            &["gdrtrace", "explain", "r.json", "--max-input-size", "4K"][..],
            &["gdrtrace", "replay", "r.rec", "--max-input-size", "4K"],
            &["gdrtrace", "compare", "a", "b", "--max-input-size", "4K"],
            &["gdrtrace", "job", "a", "--max-input-size", "4K"],
            &["gdrtrace", "run", "--max-input-size", "4K", "--", "true"],
            &["gdrtrace", "attach", "-p", "1", "--max-input-size", "4K"],
            &["gdrtrace", "top", "--replay", "r.rec", "--max-input-size", "4K"],
        ] {
            let cli = Cli::try_parse_from(readers).unwrap_or_else(|e| panic!("{readers:?}: {e}"));
            assert_eq!(cli.command.max_input_size(), Some(4096), "{readers:?}");
        }
        for others in [
            &["gdrtrace", "doctor", "--max-input-size", "4K"][..],
            &["gdrtrace", "topo", "--max-input-size", "4K"],
            &["gdrtrace", "serve", "--max-input-size", "4K"],
            &["gdrtrace", "drive", "pin-churn", "--max-input-size", "4K"],
        ] {
            let e = Cli::try_parse_from(others).expect_err("not a flag of this command");
            assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{others:?}");
        }
    }

    #[test]
    fn attach_and_top_take_dash_p() {
        for cmd in ["attach", "top"] {
            let cli = Cli::try_parse_from(["gdrtrace", cmd, "-p", "4242,4243"]).expect("parses");
            let pids = match cli.command {
                Command::Attach(a) => a.targets.pid,
                Command::Top(a) => a.targets.pid,
                _ => unreachable!(),
            };
            assert_eq!(pids, [4242, 4243], "{cmd}");
        }
    }
}
