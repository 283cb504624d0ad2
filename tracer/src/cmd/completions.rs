//! `gdrtrace completions SHELL` and `gdrtrace man`: generated from the
//! command-line definition (`cli.rs`), so they never miss a flag.
use clap::CommandFactory as _;

use crate::{
    cli::{Cli, CompletionsArgs, ManArgs},
    error::{Error, Result},
};

pub fn completions(a: &CompletionsArgs) -> Result<i32> {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "gdrtrace", &mut buf);
    out!("{}", String::from_utf8_lossy(&buf));
    Ok(0)
}

pub fn man(a: &ManArgs) -> Result<i32> {
    let cmd = Cli::command();
    match &a.out_dir {
        Some(dir) => {
            clap_mangen::generate_to(cmd, dir)
                .map_err(|e| Error::io(format!("writing the manual pages into {}", dir.display()), e))?;
        }
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| Error::io("rendering the manual page", e))?;
            out!("{}", String::from_utf8_lossy(&buf));
        }
    }
    Ok(0)
}
