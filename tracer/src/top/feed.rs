//! The one adapter between the tracer and the view: a judged report of the
//! trace so far (`Trace::snapshot` live, a partly fed aggregator on
//! `--replay`) becomes a [`Frame`] of rows, with rates from the difference
//! to the previous report. Everything `top` shows comes from the report,
//! through this file only: the verdicts and their evidence
//! (`report.verdicts`, judged by `judge::verdicts`), explain's causes
//! (`report.explain`), staging and registrations (`report.staging`,
//! `report.processes`), and the in-kernel latency slots
//! (`report.kernel_histograms`). So the view says what `attach`'s report
//! and `explain` would say of the same window.
use std::collections::BTreeMap;

use crate::report::{Bucket, Report};

/// A row's identity: the process, and the communicator for a
/// communicator's row (its local handle, as the report names it).
pub type Key = (u32, Option<String>);

/// One row of the view: a process, or one of its NCCL communicators.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub pid: u32,
    /// The process's command name, raw (the view escapes it).
    pub comm: String,
    /// The communicator's handle, for a communicator's row.
    pub communicator: Option<String>,
    /// The communicator's identity across ranks (NCCL's `commId`).
    pub ident: Option<String>,
    /// This process's rank in the communicator, of how many (`0/2`).
    pub rank: Option<String>,
    /// The transport verdict (`-`: no GPU communication seen).
    pub verdict: String,
    pub host_staged: bool,
    /// `set-up` or `steady-state`: what decided the verdict.
    pub basis: Option<&'static str>,
    /// NCCL's network path (`NET/Socket`, `NET/IB`, `NET/IB/GDRDMA`).
    pub net: Option<&'static str>,
    pub moved_per_s: f64,
    pub staged_per_s: f64,
    /// Staged bytes over moved bytes, over the trace so far (None: nothing moved).
    pub staged_share: Option<f64>,
    pub registrations_per_s: f64,
    /// The highest VmPin seen (kB).
    pub vm_pin_kib: u64,
    /// The busiest operations of the interval, busiest first.
    pub ops: Vec<OpRate>,
    pub exited: bool,
    /// The figures include the duty cycle's estimates (`~`).
    pub estimated: bool,
}

impl Row {
    pub fn key(&self) -> Key {
        (self.pid, self.communicator.clone())
    }
}

/// An operation's calls per second, with the p99 of its latency.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRate {
    pub op: String,
    pub calls_per_s: f64,
    /// The upper bound of the p99 slot of the in-kernel log2 histogram
    /// (every traced process's calls of this op; this interval's where it
    /// had calls, else the trace's so far).
    pub p99_ns_at_most: Option<u64>,
}

/// A rule of `explain` that fired for a process (or the host).
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    pub rule: String,
    pub cause: String,
    pub evidence: Vec<String>,
}

/// What the detail pane shows of a process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detail {
    pub evidence: Vec<String>,
    /// The verdict's cause (why a fallback happened), when known.
    pub cause: Option<String>,
    pub other_hosts: Option<String>,
    pub nccl_log: Option<String>,
    /// Explain's root causes for this process.
    pub causes: Vec<Cause>,
    /// Staged or unexpected paths explain lists for it.
    pub paths: Vec<String>,
    /// Every operation: calls so far, calls/s, p99.
    pub ops: Vec<(String, u64, OpRate)>,
    pub moved_bytes: u64,
    pub staged_bytes: u64,
    pub registrations: u64,
    pub transports: Vec<(String, u64)>,
}

/// One refresh of the view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    /// Seconds traced (the report's `duration_s`; recording time on replay).
    pub t_s: f64,
    /// Seconds since the previous frame (0: the first, whose rates are
    /// averages over the trace so far).
    pub interval_s: f64,
    /// Process rows in pid order, each followed by its communicators' rows.
    pub rows: Vec<Row>,
    pub details: BTreeMap<u32, Detail>,
    /// Causes explain found for the host as a whole.
    pub host_causes: Vec<Cause>,
    /// What was lost, when something was (`None`: nothing).
    pub loss: Option<String>,
}

