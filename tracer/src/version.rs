//! Which build this is: the crate's version and the git revision it was
//! built from (`tracer/build.rs`), in `--version`, serve's `build_info`,
//! and the `tool_version` of reports, recordings and compare documents.

/// The short commit the binary was built from (`.dirty` when its sources
/// differed from it), `$GDRTRACE_REVISION` where set, else `unknown`.
pub const REVISION: &str = env!("GDRTRACE_REVISION");

/// The release version, without the revision.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// `RELEASE+REVISION`: the revision as semver build metadata, which
/// version precedence ignores (so `compare`'s profiles match across builds
/// of one release: [`release_of`]).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("GDRTRACE_REVISION"));

/// The release part of a `tool_version` (what precedes `+`).
pub fn release_of(tool_version: &str) -> &str {
    tool_version.split('+').next().unwrap_or(tool_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_carries_the_revision_as_build_metadata() {
        assert_eq!(VERSION, format!("{RELEASE}+{REVISION}"));
        assert!(!REVISION.is_empty());
        assert!(
            REVISION
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'),
            "semver build metadata: {REVISION}"
        );
        assert_eq!(release_of(VERSION), RELEASE);
        assert_eq!(release_of("0.1.0"), "0.1.0");
    }
}
