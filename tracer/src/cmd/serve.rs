//! `gdrtrace serve`: the node agent (`crate::serve`).
use crate::{error::Result, serve::ServeArgs};

pub fn serve(args: &ServeArgs) -> Result<i32> {
    crate::serve::serve(args)
}
