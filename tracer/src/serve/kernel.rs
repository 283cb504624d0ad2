//! The agent's reads and clean-ups of the kernel maps: what a tracing
//! session leaves to the end of its window, an agent that runs for days
//! must do as it goes (rows of exited processes, calls that never
//! returned), or the maps fill and start losing.
use std::collections::BTreeSet;

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap},
};
use tracer_common::{AggKey, AggValue, Inflight, InflightKey, control, counter};

use crate::error::{Error, Result};

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> Error {
    move |source| Error::Map {
        name: name.into(),
        source,
    }
}

/// Writes the agent's tgid where discovery looks for it.
pub fn set_agent(ebpf: &mut Ebpf, tgid: u32) -> Result<()> {
    let map = ebpf.map_mut("CONTROL").ok_or(Error::MissingMap("CONTROL"))?;
    let mut a: Array<&mut MapData, u64> = Array::try_from(map).map_err(map_err("CONTROL"))?;
    a.set(control::AGENT_TGID, &(tgid as u64), 0)
        .map_err(map_err("CONTROL"))
}

/// The per-CPU `COUNTERS`, summed.
pub fn counters(ebpf: &Ebpf) -> Result<Vec<u64>> {
    let map = ebpf.map("COUNTERS").ok_or(Error::MissingMap("COUNTERS"))?;
    let a: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map).map_err(map_err("COUNTERS"))?;
    (0..counter::COUNT)
        .map(|i| a.get(&i, 0).map(|v| v.iter().sum()).map_err(map_err("COUNTERS")))
        .collect()
}

/// The processes in the kernel's target set.
pub fn targets(ebpf: &Ebpf) -> Result<Vec<u32>> {
    let map = ebpf.map("TARGETS").ok_or(Error::MissingMap("TARGETS"))?;
    let m: HashMap<&MapData, u32, u32> = HashMap::try_from(map).map_err(map_err("TARGETS"))?;
    Ok(m.keys().filter_map(|k| k.ok()).collect())
}

/// Takes a process out of the target set (shed, or exited unseen).
pub fn remove_target(ebpf: &mut Ebpf, pid: u32) -> Result<()> {
    let map = ebpf.map_mut("TARGETS").ok_or(Error::MissingMap("TARGETS"))?;
    let mut m: HashMap<&mut MapData, u32, u32> = HashMap::try_from(map).map_err(map_err("TARGETS"))?;
    match m.remove(&pid) {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(e) => Err(map_err("TARGETS")(e)),
    }
}

/// Deletes the aggregation and copy rows of forgotten processes; returns
/// how many.
pub fn drop_aggregate_rows(ebpf: &mut Ebpf, pids: &BTreeSet<u32>) -> Result<usize> {
    let map = ebpf.map_mut("AGGREGATE").ok_or(Error::MissingMap("AGGREGATE"))?;
    let mut m: PerCpuHashMap<&mut MapData, AggKey, AggValue> =
        PerCpuHashMap::try_from(map).map_err(map_err("AGGREGATE"))?;
    let doomed: Vec<AggKey> = m
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| pids.contains(&k.tgid))
        .collect();
    for k in &doomed {
        let _ = m.remove(k);
    }
    let map = ebpf.map_mut("COPY_ROWS").ok_or(Error::MissingMap("COPY_ROWS"))?;
    let mut copies: HashMap<&mut MapData, AggKey, AggValue> = HashMap::try_from(map).map_err(map_err("COPY_ROWS"))?;
    let copy_rows: Vec<AggKey> = copies
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| pids.contains(&k.tgid))
        .collect();
    for k in &copy_rows {
        let _ = copies.remove(k);
    }
    Ok(doomed.len() + copy_rows.len())
}

/// Deletes in-flight entries of processes that are not `live` (killed
/// inside a traced call: their return never comes); returns how many.
pub fn sweep_inflight(ebpf: &mut Ebpf, live: &dyn Fn(u32) -> bool) -> Result<usize> {
    let map = ebpf.map_mut("INFLIGHT").ok_or(Error::MissingMap("INFLIGHT"))?;
    let mut m: HashMap<&mut MapData, InflightKey, Inflight> = HashMap::try_from(map).map_err(map_err("INFLIGHT"))?;
    let doomed: Vec<InflightKey> = m
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| !live((k.pid_tgid >> 32) as u32))
        .collect();
    for k in &doomed {
        let _ = m.remove(k);
    }
    Ok(doomed.len())
}

/// Entries and capacity of a hash map.
pub fn fill(ebpf: &Ebpf, name: &'static str) -> Option<(u64, u64)> {
    let map = ebpf.map(name)?;
    let max = match map {
        aya::maps::Map::HashMap(d) | aya::maps::Map::PerCpuHashMap(d) | aya::maps::Map::LruHashMap(d) => {
            d.info().ok()?.max_entries() as u64
        }
        _ => return None,
    };
    let n = match name {
        "AGGREGATE" => {
            let m: PerCpuHashMap<&MapData, AggKey, AggValue> = PerCpuHashMap::try_from(map).ok()?;
            m.keys().count()
        }
        "INFLIGHT" => {
            let m: HashMap<&MapData, InflightKey, Inflight> = HashMap::try_from(map).ok()?;
            m.keys().count()
        }
        "COPY_ROWS" => {
            let m: HashMap<&MapData, AggKey, AggValue> = HashMap::try_from(map).ok()?;
            m.keys().count()
        }
        _ => {
            let m: HashMap<&MapData, u32, u32> = HashMap::try_from(map).ok()?;
            m.keys().count()
        }
    };
    Some((n as u64, max))
}
