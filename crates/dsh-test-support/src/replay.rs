//! The replay HTTP server: serves a [`Script`] on `127.0.0.1` and records every request.
//!
//! Script format: crate docs; wire shapes: docs/upstream/deepseek.md (Stream translation).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::TestSupportError;
use crate::script::{Script, ScriptResponse};

/// How the server picks responses and where it binds.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Pick the response by the number of `assistant` messages in the request (instead of in
    /// order).
    pub stateless: bool,
    /// Port on 127.0.0.1 (0 = random).
    pub port: u16,
    /// Append every recorded request to this file as one JSON line.
    pub log: Option<PathBuf>,
}

/// One request as the server received it.
/// JSON: `{"method","path","headers":{lower-case name: value},"body":<JSON or string>}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// HTTP method (`POST`, `GET`).
    pub method: String,
    /// Request path (e.g. `/chat/completions`).
    pub path: String,
    /// Headers, lower-case names (non-UTF-8 values are skipped).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON; a non-JSON body is kept as a JSON string; empty ⇒ `null`.
    pub body: Value,
}

struct State {
    script: Script,
    next: Mutex<usize>,
    requests: Mutex<Vec<RecordedRequest>>,
    stateless: bool,
    log: Option<Mutex<std::fs::File>>,
}

/// A running replay server. Dropping it stops accepting connections.
pub struct ReplayServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ReplayServer {
    /// Binds `127.0.0.1:<opts.port>` and serves `script` on the current tokio runtime.
    ///
    /// # Errors
    /// [`TestSupportError::InvalidScript`] for a bad script, [`TestSupportError::Io`] when the
    /// port cannot be bound or the log file cannot be opened.
    pub async fn start(script: Script, opts: ReplayOptions) -> Result<Self, TestSupportError> {
        script.validate()?;
        let log = match &opts.log {
            Some(p) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            )),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", opts.port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            script,
            next: Mutex::new(0),
            requests: Mutex::new(Vec::new()),
            stateless: opts.stateless,
            log,
        });
        let st = state.clone();
        // No request-body limit: a resumed long session sends its whole history (axum's
        // default 2 MiB cap answered such requests with 413).
        let app = Router::new()
            .fallback(
                move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                    let st = st.clone();
                    async move { handle(st, method, uri, headers, body).await }
                },
            )
            .layer(axum::extract::DefaultBodyLimit::disable());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, state, task })
    }

    /// Shorthand: sequential mode on a random port.
    ///
    /// # Errors
    /// As [`ReplayServer::start`].
    pub async fn with_responses(responses: Vec<ScriptResponse>) -> Result<Self, TestSupportError> {
        Self::start(Script::new(responses), ReplayOptions::default()).await
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (no trailing slash; append `/v1` if a client wants it).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The bodies of the Anthropic `v1/messages` requests received so far, in arrival order.
    pub fn messages_bodies(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/messages"))
            .map(|r| r.body)
            .collect()
    }

    /// The bodies of the `chat/completions` requests received so far, in arrival order.
    pub fn chat_bodies(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .map(|r| r.body)
            .collect()
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(
    st: Arc<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let body_value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let rec = RecordedRequest {
        method: method.as_str().to_owned(),
        path: path.clone(),
        headers: headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body: body_value,
    };
    if let Some(log) = &st.log
        && let (Ok(mut f), Ok(line)) = (log.lock(), serde_json::to_string(&rec))
    {
        let _ = writeln!(f, "{line}");
    }
    let assistant_count = rec
        .body
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .count()
        })
        .unwrap_or(0);
    if let Ok(mut r) = st.requests.lock() {
        r.push(rec);
    }
    let trimmed = path.strip_prefix("/v1").unwrap_or(&path);
    match (method, trimmed) {
        (Method::GET, "/models") => {
            let data: Vec<Value> = st
                .script
                .models
                .iter()
                .map(|id| json!({"id": id, "object": "model", "owned_by": "replay"}))
                .collect();
            let mut resp = Response::new(Body::from(
                json!({"object": "list", "data": data}).to_string(),
            ));
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        (Method::POST, path @ ("/chat/completions" | "/messages")) => {
            let anthropic = path == "/messages";
            let index = if st.stateless {
                assistant_count
            } else {
                match st.next.lock() {
                    Ok(mut n) => {
                        let i = *n;
                        *n += 1;
                        i
                    }
                    Err(_) => usize::MAX,
                }
            };
            match st.script.responses.get(index) {
                Some(r) => serve(r.clone(), index, anthropic).await,
                None => error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "replay_exhausted",
                    &format!("replay script has no response #{index}"),
                ),
            }
        }
        _ => error_response(StatusCode::NOT_FOUND, "not_found", "no such replay route"),
    }
}

async fn serve(r: ScriptResponse, number: usize, anthropic: bool) -> Response {
    let status = StatusCode::from_u16(r.status.unwrap_or(200)).unwrap_or(StatusCode::OK);
    let delay = r.delay_ms.map(Duration::from_millis);
    let frames = if anthropic {
        r.anthropic_frames(number)
    } else {
        r.frames(number)
    };
    let mut resp = match frames {
        None => {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let text = match &r.body {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            let mut resp = Response::new(Body::from(text));
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Some(frames) => {
            let limit = r.disconnect_after;
            let stream = futures::stream::unfold(0usize, move |i| {
                let frames = frames.clone();
                async move {
                    if limit.is_some_and(|n| i >= n) {
                        if i == usize::MAX {
                            return None;
                        }
                        // let the frames already sent reach the socket before the abort
                        tokio::time::sleep(delay.unwrap_or(Duration::from_millis(20))).await;
                        let err = std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            "scripted disconnect",
                        );
                        return Some((Err(err), usize::MAX));
                    }
                    let frame = frames.get(i)?.clone();
                    if let Some(d) = delay {
                        tokio::time::sleep(d).await;
                    }
                    Some((Ok::<Bytes, std::io::Error>(Bytes::from(frame)), i + 1))
                }
            });
            let mut resp = Response::new(Body::from_stream(stream));
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            resp.headers_mut().insert(
                axum::http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            resp
        }
    };
    *resp.status_mut() = status;
    for (k, v) in r.headers.iter().flatten() {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}
