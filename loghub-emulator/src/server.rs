//! The HTTP server: the listener, one task per connection, graceful shutdown, the control API
//! under `/_emulator/`, and the answer every LogHub call shares (`x-log-requestid`, `Date`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api;
use crate::auth::AccessKey;
use crate::control::{Control, Fault};
use crate::error::ApiError;
use crate::state::Store;

/// An emulator to start: its configuration. [`Emulator::start`] starts one that checks no
/// signature.
#[derive(Debug, Clone, Default)]
pub struct Emulator {
    access_key: Option<AccessKey>,
}

/// A running emulator. Dropping it leaves the server running until the runtime ends;
/// [`Running::shutdown`] stops it and waits for every connection.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    token: CancellationToken,
    tracker: TaskTracker,
}

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Mutex<Store>,
    control: Mutex<Control>,
    pub(crate) access_key: Option<AccessKey>,
    request_ids: AtomicU64,
    started: u64,
}

impl Shared {
    /// The store, locked. A handler that panicked while holding it left it as it was: the lock
    /// is taken all the same rather than failing every later call.
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request id as LogHub writes them: 24 uppercase hexadecimal digits.
    fn request_id(&self) -> String {
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        format!("{:08X}{:016X}", self.started as u32, n)
    }
}

impl Emulator {
    /// An emulator that checks the headers of signed requests but not their signatures.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also checks every signature with this access key, as LogHub does: another id is
    /// refused with `Unauthorized`, another secret with `SignatureNotMatch` (both 401).
    #[must_use]
    pub fn access_key(mut self, id: impl Into<String>, secret: impl Into<String>) -> Self {
        self.access_key = Some(AccessKey {
            id: id.into(),
            secret: secret.into(),
        });
        self
    }

    /// Starts an emulator with the default configuration on `addr` (`"127.0.0.1:0"` for any
    /// free port).
    pub async fn start(addr: impl ToSocketAddrs) -> io::Result<Running> {
        Emulator::new().listen(addr).await
    }

    /// Binds `addr` and serves on it.
    pub async fn listen(self, addr: impl ToSocketAddrs) -> io::Result<Running> {
        let listener = TcpListener::bind(addr).await?;
        self.serve_on(listener)
    }

    /// Serves on a listener bound beforehand (a test can bind before it sets the proxy
    /// variables and before any thread exists). Must be called within a Tokio runtime.
    pub fn serve(self, listener: std::net::TcpListener) -> io::Result<Running> {
        listener.set_nonblocking(true)?;
        self.serve_on(TcpListener::from_std(listener)?)
    }

    fn serve_on(self, listener: TcpListener) -> io::Result<Running> {
        let addr = listener.local_addr()?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            control: Mutex::new(Control::default()),
            access_key: self.access_key,
            request_ids: AtomicU64::new(0),
            started,
        });
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(accept(listener, shared, token.clone(), tracker.clone()));
        Ok(Running {
            addr,
            token,
            tracker,
        })
    }
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`: the HTTP proxy to give clients (`http_proxy`), or the URL of the control
    /// API.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets every connection finish the call it is serving (an injected delay
    /// is cut short), and waits for them.
    pub async fn shutdown(self) {
        self.token.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

async fn accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    token: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let stream = tokio::select! {
            _ = token.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (shared, token) = (shared.clone(), token.clone());
        tracker.spawn(async move {
            let service = {
                let (shared, token) = (shared.clone(), token.clone());
                service_fn(move |req| handle(req, shared.clone(), token.clone()))
            };
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = token.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// One answer, before the headers every answer carries.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: Option<&'static str>,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(status: u16, value: &impl serde::Serialize) -> Self {
        Reply {
            status,
            content_type: Some("application/json"),
            headers: Vec::new(),
            body: serde_json::to_vec(value).expect("answers serialize"),
        }
    }

    pub(crate) fn empty() -> Self {
        Reply {
            status: 200,
            content_type: None,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub(crate) fn error(error: &ApiError) -> Self {
        Reply {
            status: error.status,
            content_type: Some("application/json"),
            headers: Vec::new(),
            body: error.body().into_bytes(),
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    token: CancellationToken,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let reply = match body.collect().await {
        Err(e) => Reply::error(&ApiError::new(
            400,
            "PostBodyInvalid",
            format!("the body could not be read: {e}"),
        )),
        Ok(body) => {
            let body = body.to_bytes();
            if parts.uri.path().starts_with("/_emulator/") {
                control(&parts.method, parts.uri.path(), &body, &shared)
            } else {
                api::handle(&parts, body, &shared, &token).await
            }
        }
    };
    let mut response = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("server", "loghub-emulator")
        .header(
            "date",
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        )
        .header("x-log-requestid", shared.request_id());
    if let Some(content_type) = reply.content_type {
        response = response.header("content-type", content_type);
    }
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    Ok(response
        .body(Full::new(Bytes::from(reply.body)))
        .expect("the answer's headers are valid"))
}

/// The control API (see the crate docs).
fn control(method: &Method, path: &str, body: &[u8], shared: &Shared) -> Reply {
    let bad = |message: String| Reply::json(400, &json!({ "error": message }));
    match (method, path) {
        (&Method::GET, "/_emulator/ready") => Reply::json(200, &json!({ "ready": true })),
        (&Method::POST, "/_emulator/faults") => match serde_json::from_slice::<Fault>(body) {
            Err(e) => bad(format!("not a fault: {e}")),
            Ok(fault) => match fault.validate() {
                Err(e) => bad(e),
                Ok(()) => {
                    shared.control().add_fault(fault);
                    Reply::json(200, &json!({}))
                }
            },
        },
        (&Method::DELETE, "/_emulator/faults") => {
            shared.control().clear_faults();
            Reply::json(200, &json!({}))
        }
        (&Method::GET, "/_emulator/requests") => Reply::json(200, &shared.control().counts()),
        (&Method::DELETE, "/_emulator/requests") => {
            shared.control().reset_counts();
            Reply::json(200, &json!({}))
        }
        _ => Reply::json(
            404,
            &json!({ "error": format!("no control call {method} {path}") }),
        ),
    }
}