/// Totals of one row at the previous frame.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    moved: u64,
    staged: u64,
    registrations: u64,
}

#[derive(Clone, Debug, Default)]
struct Prev {
    t_s: f64,
    rows: BTreeMap<Key, Totals>,
    calls: BTreeMap<u32, BTreeMap<String, u64>>,
    slots: BTreeMap<String, Vec<Bucket>>,
}

/// Makes frames from successive reports of one trace.
#[derive(Debug, Default)]
pub struct Feed {
    prev: Option<Prev>,
}

/// How many operations a row shows.
const ROW_OPS: usize = 3;

/// The upper bound of the slot holding the 99th percentile.
fn p99(buckets: &[Bucket]) -> Option<u64> {
    let n: u64 = buckets.iter().map(|b| b.count).sum();
    if n == 0 {
        return None;
    }
    let target = (n * 99).div_ceil(100);
    let mut seen = 0;
    buckets
        .iter()
        .find(|b| {
            seen += b.count;
            seen >= target
        })
        .map(|b| b.max)
}

/// `now` less `before`, bucket by bucket.
fn minus(now: &[Bucket], before: &[Bucket]) -> Vec<Bucket> {
    now.iter()
        .map(|b| {
            let was = before.iter().find(|x| x.min == b.min).map_or(0, |x| x.count);
            Bucket {
                count: b.count.saturating_sub(was),
                ..b.clone()
            }
        })
        .collect()
}

impl Feed {
    /// The frame of `r` with every rate an average over the whole trace (the
    /// last frame, once tracing ended: the last interval's rates would be
    /// those of processes that had stopped).
    pub fn summary(&mut self, r: &Report) -> Frame {
        self.prev = None;
        self.frame(r)
    }

