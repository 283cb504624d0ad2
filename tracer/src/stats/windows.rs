//! Where each process's bytes went, tick by tick: the evidence that judges
//! its paths. At every read of the kernel's totals, the process's path rows
//! (collectives per communicator, UCX data calls per endpoint, cuFile reads
//! and writes per handle) that moved data in the tick are its carriers (a
//! row with a tenth of the tick's path bytes or more, and of the bytes that
//! moved in it: a 49-byte AM beside a GET in flight carries none of the
//! GET's), and the bytes that moved
//! meanwhile through host memory (copies between GPU and host, socket
//! send/recv, a cuFile process's positional file I/O per file) or between
//! devices (device-to-device copies), and its nvidia-fs ioctls, are added
//! to the window of that carrier set.
//! A tick without calls of its own carries on the last set: a GET in
//! flight moves its bytes after its call returned (not after synchronous
//! cuFile reads and writes, whose bytes moved before they returned). A process that never
//! called a path row has one window with no carriers: what it served for
//! its peers. The judge (`judge/paths.rs`) gives each path the windows it
//! carried alone, and calls ambiguous what moved while several did.
//! Definitions: docs/paths.md.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{CallsBytes, RowKey};
use crate::probes::uapi::{self, Kind};

/// A carrier's share of a tick's path bytes at least this.
const CARRIER: f64 = 0.10;

/// Evidence gathered while one set of path rows carried a process's data.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Window {
    pub pid: u32,
    /// The carriers (`op@handle`); empty: no call of the process's own.
    pub paths: Vec<String>,
    /// Ticks it covers.
    pub ticks: u64,
    /// Bytes of each carrier's calls in these ticks.
    pub path_bytes: BTreeMap<String, u64>,
    /// Copies between GPU and host memory.
    pub host_copy_bytes: u64,
    /// Copies between two GPU buffers (a peer's mapped memory included).
    pub device_copy_bytes: u64,
    /// Copies between memory the tracer did not see allocated.
    pub unknown_copy_bytes: u64,
    /// Socket send/recv bytes.
    pub socket_bytes: u64,
    /// Positional file I/O of a cuFile process, per file (`major:minor:inode`):
    /// bytes read and written (compat mode's POSIX I/O through host memory).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub file_read_bytes: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub file_write_bytes: BTreeMap<String, u64>,
    /// ioctls on nvidia-fs devices (nvidia-fs moving a file's bytes).
    #[serde(skip_serializing_if = "is_zero")]
    pub nvfs_ioctls: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The cumulative figures of one process at the last tick.
#[derive(Debug, Default)]
struct Last {
    rows: BTreeMap<String, CallsBytes>,
    copies: [u64; 3],
    socket: u64,
    files: BTreeMap<String, [u64; 2]>,
    nvfs_ioctls: u64,
    carriers: Vec<String>,
}

/// Every process's windows so far.
#[derive(Debug, Default)]
pub struct Windows {
    last: BTreeMap<u32, Last>,
    windows: BTreeMap<(u32, Vec<String>), Window>,
}

/// The key of a path row in windows and paths: `op@0xhandle`.
pub fn row_key(op: &str, handle: u64) -> String {
    format!("{op}@{handle:#x}")
}

/// Whether an aggregated row defines a path (data calls per communicator,
/// endpoint or cuFile handle), not group brackets or sockets.
pub fn is_path_op(op: &str) -> bool {
    uapi::TABLE.iter().any(|r| {
        r.name == op
            && matches!(
                r.kind,
                Kind::Collective | Kind::PointToPoint | Kind::UcxData | Kind::CufileIo | Kind::CufileBatchSubmit
            )
    })
}

/// Whether a path row's calls move all their bytes before they return
/// (synchronous cuFile reads and writes): no tail carries on after them.
fn synchronous(row: &str) -> bool {
    let op = row.split('@').next().unwrap_or(row);
    uapi::row_named(op).is_some_and(|r| r.ret_bytes)
}

/// One process's cumulative figures at a tick.
#[derive(Default)]
pub struct Totals {
    /// Copies by side: GPU-host, GPU-GPU, unknown.
    pub copies: [u64; 3],
    pub socket: u64,
    /// Positional file I/O per file: bytes read, written (cuFile processes).
    pub files: BTreeMap<String, [u64; 2]>,
    pub nvfs_ioctls: u64,
}

