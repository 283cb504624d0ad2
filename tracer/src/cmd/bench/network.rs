//! `bench network`: what the network probes (`catalog::NETWORK`: the TCP
//! send that names each socket's process, the retransmission and the close
//! tracepoints) cost a clean TCP job. Each round traces `drive tcp` three
//! times, once by a session with the lifecycle and network probes and twice
//! by a session with the lifecycle probes only (the control, and its twin:
//! the off/off pair says how far two runs of one arm differ), in rotating
//! order; the workload times itself.
use super::*;
use crate::drive::tcp::TcpSummary;

#[derive(Serialize)]
struct NetworkResult {
    bytes: u64,
    chunk: u64,
    rounds: u32,
    /// The transfer's elapsed and CPU seconds, per arm and round.
    elapsed_s: Arms,
    cpu_s: Arms,
    /// The control's twin against the control: the noise of the ratios.
    elapsed_s_off_off: Arms,
    cpu_s_off_off: Arms,
    /// Sends the network probes counted per round (the send hook's hits),
    /// and retransmissions they counted in all.
    sends_counted: u64,
    retransmits: u64,
}

#[derive(Serialize)]
struct Arms {
    network: Vec<f64>,
    control: Vec<f64>,
    median_network: f64,
    median_control: f64,
    ratio_of_medians: f64,
    median_of_ratios: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Arms {
    fn of(network: Vec<f64>, control: Vec<f64>) -> Self {
        let per: Vec<f64> = network.iter().zip(&control).map(|(n, c)| n / c).collect();
        let (mn, mc) = (median(network.clone()), median(control.clone()));
        Arms {
            median_network: mn,
            median_control: mc,
            ratio_of_medians: mn / mc,
            median_of_ratios: median(per),
            network,
            control,
        }
    }
}

/// One traced transfer: its summary, and the sends and retransmissions the
/// report's fabric section counted for it.
fn round(a: &crate::cli::BenchNetworkArgs, network: bool, summary: &std::path::Path) -> Result<(TcpSummary, u64, u64)> {
    let mut families = vec![Family::Sched];
    if network {
        families.push(Family::Network);
    }
    let session = Session::open(&SessionOptions {
        load: LoadOptions {
            targets_only: true,
            ..LoadOptions::default()
        },
        families: Some(families),
        installed_libraries: false,
        collectives: crate::sampling::Mode::Exact,
    })?;
    let mut trace = Trace::new(session);
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let argv: Vec<String> = [
        exe.to_string_lossy().as_ref(),
        "drive",
        "tcp",
        "--bytes",
        &a.bytes.to_string(),
        "--chunk",
        &a.chunk.to_string(),
        "--summary",
        &summary.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rt = super::super::runtime()?;
    rt.block_on(async {
        let gated = spawn::spawn_gated(&argv, spawn::CommandStdout::Inherit)?;
        trace.add_target(gated.pid, None)?;
        let mut child = gated.release()?;
        trace
            .run_until(async move {
                child.exited().await;
            })
            .await
    })?;
    let report = trace.report(argv, None)?;
    let s: TcpSummary = std::fs::read_to_string(summary)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| Error::Workload("drive tcp wrote no summary".into()))?;
    let row = report.fabric.tcp_of(s.pid);
    Ok((s, row.map_or(0, |t| t.sends), row.map_or(0, |t| t.retransmits)))
}

pub(super) fn network(a: &crate::cli::BenchNetworkArgs) -> Result<i32> {
    if a.rounds == 0 || a.bytes == 0 {
        return Err(Error::Usage("--rounds and --bytes must be at least 1".into()));
    }
    let summary = std::env::temp_dir().join(format!("gdrtrace-bench-network-{}.json", std::process::id()));
    // Per arm: the network probes, the control, the control's twin.
    let (mut elapsed, mut cpu) = (
        [Vec::new(), Vec::new(), Vec::new()],
        [Vec::new(), Vec::new(), Vec::new()],
    );
    let (mut sends, mut retransmits) = (0, 0);
    for r in 0..a.rounds as usize {
        for k in 0..3 {
            let arm = (r + k) % 3;
            let (s, n, re) = round(a, arm == 0, &summary)?;
            elapsed[arm].push(s.elapsed_s);
            cpu[arm].push(s.cpu_s);
            if arm == 0 {
                sends = n;
                retransmits += re;
            }
        }
    }
    let [e_net, e_control, e_twin] = elapsed;
    let [c_net, c_control, c_twin] = cpu;
    let _ = std::fs::remove_file(&summary);
    if sends == 0 {
        return Err(Error::Workload(
            "the network probes counted no send: they did not attach here (see `gdrtrace doctor`)".into(),
        ));
    }
    let r = NetworkResult {
        bytes: a.bytes,
        chunk: a.chunk,
        rounds: a.rounds,
        elapsed_s: Arms::of(e_net, e_control.clone()),
        cpu_s: Arms::of(c_net, c_control.clone()),
        elapsed_s_off_off: Arms::of(e_twin, e_control),
        cpu_s_off_off: Arms::of(c_twin, c_control),
        sends_counted: sends,
        retransmits,
    };
    let line = format!(
        "bench network: {} rounds of {} B: elapsed with the network probes / without {:.3} (median of ratios {:.3}; off/off {:.3}), CPU {:.3} ({:.3}; off/off {:.3}); {} sends counted a round, {} retransmissions",
        r.rounds,
        r.bytes,
        r.elapsed_s.ratio_of_medians,
        r.elapsed_s.median_of_ratios,
        r.elapsed_s_off_off.median_of_ratios,
        r.cpu_s.ratio_of_medians,
        r.cpu_s.median_of_ratios,
        r.cpu_s_off_off.median_of_ratios,
        r.sends_counted,
        r.retransmits
    );
    print(&r, line)
}
