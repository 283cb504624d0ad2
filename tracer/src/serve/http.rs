//! The HTTP side: hyper 1 on the agent's tokio runtime. A request for
//! `/metrics` goes to the agent loop over a channel and waits for the
//! rendered exposition, so a scrape always sees the events drained up to
//! that moment and no state is shared between the two.
use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
};

use super::metrics::Format;

/// A scrape waiting for the agent loop.
pub struct Scrape {
    pub format: Format,
    pub reply: oneshot::Sender<String>,
}

/// A client that sends no complete request head in this long is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

const INDEX: &str = "gdrtrace serve: transport metrics of GPU and RDMA processes\n\n  /metrics   Prometheus / OpenMetrics exposition\n  /healthz   liveness\n";

fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(req: Request<Incoming>, scrapes: mpsc::Sender<Scrape>) -> Result<Response<Full<Bytes>>, Infallible> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n", PLAIN));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            let (reply, rx) = oneshot::channel();
            match scrapes.send(Scrape { format, reply }).await {
                Ok(()) => match rx.await {
                    Ok(body) => text(StatusCode::OK, body, format.content_type()),
                    Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "agent stopping\n", PLAIN),
                },
                Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "agent stopping\n", PLAIN),
            }
        }
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/" => text(StatusCode::OK, INDEX, PLAIN),
        _ => text(StatusCode::NOT_FOUND, "not found (try /metrics)\n", PLAIN),
    })
}

/// Binds `addr` (so a taken port fails at start, with one line) and
/// returns the accept loop to run.
pub async fn bind(
    addr: SocketAddr,
    scrapes: mpsc::Sender<Scrape>,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let serve = async move {
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
            let scrapes = scrapes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(req, scrapes.clone()));
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    log::debug!("HTTP connection: {e}");
                }
            });
        }
    };
    Ok((local, serve))
}
