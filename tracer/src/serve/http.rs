//! The HTTP side: hyper 1 on a thread and a tokio runtime of its own. A
//! request for `/metrics` goes to the agent loop over a channel and waits
//! for the rendered exposition, so a scrape always sees the events drained
//! up to that moment and no state is shared between the two. `/healthz`
//! and `/readyz` are answered here from [`Health`], without the agent loop:
//! a loop stuck in a call still gets its liveness probe answered (503,
//! naming what stalled) rather than timed out.
//!
//! With `--web-config-file` (`webconfig.rs`) connections are TLS and
//! `/metrics` asks for basic auth; the two probes answer without a
//! password (they say only whether the agent runs).
use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
};

use super::{metrics::Format, webconfig::WebConfig};

/// A scrape waiting for the agent loop.
pub struct Scrape {
    pub format: Format,
    pub reply: oneshot::Sender<String>,
}

/// A client that sends no complete request head in this long is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A scrape the agent loop has not answered in this long gets a 503 (the
/// loop is stalled; `/healthz` says so too).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(20);

const INDEX: &str = "gdrtrace serve: transport metrics of GPU and RDMA processes\n\n  /metrics   Prometheus / OpenMetrics exposition\n  /healthz   liveness: the event loop and the ring-buffer reader keep turning\n  /readyz    readiness: probes attached, running processes scanned\n";

/// What the probes answer from: heartbeats the agent loop writes, read here.
#[derive(Debug)]
pub struct Health {
    start: Instant,
    /// Milliseconds since `start` of the agent loop's last turn.
    loop_beat: AtomicU64,
    /// ... and of the ring-buffer reader's last return (it returns at least
    /// every drain beat, 50 ms, with or without records).
    reader_beat: AtomicU64,
    ready: AtomicBool,
    /// Older heartbeats than this fail `/healthz`.
    pub stall_after: Duration,
}

impl Health {
    pub fn new(stall_after: Duration) -> Self {
        Self {
            start: Instant::now(),
            loop_beat: AtomicU64::new(0),
            reader_beat: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            stall_after,
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn beat_loop(&self) {
        self.loop_beat.store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn beat_reader(&self) {
        self.reader_beat.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Probes attached and the processes running at start scanned.
    pub fn set_ready(&self) {
        self.beat_loop();
        self.beat_reader();
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// `Err(why)` when the loop or the reader has not turned for
    /// `stall_after` (checked from the moment the agent is ready: its
    /// start-up, attaching every probe, may take longer).
    pub fn check(&self) -> Result<(), String> {
        self.check_at(self.now_ms())
    }

    fn check_at(&self, now_ms: u64) -> Result<(), String> {
        if !self.is_ready() {
            return Ok(());
        }
        let limit = self.stall_after.as_millis() as u64;
        for (what, beat) in [
            ("the event loop", &self.loop_beat),
            ("the ring-buffer reader", &self.reader_beat),
        ] {
            let age = now_ms.saturating_sub(beat.load(Ordering::Relaxed));
            if age > limit {
                return Err(format!(
                    "{what} has not run for {:.1} s (limit {:.0} s)",
                    age as f64 / 1e3,
                    self.stall_after.as_secs_f64()
                ));
            }
        }
        Ok(())
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

const PLAIN: &str = "text/plain; charset=utf-8";

/// Whether `Accept-Encoding` takes gzip (Prometheus sends `gzip`): named
/// without `q=0`.
fn wants_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.into_iter().flat_map(|v| v.split(',')).any(|coding| {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")) && !refused
    })
}

/// The exposition gzip-compressed (a tenth of its size on the wire), as
/// Prometheus client libraries serve it; plain if compressing fails.
fn gzipped(body: String, content_type: &str) -> Response<Full<Bytes>> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let Ok(zipped) = enc.write_all(body.as_bytes()).and_then(|()| enc.finish()) else {
        return text(StatusCode::OK, body, content_type);
    };
    let mut r = text(StatusCode::OK, zipped, content_type);
    let h = r.headers_mut();
    h.insert(header::CONTENT_ENCODING, header::HeaderValue::from_static("gzip"));
    h.insert(header::VARY, header::HeaderValue::from_static("Accept-Encoding"));
    r
}

async fn handle(
    req: Request<Incoming>,
    scrapes: mpsc::Sender<Scrape>,
    health: Arc<Health>,
    web: Arc<Option<WebConfig>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n", PLAIN));
    }
    let path = req.uri().path();
    // The probes and the index tell nothing about the node's processes.
    if !matches!(path, "/healthz" | "/readyz" | "/")
        && let Some(auth) = web.as_ref().as_ref().and_then(|w| w.auth.as_ref())
    {
        let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !auth.allows(given) {
            let mut r = text(StatusCode::UNAUTHORIZED, "unauthorized\n", PLAIN);
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"gdrtrace\""),
            );
            return Ok(r);
        }
    }
    Ok(match path {
        "/metrics" => {
            let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            let (reply, rx) = oneshot::channel();
            let gzip = wants_gzip(req.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()));
            match scrapes.send(Scrape { format, reply }).await {
                Ok(()) => match tokio::time::timeout(SCRAPE_TIMEOUT, rx).await {
                    Ok(Ok(body)) if gzip => gzipped(body, format.content_type()),
                    Ok(Ok(body)) => text(StatusCode::OK, body, format.content_type()),
                    Ok(Err(_)) => text(StatusCode::SERVICE_UNAVAILABLE, "agent stopping\n", PLAIN),
                    Err(_) => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the agent loop did not answer in time (see /healthz)\n",
                        PLAIN,
                    ),
                },
                Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "agent stopping\n", PLAIN),
            }
        }
        "/healthz" => match health.check() {
            Ok(()) => text(StatusCode::OK, "ok\n", PLAIN),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {why}\n"), PLAIN),
        },
        "/readyz" => {
            if health.is_ready() {
                text(StatusCode::OK, "ready\n", PLAIN)
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "starting: attaching probes and scanning running processes\n",
                    PLAIN,
                )
            }
        }
        "/" => text(StatusCode::OK, INDEX, PLAIN),
        _ => text(StatusCode::NOT_FOUND, "not found (try /metrics)\n", PLAIN),
    })
}