    /// The frame of `r`, with rates since the previous report fed.
    pub fn frame(&mut self, r: &Report) -> Frame {
        let prev = self.prev.take();
        let t_s = r.duration_s;
        let secs = match &prev {
            Some(p) if t_s > p.t_s => t_s - p.t_s,
            Some(_) => 0.0,
            None => t_s,
        };
        let rate = |now: u64, before: Option<u64>| -> f64 {
            if secs <= 0.0 {
                0.0
            } else {
                now.saturating_sub(before.unwrap_or(0)) as f64 / secs
            }
        };
        let slots: BTreeMap<String, Vec<Bucket>> = r
            .kernel_histograms
            .iter()
            .map(|h| (h.name.clone(), h.buckets.clone()))
            .collect();
        // An op's own in-kernel slots (this interval's, else the trace's),
        // else its evented calls' histogram (a label such as
        // `io_uring_register:register-buffers`), else its syscall's slots.
        let kernel = |name: &str| -> Option<u64> {
            let now = slots.get(name)?;
            prev.as_ref()
                .and_then(|p| p.slots.get(name))
                .and_then(|before| p99(&minus(now, before)))
                .or_else(|| p99(now))
        };
        let p99_of = |op: &str| -> Option<u64> {
            kernel(op)
                .or_else(|| {
                    r.operations
                        .iter()
                        .filter(|o| o.name == op && o.latency.count > 0)
                        .map(|o| o.latency.p99)
                        .max()
                })
                .or_else(|| op.split_once(':').and_then(|(syscall, _)| kernel(syscall)))
        };
        let mut next = Prev {
            t_s,
            slots: slots.clone(),
            ..Prev::default()
        };
        let mut rows = Vec::new();
        let mut details = BTreeMap::new();
        for p in &r.processes {
            let verdict = r.verdicts.iter().find(|v| v.pid == p.pid);
            let staging = r.staging.processes.iter().find(|s| s.pid == p.pid);
            let totals = Totals {
                moved: staging.map_or(p.moved_bytes, |s| s.moved_bytes),
                staged: staging.map_or(p.staged_bytes, |s| s.staged_bytes),
                registrations: p.registrations,
            };
            let before = prev.as_ref().and_then(|x| x.rows.get(&(p.pid, None)).copied());
            next.rows.insert((p.pid, None), totals);
            let before_calls = prev.as_ref().and_then(|x| x.calls.get(&p.pid));
            let mut ops: Vec<(String, u64, OpRate)> = p
                .calls
                .iter()
                .map(|(op, n)| {
                    let was = before_calls.and_then(|c| c.get(op)).copied();
                    (
                        op.clone(),
                        *n,
                        OpRate {
                            op: op.clone(),
                            calls_per_s: rate(*n, was),
                            p99_ns_at_most: p99_of(op),
                        },
                    )
                })
                .collect();
            ops.sort_by(|a, b| b.2.calls_per_s.total_cmp(&a.2.calls_per_s).then(b.1.cmp(&a.1)));
            next.calls.insert(p.pid, p.calls.clone());
            let estimated = !p.collectives_sampled.is_exact();
            let basis = verdict.map(|v| match v.basis {
                crate::classify::comm::Basis::SetUp => "set-up",
                crate::classify::comm::Basis::SteadyState => "steady-state",
            });
            rows.push(Row {
                pid: p.pid,
                comm: p.comm.clone(),
                communicator: None,
                ident: None,
                rank: None,
                verdict: verdict.map_or("-", |v| v.transport.name()).to_string(),
                host_staged: verdict.is_some_and(|v| v.host_staged),
                basis,
                net: verdict.and_then(|v| v.net).map(|n| n.name()),
                moved_per_s: rate(totals.moved, before.map(|b| b.moved)),
                staged_per_s: rate(totals.staged, before.map(|b| b.staged)),
                staged_share: (totals.moved > 0).then(|| (totals.staged as f64 / totals.moved as f64).min(1.0)),
                registrations_per_s: rate(totals.registrations, before.map(|b| b.registrations)),
                vm_pin_kib: p.vm_pin_kib_max,
                ops: ops
                    .iter()
                    .filter(|(_, _, o)| o.calls_per_s > 0.0)
                    .take(ROW_OPS)
                    .map(|(_, _, o)| o.clone())
                    .collect(),
                exited: p.exited,
                estimated,
            });
            rows.extend(self::communicators(r, p.pid, &p.comm, prev.as_ref(), &mut next, &rate));
            let causes = r
                .explain
                .findings
                .iter()
                .filter(|f| f.pid == Some(p.pid))
                .map(cause_of)
                .collect();
            details.insert(
                p.pid,
                Detail {
                    evidence: verdict.map(|v| v.evidence.clone()).unwrap_or_default(),
                    cause: verdict.and_then(|v| v.cause.clone()),
                    other_hosts: verdict.and_then(|v| v.other_hosts.clone()),
                    nccl_log: verdict.and_then(|v| v.nccl_log.as_ref()).map(|l| {
                        format!(
                            "NCCL log: {} ({})",
                            l.nccl_says,
                            if l.agrees { "agrees" } else { "DISAGREES" }
                        )
                    }),
                    causes,
                    // Every path of the process with its transport, then what
                    // explain says of the staged or undecided ones.
                    paths: r
                        .paths
                        .iter()
                        .filter(|x| x.pid == p.pid)
                        .map(|x| {
                            format!(
                                "{} {}: {} via {}, {}{}",
                                x.op.name(),
                                x.peer,
                                x.transport.name(),
                                x.via,
                                crate::units::bytes(x.bytes),
                                if x.host_bytes > 0 {
                                    format!(" ({} through host memory)", crate::units::bytes(x.host_bytes))
                                } else {
                                    String::new()
                                }
                            )
                        })
                        .chain(r.explain.paths.iter().filter(|x| x.pid == p.pid).map(|x| {
                            // The pane writes `path: ` before each.
                            let what = x.what.strip_prefix("path ").unwrap_or(&x.what);
                            if x.explained_by.is_empty() {
                                format!("{what} (no rule recognised a cause)")
                            } else {
                                format!("{what} (explained by {})", x.explained_by.join(", "))
                            }
                        }))
                        .fold(Vec::new(), |mut seen: Vec<String>, x| {
                            // explain lists a path once per copy class.
                            if !seen.contains(&x) {
                                seen.push(x);
                            }
                            seen
                        }),
                    ops,
                    moved_bytes: totals.moved,
                    staged_bytes: totals.staged,
                    registrations: totals.registrations,
                    transports: p.transports.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                },
            );
        }
        let loss = &r.loss;
        let lost = [
            ("ring buffer drops", loss.ringbuf_drops),
            ("in-flight table full", loss.inflight_full),
            ("target set full", loss.targets_full),
            ("read errors", loss.read_errors),
            ("malformed", loss.malformed_records),
            ("undecoded", loss.undecoded_events),
            ("damaged recording lines", loss.damaged_lines),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{what} {n}"))
        .collect::<Vec<_>>();
        self.prev = Some(next);
        Frame {
            t_s,
            interval_s: if prev.is_some() { secs } else { 0.0 },
            rows,
            details,
            host_causes: r
                .explain
                .findings
                .iter()
                .filter(|f| f.pid.is_none())
                .map(cause_of)
                .collect(),
            loss: (!lost.is_empty()).then(|| lost.join(", ")),
        }
    }
}

fn cause_of(f: &crate::report::findings::Finding) -> Cause {
    Cause {
        rule: f.rule.to_string(),
        cause: f.cause.to_string(),
        evidence: f.evidence.clone(),
    }
}

/// The rows of a process's communicators: its kernel-aggregated
/// collectives summed per communicator, with their staging.
fn communicators(
    r: &Report,
    pid: u32,
    comm: &str,
    prev: Option<&Prev>,
    next: &mut Prev,
    rate: &dyn Fn(u64, Option<u64>) -> f64,
) -> Vec<Row> {
    type Sums = (u64, u64, bool, &'static str, Option<String>, Option<String>);
    let mut by: BTreeMap<&str, Sums> = BTreeMap::new();
    for c in r.collectives.iter().filter(|c| c.pid == pid) {
        let e = by
            .entry(c.communicator.as_str())
            .or_insert((0, 0, false, c.transport, None, None));
        e.0 += c.moved_bytes();
        e.2 |= c.counted.is_some();
        e.4 = e.4.take().or_else(|| c.comm_id.clone());
        if let (None, Some(r), Some(n)) = (&e.5, c.rank, c.nranks) {
            e.5 = Some(format!("{r}/{n}"));
        }
    }
    for s in r.staging.communicators.iter().filter(|s| s.pid == pid) {
        if let Some(e) = by.get_mut(s.communicator.as_str()) {
            e.1 += s.staged_bytes;
        }
    }
    by.into_iter()
        .map(|(handle, (moved, staged, estimated, transport, ident, rank))| {
            let key = (pid, Some(handle.to_string()));
            let before = prev.and_then(|p| p.rows.get(&key).copied());
            next.rows.insert(
                key,
                Totals {
                    moved,
                    staged,
                    registrations: 0,
                },
            );
            Row {
                pid,
                comm: comm.to_string(),
                communicator: Some(handle.to_string()),
                ident,
                rank,
                verdict: transport.to_string(),
                host_staged: crate::classify::Transport::from_name(transport).staged(),
                moved_per_s: rate(moved, before.map(|b| b.moved)),
                staged_per_s: rate(staged, before.map(|b| b.staged)),
                staged_share: (moved > 0).then(|| (staged as f64 / moved as f64).min(1.0)),
                estimated,
                ..Row::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nccl_auto() -> Report {
        crate::fixtures::replay_fixture("gpu-h200-nccl-auto").0
    }

    /// The GPU job's rows say what its report says: the verdict and its
    /// basis per process, a communicator row each, and explain's cause.
    #[test]
    fn rows_of_a_gpu_recording() {
        let r = nccl_auto();
        let f = Feed::default().frame(&r);
        let ranks: Vec<&Row> = f
            .rows
            .iter()
            .filter(|x| x.communicator.is_none() && x.verdict != "-")
            .collect();
        assert_eq!(ranks.len(), 2, "{:#?}", f.rows);
        for p in &ranks {
            assert_eq!(p.verdict, "p2p/nvlink");
            assert_eq!(p.basis, Some("set-up"));
            assert!(p.moved_per_s > 0.0, "the first frame's rates are the trace's averages");
            // The proxy thread's socket polling is the busiest; the
            // collectives are in the pane with their latency.
            assert_eq!(p.ops.len(), ROW_OPS, "{:?}", p.ops);
            let d = &f.details[&p.pid];
            assert!(
                d.ops
                    .iter()
                    .any(|(op, n, o)| op == "ncclAllReduce" && *n == 1026 && o.p99_ns_at_most.is_some()),
                "{:?}",
                d.ops
            );
            assert!(d.evidence.iter().any(|e| e.contains("cuDeviceCanAccessPeer")), "{d:?}");
            assert!(d.causes.iter().any(|c| c.rule == "pageable-host-copies"), "{d:?}");
        }
        let comms: Vec<&Row> = f.rows.iter().filter(|x| x.communicator.is_some()).collect();
        assert_eq!(comms.len(), 2);
        assert!(comms.iter().all(|c| c.verdict == "p2p/nvlink" && c.staged_per_s == 0.0));
        assert_eq!(comms[0].rank.as_deref(), Some("0/2"), "{:?}", comms[0]);
        // A recording from before the tracer read ncclUniqueId: its id
        // slots held registers, so no identity is shown.
        assert_eq!(comms[0].ident, None, "{:?}", comms[0]);
        // Each communicator row follows its process's row.
        for (i, row) in f.rows.iter().enumerate().filter(|(_, x)| x.communicator.is_some()) {
            assert_eq!(f.rows[i - 1].pid, row.pid);
        }
    }

    /// Rates are the difference to the previous report over the time
    /// between them; an unchanged report gives zero rates.
    #[test]
    fn rates_between_reports() {
        let mut r = nccl_auto();
        let mut feed = Feed::default();
        r.duration_s = 10.0;
        feed.frame(&r);
        let pid = r.processes[1].pid;
        r.duration_s = 12.0;
        r.processes[1].registrations += 10;
        let moved_before = r.staging.processes.iter().find(|s| s.pid == pid).map(|s| s.moved_bytes);
        if let Some(s) = r.staging.processes.iter_mut().find(|s| s.pid == pid) {
            s.moved_bytes += 4000;
            s.staged_bytes += 1000;
        }
        *r.processes[1].calls.entry("ncclAllReduce".into()).or_default() += 100;
        let f = feed.frame(&r);
        assert_eq!(f.interval_s, 2.0);
        let row = f
            .rows
            .iter()
            .find(|x| x.pid == pid && x.communicator.is_none())
            .expect("the row");
        assert_eq!(row.registrations_per_s, 5.0);
        assert!(moved_before.is_some());
        assert_eq!(row.moved_per_s, 2000.0);
        assert_eq!(row.staged_per_s, 500.0);
        assert_eq!(row.ops[0].op, "ncclAllReduce");
        assert_eq!(row.ops[0].calls_per_s, 50.0);
        let other = f
            .rows
            .iter()
            .find(|x| x.pid != pid && x.communicator.is_none() && x.verdict != "-");
        assert!(
            other.is_some_and(|o| o.moved_per_s == 0.0 && o.ops.is_empty()),
            "{other:?}"
        );
    }

    #[test]
    fn p99_is_the_upper_bound_of_its_slot() {
        let b = |min: u64, count| Bucket {
            min,
            max: min * 2,
            count,
        };
        assert_eq!(p99(&[b(1024, 990), b(1 << 20, 10)]), Some(2048));
        assert_eq!(p99(&[b(1024, 980), b(1 << 20, 20)]), Some(1 << 21));
        assert_eq!(p99(&[]), None);
        let window = minus(&[b(1024, 1000), b(4096, 5)], &[b(1024, 1000)]);
        assert_eq!(p99(&window), Some(8192), "only the window's calls count");
    }
}
