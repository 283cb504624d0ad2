//! `&'static str` fields read back from JSON (ground floor).
//!
//! Reports name things from fixed vocabularies (transports, strategies,
//! units, signals) as `&'static str`; a report read back (`Deserialize`)
//! interns each distinct name once, so the typed report keeps those field
//! types and a reader of many reports holds each name once.
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Mutex,
};

use serde::{Deserialize, Deserializer};

/// A name from a fixed vocabulary. Fields read back through `str` or `opt`
/// are spelled with this alias: serde's derive treats a field written
/// `&'static str` as borrowed from the input (`'de: 'static`), which a
/// report read from a file cannot satisfy; the alias is the same type.
pub type Name = &'static str;

static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// The one `&'static str` equal to `s`.
pub fn intern(s: &str) -> &'static str {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
    names.insert(n);
    n
}

/// `#[serde(deserialize_with = "crate::intern::str")]`
pub fn str<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    Ok(intern(&String::deserialize(d)?))
}

/// As `str`, for `Option<&'static str>`.
pub fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'static str>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|s| intern(&s)))
}

/// As `str`, for `Vec<&'static str>`.
pub fn vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    Ok(Vec::<String>::deserialize(d)?.iter().map(|s| intern(s)).collect())
}

/// As `str`, for maps keyed by `&'static str`.
pub fn keys<'de, D: Deserializer<'de>, V: Deserialize<'de>>(d: D) -> Result<BTreeMap<&'static str, V>, D::Error> {
    Ok(BTreeMap::<String, V>::deserialize(d)?
        .into_iter()
        .map(|(k, v)| (intern(&k), v))
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_is_interned_once() {
        let a = super::intern(&String::from("p2p/nvlink"));
        let b = super::intern(&String::from("p2p/nvlink"));
        assert!(std::ptr::eq(a, b));
        assert_eq!(a, "p2p/nvlink");
    }
}
