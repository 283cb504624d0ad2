//! `gdrtrace topo`: the GPU/NIC inventory and the paths between them.
use crate::{
    cli::{DoctorArgs, Format},
    error::Result,
    topo,
};

pub fn topo(args: &DoctorArgs) -> Result<i32> {
    let t = topo::discover();
    if args.format() == Format::Json {
        crate::output::print_json("the topology", &topo::TopoDoc::of(t))?;
    } else {
        out!("{}", topo::render(&t));
    }
    Ok(0)
}