async fn accept_loop(
    listener: TcpListener,
    scrapes: mpsc::Sender<Scrape>,
    health: Arc<Health>,
    web: Arc<Option<WebConfig>>,
) {
    let tls = web
        .as_ref()
        .as_ref()
        .and_then(|w| w.tls.clone())
        .map(tokio_rustls::TlsAcceptor::from);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of fds and the like: wait rather than spin.
                log::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (scrapes, health, web, tls) = (scrapes.clone(), health.clone(), web.clone(), tls.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, scrapes.clone(), health.clone(), web.clone()));
            let builder = {
                let mut b = http1::Builder::new();
                b.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
                b
            };
            let r = match tls {
                Some(acceptor) => match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => builder.serve_connection(TokioIo::new(s), service).await,
                    Ok(Err(e)) => {
                        log::debug!("TLS handshake: {e}");
                        return;
                    }
                    Err(_) => return,
                },
                None => builder.serve_connection(TokioIo::new(stream), service).await,
            };
            if let Err(e) = r {
                log::debug!("HTTP connection: {e}");
            }
        });
    }
}

/// Binds `listen` (so a taken port fails at start, with one line) and serves
/// on a thread of its own; returns the bound address.
pub fn spawn(
    listen: Listen,
    scrapes: mpsc::Sender<Scrape>,
    health: Arc<Health>,
    web: Option<WebConfig>,
) -> std::io::Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    let web = Arc::new(web);
    std::thread::Builder::new()
        .name("gdrtrace-http".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match bind(listen).await.and_then(|l| Ok((l.local_addr()?, l))) {
                    Ok((local, l)) => {
                        let _ = tx.send(Ok(local));
                        l
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                accept_loop(listener, scrapes, health, web).await;
            });
        })?;
    rx.recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the HTTP thread exited")))
}

/// What `--listen` takes: `HOST:PORT`, or `:PORT` for every interface, as
/// node_exporter and other Go exporters read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    Addr(SocketAddr),
    AnyHost(u16),
}

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(port) = s.strip_prefix(':') {
            return port
                .parse()
                .map(Listen::AnyHost)
                .map_err(|_| format!("{s:?}: the port after ':' is not a number from 0 to 65535"));
        }
        s.parse().map(Listen::Addr).map_err(|_| {
            format!("{s:?} is not an address to listen on: HOST:PORT (127.0.0.1:9464, [::1]:9464) or :PORT (every interface)")
        })
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Addr(a) => write!(f, "{a}"),
            Listen::AnyHost(p) => write!(f, ":{p}"),
        }
    }
}

/// `:PORT` binds the IPv6 wildcard, which takes IPv4 too (Linux's default
/// `bindv6only=0`, as Go's listener does), or IPv4's where IPv6 is off.
async fn bind(listen: Listen) -> std::io::Result<TcpListener> {
    match listen {
        Listen::Addr(a) => TcpListener::bind(a).await,
        Listen::AnyHost(port) => match TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).await {
            Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
                TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)).await
            }
            r => r,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_host_port_and_a_bare_port() {
        assert_eq!(":9464".parse(), Ok(Listen::AnyHost(9464)));
        assert_eq!(
            "0.0.0.0:9464".parse(),
            Ok(Listen::Addr("0.0.0.0:9464".parse().expect("an address")))
        );
        assert_eq!(
            "[::1]:80".parse::<Listen>().map(|l| l.to_string()),
            Ok("[::1]:80".into())
        );
        for bad in [":", ":http", ":70000", "9464", "localhost"] {
            assert!(bad.parse::<Listen>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gzip_only_when_the_scraper_takes_it() {
        assert!(wants_gzip(Some("gzip")));
        assert!(wants_gzip(Some("deflate, GZIP;q=0.5")));
        assert!(!wants_gzip(Some("gzip;q=0")));
        assert!(!wants_gzip(Some("identity")));
        assert!(!wants_gzip(None));
    }

    #[test]
    fn health_fails_when_the_loop_or_the_reader_stalls_and_not_before_ready() {
        let h = Health::new(Duration::from_secs(30));
        assert!(h.check_at(100_000).is_ok(), "not judged before the agent is ready");
        assert!(!h.is_ready());
        h.set_ready();
        let t = h.now_ms();
        assert!(h.check_at(t + 29_000).is_ok());
        let e = h.check_at(t + 31_000).unwrap_err();
        assert!(e.contains("event loop"), "{e}");
        h.loop_beat.store(t + 31_000, Ordering::Relaxed);
        let e = h.check_at(t + 31_000).unwrap_err();
        assert!(e.contains("ring-buffer reader"), "{e}");
        h.reader_beat.store(t + 31_000, Ordering::Relaxed);
        assert!(h.check_at(t + 31_000).is_ok());
    }
}