impl Windows {
    /// A tick: the kernel's rows (estimated where sampled) and each
    /// process's cumulative copies and socket bytes.
    pub fn tick<'a>(
        &mut self,
        rows: impl IntoIterator<Item = (&'a RowKey, &'a CallsBytes)>,
        totals: &BTreeMap<u32, Totals>,
    ) {
        let mut by_pid: BTreeMap<u32, BTreeMap<String, CallsBytes>> = BTreeMap::new();
        let mut path_op: BTreeMap<&str, bool> = BTreeMap::new();
        for ((pid, op, handle), v) in rows {
            if *path_op.entry(op.as_str()).or_insert_with(|| is_path_op(op)) {
                by_pid.entry(*pid).or_default().insert(row_key(op, *handle), *v);
            }
        }
        let pids: BTreeSet<u32> = by_pid.keys().chain(totals.keys()).copied().collect();
        for pid in pids {
            let now_rows = by_pid.remove(&pid).unwrap_or_default();
            let t = totals.get(&pid);
            let last = self.last.entry(pid).or_default();
            let mut moved: BTreeMap<String, u64> = BTreeMap::new();
            let mut called = Vec::new();
            for (k, (calls, bytes)) in &now_rows {
                let (c0, b0) = last.rows.get(k).copied().unwrap_or_default();
                if *calls > c0 {
                    called.push(k.clone());
                    moved.insert(k.clone(), bytes.saturating_sub(b0));
                }
            }
            let copies = t.map_or(last.copies, |t| t.copies);
            let socket = t.map_or(last.socket, |t| t.socket);
            let files = t.map_or_else(|| last.files.clone(), |t| t.files.clone());
            let nvfs = t.map_or(last.nvfs_ioctls, |t| t.nvfs_ioctls);
            let d = |now: u64, before: u64| now.saturating_sub(before);
            let deltas = [
                d(copies[0], last.copies[0]),
                d(copies[1], last.copies[1]),
                d(copies[2], last.copies[2]),
                d(socket, last.socket),
                d(nvfs, last.nvfs_ioctls),
            ];
            let file_deltas: Vec<(&String, [u64; 2])> = files
                .iter()
                .map(|(k, v)| {
                    let before = last.files.get(k).copied().unwrap_or_default();
                    (k, [d(v[0], before[0]), d(v[1], before[1])])
                })
                .filter(|(_, v)| v[0] + v[1] > 0)
                .collect();
            let total: u64 = moved.values().sum();
            // What moved through host memory or between devices in the
            // tick: a call of far fewer bytes (a 49-byte AM beside a GET
            // in flight) cannot have carried it.
            let evidence = (deltas[0] + deltas[1] + deltas[2])
                .max(deltas[3])
                .max(file_deltas.iter().map(|(_, v)| v[0] + v[1]).sum());
            let carriers: Vec<String> = if total == 0 {
                called
            } else {
                moved
                    .iter()
                    .filter(|(_, b)| **b as f64 >= CARRIER * total.max(evidence) as f64)
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            if !carriers.is_empty() {
                last.carriers = carriers;
            } else if last.carriers.iter().all(|k| synchronous(k)) {
                // Their bytes had moved when they returned: what moves now is not theirs.
                last.carriers.clear();
            }
            if total > 0 || deltas.iter().any(|x| *x > 0) || !file_deltas.is_empty() {
                let w = self
                    .windows
                    .entry((pid, last.carriers.clone()))
                    .or_insert_with(|| Window {
                        pid,
                        paths: last.carriers.clone(),
                        ..Window::default()
                    });
                w.ticks += 1;
                for (k, b) in moved {
                    *w.path_bytes.entry(k).or_default() += b;
                }
                w.host_copy_bytes += deltas[0];
                w.device_copy_bytes += deltas[1];
                w.unknown_copy_bytes += deltas[2];
                w.socket_bytes += deltas[3];
                w.nvfs_ioctls += deltas[4];
                for (k, [r, wr]) in file_deltas {
                    if r > 0 {
                        *w.file_read_bytes.entry(k.clone()).or_default() += r;
                    }
                    if wr > 0 {
                        *w.file_write_bytes.entry(k.clone()).or_default() += wr;
                    }
                }
            }
            last.rows = now_rows;
            last.copies = copies;
            last.socket = socket;
            last.files = files;
            last.nvfs_ioctls = nvfs;
        }
    }

    /// A process is gone: its windows stay, its last figures go.
    pub fn forget(&mut self, pid: u32) {
        self.last.remove(&pid);
        self.windows.retain(|(p, _), _| *p != pid);
    }

    /// The windows so far, by process.
    pub fn report(&self) -> Vec<Window> {
        self.windows.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(u32, &str, u64, u64, u64)]) -> BTreeMap<RowKey, CallsBytes> {
        v.iter()
            .map(|(p, op, h, c, b)| ((*p, op.to_string(), *h), (*c, *b)))
            .collect()
    }

    fn totals(v: &[(u32, [u64; 3], u64)]) -> BTreeMap<u32, Totals> {
        v.iter()
            .map(|(p, copies, socket)| {
                (
                    *p,
                    Totals {
                        copies: *copies,
                        socket: *socket,
                        ..Totals::default()
                    },
                )
            })
            .collect()
    }

    /// A READ phase then a WRITE phase of one initiator, and the target that
    /// serves the reads: each phase's bytes go to the path that ran then,
    /// the tail of a GET (bytes after its call) included.
    #[test]
    fn bytes_go_to_the_path_that_ran_in_their_tick() {
        let mut w = Windows::default();
        let (get, put) = ("ucp_get_nbx", "ucp_put_nbx");
        // Tick 1: a GET call, staged copies and socket bytes in both.
        w.tick(
            &rows(&[(2, get, 0xe, 1, 100)]),
            &totals(&[(1, [100, 0, 0], 100), (2, [100, 0, 0], 100)]),
        );
        // Tick 2: no call, the GET's bytes still moving.
        w.tick(
            &rows(&[(2, get, 0xe, 1, 100)]),
            &totals(&[(1, [150, 0, 0], 160), (2, [150, 0, 0], 160)]),
        );
        // Tick 3: PUTs with a small AM beside them; device copies only.
        w.tick(
            &rows(&[
                (2, get, 0xe, 1, 100),
                (2, put, 0xe, 4, 400),
                (2, "ucp_am_send_nbx", 0xe, 1, 1),
            ]),
            &totals(&[(1, [150, 0, 0], 160), (2, [150, 400, 0], 161)]),
        );
        let r = w.report();
        let of = |pid: u32, carriers: &[&str]| {
            r.iter()
                .find(|x| x.pid == pid && x.paths == carriers.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .cloned()
        };
        let g = of(2, &["ucp_get_nbx@0xe"]).expect("the GET's window");
        assert_eq!((g.ticks, g.host_copy_bytes, g.socket_bytes), (2, 150, 160));
        assert_eq!(g.path_bytes["ucp_get_nbx@0xe"], 100);
        let p = of(2, &["ucp_put_nbx@0xe"]).expect("the PUT's window: the AM is below a tenth");
        assert_eq!((p.device_copy_bytes, p.host_copy_bytes, p.socket_bytes), (400, 0, 1));
        let s = of(1, &[]).expect("the target's window: no call of its own");
        assert_eq!((s.host_copy_bytes, s.socket_bytes), (150, 160));
        assert_eq!(r.len(), 3);
    }

    /// A small AM (a notification) while a GET's bytes still move: the
    /// tick's bytes stay the GET's; an AM alone carries what its own tick
    /// moved when that is its size.
    #[test]
    fn a_small_call_beside_a_transfer_in_flight_carries_none_of_it() {
        let mut w = Windows::default();
        let (get, am) = ("ucp_get_nbx", "ucp_am_send_nbx");
        w.tick(&rows(&[(2, get, 0xe, 1, 1000)]), &totals(&[(2, [100, 0, 0], 100)]));
        w.tick(
            &rows(&[(2, get, 0xe, 1, 1000), (2, am, 0xe, 1, 49)]),
            &totals(&[(2, [900, 0, 0], 900)]),
        );
        // Later the AM alone, moving its own 49 bytes.
        w.tick(
            &rows(&[(2, get, 0xe, 1, 1000), (2, am, 0xe, 2, 98)]),
            &totals(&[(2, [900, 0, 0], 960)]),
        );
        let r = w.report();
        let get_w = r
            .iter()
            .find(|x| x.paths == ["ucp_get_nbx@0xe"])
            .expect("the GET's window");
        assert_eq!((get_w.ticks, get_w.host_copy_bytes, get_w.socket_bytes), (2, 900, 900));
        let am_w = r
            .iter()
            .find(|x| x.paths == ["ucp_am_send_nbx@0xe"])
            .expect("the AM's own window");
        assert_eq!(am_w.socket_bytes, 60);
    }
}
