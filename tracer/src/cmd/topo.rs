//! `gdrtrace topo`: the GPU/NIC inventory and the paths between them.
use crate::{
    cli::DoctorArgs,
    error::{Error, Result},
    topo,
};

pub fn topo(args: &DoctorArgs) -> Result<i32> {
    let t = topo::discover();
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&t).map_err(|e| Error::Workload(format!("encoding the topology: {e}")))?
        );
    } else {
        out!("{}", topo::render(&t));
    }
    Ok(0)
}
