//! Test support for unit tests: replaying the recordings under
//! `tests/fixtures/recordings/` through the same replay path as `gdrtrace
//! replay`. The tests of the verdicts and explain rules on them are
//! `tracer/tests/it/replays.rs` (public API only).
use crate::{explain::Explain, report::Report};

/// The fixtures directory of the repository.
pub fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recordings")
}

/// Every shipped recording's name (without `.rec` or `.rec.gz`), sorted.
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .expect("the recordings")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".rec.gz").or_else(|| name.strip_suffix(".rec"))?;
            Some(stem.to_string())
        })
        .collect();
    names.sort();
    names
}

/// Replays `tests/fixtures/recordings/<name>.rec` (or `.rec.gz`; name
/// without either): the judged report and what `explain` says about it.
pub fn replay_fixture(name: &str) -> (Report, Explain) {
    let plain = dir().join(format!("{name}.rec"));
    let path = if plain.exists() {
        plain
    } else {
        dir().join(format!("{name}.rec.gz"))
    };
    let rec = crate::cmd::replay::load(&path).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    let (report, _) = crate::cmd::replay::rebuild(&rec, None).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    let explain = report.explain.clone();
    (report, explain)
}
