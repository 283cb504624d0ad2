//! Names and codes of operations and event kinds: the probe table's
//! vocabulary, as reports and recordings write it. Op codes of library rows
//! are table indices and may move between versions; names do not.
use tracer_common::{kind, op};

use super::{
    catalog::{CATALOG, point_of_op},
    uapi,
};

/// Name of an op (report label base), `op-N` for codes this build lacks.
pub fn op_name(op_code: u32) -> String {
    if op_code >= op::USER_BASE {
        uapi::row_of(op_code).map_or_else(|| format!("op-{op_code}"), |(_, r)| r.name.to_string())
    } else {
        point_of_op(op_code).map_or_else(|| format!("op-{op_code}"), |p| p.name.to_string())
    }
}

/// The op code of a name in this build (library table row or catalog point).
pub fn op_code(name: &str) -> Option<u32> {
    if let Some(i) = uapi::TABLE.iter().position(|r| r.name == name) {
        return Some(uapi::op_of(i));
    }
    CATALOG
        .iter()
        .find(|p| p.name == name && p.op != op::NONE)
        .map(|p| p.op)
        .or_else(|| name.strip_prefix("op-")?.parse().ok())
}

/// Name of an event kind, as recordings write it.
pub fn kind_name(k: u32) -> &'static str {
    match k {
        kind::CALL => "call",
        kind::FORK => "fork",
        kind::EXIT => "exit",
        kind::EXEC => "exec",
        kind::ENTRY => "entry",
        kind::ROW_FIRST => "row-first",
        _ => "unknown",
    }
}

/// The kind of a name `kind_name` wrote.
pub fn kind_code(name: &str) -> Option<u32> {
    Some(match name {
        "call" => kind::CALL,
        "fork" => kind::FORK,
        "exit" => kind::EXIT,
        "exec" => kind::EXEC,
        "entry" => kind::ENTRY,
        "row-first" => kind::ROW_FIRST,
        _ => return None,
    })
}
