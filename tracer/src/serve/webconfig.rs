//! `serve --web-config-file FILE`: TLS and basic auth for the metrics port,
//! in the file format of node_exporter and dcgm-exporter
//! (prometheus/exporter-toolkit's web configuration), so a platform team
//! uses the file and the Secret it already has for them:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/gdrtrace/tls.crt
//!   key_file: /etc/gdrtrace/tls.key
//!   # optional: mutual TLS
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: /etc/gdrtrace/ca.crt
//!   min_version: TLS12
//! basic_auth_users:
//!   prometheus: $2y$10$...   # bcrypt (htpasswd -nBC 10 "" | tr -d ':')
//! ```
//!
//! A field this agent does not implement (`cipher_suites`,
//! `curve_preferences`, `http_server_config`, ...) is refused by name at
//! start rather than ignored: a setting that silently did nothing would be
//! a hole the operator believes closed.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use base64::Engine as _;
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};
use serde::Deserialize;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    #[serde(default)]
    pub tls_server_config: Option<TlsFile>,
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    #[serde(default)]
    pub client_auth_type: Option<String>,
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub min_version: Option<String>,
    #[serde(default)]
    pub max_version: Option<String>,
}

/// What the HTTP side enforces.
pub struct WebConfig {
    pub tls: Option<Arc<ServerConfig>>,
    pub auth: Option<BasicAuth>,
}

/// Users and their bcrypt hashes; headers that passed are remembered (a
/// bcrypt check costs tens of milliseconds by design, and Prometheus sends
/// the same header every scrape).
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    passed: Mutex<BTreeSet<String>>,
}

/// Headers remembered as passed, at most (a client cycling passwords
/// cannot grow the set without end).
const PASSED_KEEP: usize = 64;

impl BasicAuth {
    /// Whether an `Authorization` header value names a user and its password.
    pub fn allows(&self, header: Option<&str>) -> bool {
        let Some(h) = header else { return false };
        if self.passed.lock().map(|p| p.contains(h)).unwrap_or(false) {
            return true;
        }
        let Some(b64) = h.strip_prefix("Basic ") else {
            return false;
        };
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
            return false;
        };
        let Ok(text) = String::from_utf8(raw) else {
            return false;
        };
        let Some((user, password)) = text.split_once(':') else {
            return false;
        };
        let ok = self
            .users
            .get(user)
            .is_some_and(|hash| bcrypt::verify(password, hash).unwrap_or(false));
        if ok && let Ok(mut p) = self.passed.lock() {
            if p.len() >= PASSED_KEEP {
                p.clear();
            }
            p.insert(h.to_string());
        }
        ok
    }
}

fn tls_version(v: &str) -> Result<&'static rustls::SupportedProtocolVersion, String> {
    match v {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        // exporter-toolkit also takes TLS10 and TLS11; rustls does not speak them.
        other => Err(format!("TLS version {other} (this agent offers TLS12 and TLS13)")),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

impl WebConfig {
    /// Reads and checks the file: every error is one line naming the file
    /// and what is wrong.
    pub fn load(path: &Path) -> Result<WebConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let file: WebConfigFile = if text.trim().is_empty() {
            WebConfigFile::default()
        } else {
            serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        };
        Self::from_file(file).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn from_file(file: WebConfigFile) -> Result<WebConfig, String> {
        for (user, hash) in &file.basic_auth_users {
            // A plain-text password where a hash belongs would never match.
            if !(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$")) {
                return Err(format!("basic_auth_users.{user} is not a bcrypt hash ($2y$...)"));
            }
        }
        let auth = (!file.basic_auth_users.is_empty()).then(|| BasicAuth {
            users: file.basic_auth_users,
            passed: Mutex::new(BTreeSet::new()),
        });
        let tls = match file.tls_server_config {
            None => None,
            Some(t) => Some(Arc::new(Self::tls(t)?)),
        };
        Ok(WebConfig { tls, auth })
    }

    fn tls(t: TlsFile) -> Result<ServerConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let min = tls_version(t.min_version.as_deref().unwrap_or("TLS12"))?;
        let max = tls_version(t.max_version.as_deref().unwrap_or("TLS13"))?;
        let versions: Vec<&'static rustls::SupportedProtocolVersion> =
            [&rustls::version::TLS12, &rustls::version::TLS13]
                .into_iter()
                .filter(|v| (u16::from(min.version)..=u16::from(max.version)).contains(&u16::from(v.version)))
                .collect();
        if versions.is_empty() {
            return Err("tls_server_config: min_version is above max_version".into());
        }
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| format!("tls_server_config: {e}"))?;
        let client_ca = |what: &str| -> Result<Arc<RootCertStore>, String> {
            let path = t
                .client_ca_file
                .as_ref()
                .ok_or_else(|| format!("client_auth_type {what} needs client_ca_file"))?;
            let mut roots = RootCertStore::empty();
            for c in read_certs(path)? {
                roots.add(c).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(Arc::new(roots))
        };
        let builder = match t.client_auth_type.as_deref().unwrap_or("NoClientCert") {
            "NoClientCert" | "" => builder.with_no_client_auth(),
            mode @ ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven") => {
                let v = WebPkiClientVerifier::builder_with_provider(client_ca(mode)?, provider);
                let v = if mode == "VerifyClientCertIfGiven" {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                builder.with_client_cert_verifier(v.build().map_err(|e| format!("client_ca_file: {e}"))?)
            }
            other => {
                return Err(format!(
                    "client_auth_type {other} is not supported (NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
                ));
            }
        };
        let certs = read_certs(&t.cert_file)?;
        let key = PrivateKeyDer::from_pem_file(&t.key_file)
            .map_err(|e| format!("reading the private key {}: {e}", t.key_file.display()))?;
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| format!("cert_file and key_file: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, String> {
        let file: WebConfigFile = serde_norway::from_str(text).map_err(|e| e.to_string())?;
        WebConfig::from_file(file)
    }

    #[test]
    fn basic_auth_checks_bcrypt_hashes() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = parse(&format!("basic_auth_users:\n  prometheus: {hash}\n")).unwrap();
        let auth = c.auth.unwrap();
        let header = |u: &str, p: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        assert!(auth.allows(Some(&header("prometheus", "s3cret"))));
        assert!(auth.allows(Some(&header("prometheus", "s3cret"))), "remembered");
        assert!(!auth.allows(Some(&header("prometheus", "wrong"))));
        assert!(!auth.allows(Some(&header("someone", "s3cret"))));
        assert!(!auth.allows(Some("Bearer x")));
        assert!(!auth.allows(None));
        assert!(c.tls.is_none());
    }

    #[test]
    fn what_is_not_implemented_or_not_a_hash_is_refused_by_name() {
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n")
            .err()
            .unwrap();
        assert!(e.contains("cipher_suites"), "{e}");
        let e = parse("http_server_config:\n  http2: false\n").err().unwrap();
        assert!(e.contains("http_server_config"), "{e}");
        let e = parse("basic_auth_users:\n  alice: plaintext\n").err().unwrap();
        assert!(e.contains("alice") && e.contains("bcrypt"), "{e}");
        let e = parse("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n")
            .err()
            .unwrap();
        assert!(e.contains("/nonexistent.crt"), "{e}");
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n")
            .err()
            .unwrap();
        assert!(e.contains("TLS10"), "{e}");
    }
}
