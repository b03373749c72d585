//! The HTTP adapter: one `POST {base_url}/chat/completions` streaming attempt per call, with
//! per-route connect / first-byte / idle timeouts, no redirect to another origin, lossy UTF-8
//! repair of the body, estimated usage when the provider sends none, cancellation, credential
//! resolution at call time and `GET /models` discovery.
//!
//! See docs/upstream/llm.md (Adapter contract; Usage and failures) and
//! docs/upstream/deepseek.md (Timeouts; Redirects; Invalid UTF-8; Estimated usage).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dsh_llm::{
    ChunkStream, FinishReason, GenerateOptions, LlmAdapter, LlmFailure, ModelInfo, ProviderInfo,
    StreamChunk, codes,
};
use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{
    CredentialSource, DeepSeekSettings, EnvCredentials, RouteConfig, Timeouts, redact_url,
    scrub_userinfo,
};
use crate::errors::{DeepSeekError, http_failure, retry_after_ms, retry_after_ms_header};
use crate::parse::{Progress, StreamTranslator};
use crate::request::build_body;
use crate::utf8::Utf8Repair;

/// `User-Agent` sent on every request: `dsh/<crate version>`.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

/// One configured route with its resolved timeouts and its own HTTP client (reqwest sets the
/// connect timeout per client).
struct Route {
    config: RouteConfig,
    timeouts: Timeouts,
    client: reqwest::Client,
}

struct Inner {
    routes: Vec<Route>,
    timeouts: Timeouts,
    creds: Arc<dyn CredentialSource>,
    notices: std::sync::OnceLock<NoticeFn>,
}

/// Something the user should see about a call that still goes on (today: the provider sent
/// invalid UTF-8, decoded as U+FFFD). Delivered through [`DeepSeekAdapter::set_notices`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderNotice {
    /// The call's session (`GenerateOptions::session_id`), when known.
    pub session_id: Option<String>,
    /// The route id.
    pub route: String,
    /// One line of text, e.g. `deepseek: the provider sent invalid UTF-8 (shown as U+FFFD)`.
    pub message: String,
}

/// A receiver of [`ProviderNotice`]s.
pub type NoticeFn = Arc<dyn Fn(ProviderNotice) + Send + Sync>;

/// Redirects a model request may follow, all to the origin of the original URL.
pub const MAX_REDIRECTS: usize = 5;

/// Failure code of an attempt whose SSE body holds one line or event longer than
/// [`MAX_SSE_LINE_BYTES`]. Not in the default retryable codes: the same server would send the
/// same oversized line again. See docs/upstream/deepseek.md (Bounded SSE lines).
pub const SSE_LINE_TOO_LONG: &str = "SSE_LINE_TOO_LONG";

/// The most bytes one SSE line, or the `data` lines of one event, may hold (16 MiB): the
/// decoder buffers a line until its end, so without a cap a provider sending no newline grows
/// dsh's memory without bound. Beyond it the attempt fails with [`SSE_LINE_TOO_LONG`].
pub const MAX_SSE_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Redirects a model request may follow: at most [`MAX_REDIRECTS`], each to the origin (scheme,
/// host, port) of the original URL. Following one to another origin would re-send the whole
/// conversation (and 307/308 keep the POST body) to a server the user did not configure, so the
/// chain stops and the 3xx answer becomes the failure `REDIRECT_REFUSED` ("redirected the
/// request to another origin", or "too many redirects (5)" for a same-origin chain). See
/// docs/upstream/deepseek.md (Redirects).
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same_origin && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// The DeepSeek / OpenAI-compatible adapter serving every configured route. Cheap to clone.
#[derive(Clone)]
pub struct DeepSeekAdapter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DeepSeekAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeepSeekAdapter")
            .field("routes", &self.provider_ids())
            .finish()
    }
}

type SseEvents = Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>;

impl DeepSeekAdapter {
    /// An adapter over `settings`, reading credentials from the environment at call time.
    ///
    /// # Errors
    /// [`DeepSeekError::InvalidSettings`] for duplicate provider ids or an empty base URL;
    /// [`DeepSeekError::InvalidBaseUrl`] for a base URL that is not an absolute http(s) URL;
    /// [`DeepSeekError::Client`] when the HTTP client cannot be built.
    pub fn new(settings: DeepSeekSettings) -> Result<Self, DeepSeekError> {
        Self::with_credentials(settings, Arc::new(EnvCredentials))
    }

    /// An adapter resolving credential references through `creds`.
    ///
    /// # Errors
    /// As [`DeepSeekAdapter::new`].
    pub fn with_credentials(
        settings: DeepSeekSettings,
        creds: Arc<dyn CredentialSource>,
    ) -> Result<Self, DeepSeekError> {
        let routes = settings.all_routes();
        let mut seen = std::collections::BTreeSet::new();
        for r in &routes {
            if r.base_url.trim().is_empty() {
                return Err(DeepSeekError::InvalidSettings(format!(
                    "route {:?} has an empty base_url",
                    r.id
                )));
            }
            r.validate_base_url()?;
            r.validate_timeouts(settings.timeouts)?;
            for id in std::iter::once(&r.id).chain(&r.aliases) {
                if !seen.insert(id.clone()) {
                    return Err(DeepSeekError::InvalidSettings(format!(
                        "provider id {id:?} is claimed by two routes"
                    )));
                }
            }
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let routes = routes
            .into_iter()
            .map(|config| {
                let timeouts = config.timeouts.resolve(settings.timeouts);
                let client = reqwest::Client::builder()
                    .user_agent(USER_AGENT)
                    .connect_timeout(Duration::from_millis(timeouts.connect_ms))
                    .redirect(redirect_policy())
                    .build()
                    .map_err(|e| DeepSeekError::Client(e.to_string()))?;
                Ok(Route {
                    config,
                    timeouts,
                    client,
                })
            })
            .collect::<Result<Vec<_>, DeepSeekError>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                routes,
                timeouts: settings.timeouts,
                creds,
                notices: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Every provider id served (route ids and aliases), in route order.
    pub fn provider_ids(&self) -> Vec<String> {
        self.inner
            .routes
            .iter()
            .flat_map(|r| {
                std::iter::once(r.config.id.clone()).chain(r.config.aliases.iter().cloned())
            })
            .collect()
    }

    /// The route answering to `provider`.
    pub fn route(&self, provider: &str) -> Option<&RouteConfig> {
        self.inner.find(provider).map(|r| &r.config)
    }

    /// The adapter-wide default timeouts (routes may override them: [`Self::route_timeouts`]).
    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    /// Sends every [`ProviderNotice`] to `f` from now on (the plugin emits them as the kernel
    /// event [`crate::LlmProviderNotice`]). Only the first call takes effect.
    pub fn set_notices(&self, f: NoticeFn) {
        let _ = self.inner.notices.set(f);
    }

    /// The timeouts in force for `provider`'s route.
    pub fn route_timeouts(&self, provider: &str) -> Option<Timeouts> {
        self.inner.find(provider).map(|r| r.timeouts)
    }
}

impl Inner {
    fn find(&self, provider: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.config.answers_to(provider))
    }
}

fn missing_credential(route: &RouteConfig, env: &str) -> LlmFailure {
    // A variable that is present but blank (`DEEPSEEK_API_KEY= dsh …`) is named as such: "not
    // set" would send the person looking for a missing export.
    let state = if std::env::var_os(env).is_some() {
        "is set but empty"
    } else {
        "is not set"
    };
    LlmFailure::new(
        codes::MISSING_CREDENTIAL,
        format!(
            "No API key for provider route {:?}: the environment variable {env} {state}. \
             Create a key in your provider console (for DeepSeek: https://platform.deepseek.com/api_keys), \
             export it as {env} in the shell that runs dsh, or name another variable with \
             api_key_env in the provider's settings (dsh: [providers.<id>] in settings.toml); \
             local servers need no key (leave api_key_env unset).",
            route.id
        ),
    )
}

/// `e` and its causes, `: `-joined, without the URL (the caller names it once).
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
        text = text.replace(&format!(" ({url})"), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// A request that failed before a response: a connect timeout is `TIMEOUT` (message "… timed
/// out after N ms connecting (connect_timeout_ms = N)"), anything else `TRANSPORT` ("… failed:
/// <cause chain>"). Both name the route and the URL.
fn send_failure(route: &Route, url: &str, e: &reqwest::Error) -> LlmFailure {
    let id = &route.config.id;
    if e.is_timeout() {
        let ms = route.timeouts.connect_ms;
        return LlmFailure::new(
            codes::TIMEOUT,
            format!(
                "{id}: POST {url} timed out after {ms} ms connecting (connect_timeout_ms = {ms})"
            ),
        );
    }
    LlmFailure::new(
        codes::TRANSPORT,
        format!("{id}: POST {url} failed: {}", error_chain(e)),
    )
}

fn transport_failure(route: &str, what: &str, e: &reqwest::Error) -> LlmFailure {
    let code = if e.is_timeout() {
        codes::TIMEOUT
    } else {
        codes::TRANSPORT
    };
    LlmFailure::new(code, format!("{route}: {what}: {}", error_chain(e)))
}

/// The stream-idle failure: "… timed out after N ms without data …".
fn idle_failure(route: &str, url: &str, idle: Duration) -> LlmFailure {
    let ms = idle.as_millis();
    LlmFailure::new(
        codes::TIMEOUT,
        format!(
            "{route}: POST {url} timed out after {ms} ms without data from the provider \
             (stream_idle_timeout_ms = {ms})"
        ),
    )
}

fn aborted() -> LlmFailure {
    LlmFailure::new(codes::ABORTED, "the call was cancelled")
}

fn terminal(reason: FinishReason) -> Result<StreamChunk, LlmFailure> {
    Ok(StreamChunk::Finish {
        reason,
        replay_state: None,
    })
}

struct Streaming {
    events: SseEvents,
    activity: Arc<AtomicU64>,
    tr: StreamTranslator,
    signal: CancellationToken,
    idle: Duration,
    route: String,
    /// The request URL for messages (user info redacted).
    url: String,
    /// The route's base URL as configured (to scrub messages of its user info).
    base_url: String,
    request_id: Option<String>,
    utf8: Arc<std::sync::Mutex<Utf8Repair>>,
    warned_utf8: bool,
    inner: Arc<Inner>,
    session_id: Option<String>,
}

enum Phase {
    Start(Box<(Arc<Inner>, GenerateOptions)>),
    Streaming(Box<Streaming>),
    Done,
}

struct Run {
    queue: VecDeque<Result<StreamChunk, LlmFailure>>,
    phase: Phase,
}

/// What a started call turned into.
enum Started {
    /// An SSE body to read.
    Stream(Box<Streaming>),
    /// A non-streaming body, already translated.
    Complete(Vec<StreamChunk>),
}

/// A failure's message with the user info of `base_url` redacted
/// ([`crate::config::redact_url`]): no message dsh prints or stores carries a URL password.
fn scrub_failure(failure: &mut LlmFailure, base_url: &str) {
    failure.message = scrub_userinfo(&failure.message, base_url);
}

/// [`scrub_failure`] on the failure `reason` carries, if any.
fn scrub_reason(reason: &mut FinishReason, base_url: &str) {
    match reason {
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            scrub_failure(failure, base_url);
        }
        _ => {}
    }
}

/// [`send_request`], with every failure it returns scrubbed of the route's URL user info.
async fn start(inner: Arc<Inner>, opts: GenerateOptions) -> Result<Started, FinishReason> {
    let base_url = inner
        .find(&opts.provider)
        .map(|r| r.config.base_url.clone())
        .unwrap_or_default();
    match send_request(inner, opts).await {
        Err(mut reason) => {
            scrub_reason(&mut reason, &base_url);
            Err(reason)
        }
        Ok(Started::Complete(mut chunks)) => {
            for c in &mut chunks {
                if let StreamChunk::Finish { reason, .. } = c {
                    scrub_reason(reason, &base_url);
                }
            }
            Ok(Started::Complete(chunks))
        }
        Ok(started) => Ok(started),
    }
}

/// Sends the request and returns the SSE stream (or the translated non-streaming body), or the
/// terminal chunk to yield instead. Messages name the URL with its user info redacted.
async fn send_request(inner: Arc<Inner>, opts: GenerateOptions) -> Result<Started, FinishReason> {
    let Some(route) = inner.find(&opts.provider) else {
        return Err(FinishReason::Error {
            failure: LlmFailure::new(
                codes::NO_ADAPTER,
                format!("no dsh-llm-deepseek route answers to {:?}", opts.provider),
            ),
        });
    };
    let config = &route.config;
    let key = match &config.api_key_env {
        Some(env) => match inner.creds.resolve(env) {
            Some(k) => Some(k),
            None => {
                return Err(FinishReason::Error {
                    failure: missing_credential(config, env),
                });
            }
        },
        None => None,
    };
    let body = build_body(config, &opts).map_err(|failure| FinishReason::Error { failure })?;
    let body = serde_json::to_vec(&body).map_err(|e| FinishReason::Error {
        failure: LlmFailure::new(
            codes::INVALID_REQUEST,
            format!("the request body cannot be serialized: {e}"),
        ),
    })?;
    let mut tr = StreamTranslator::new();
    tr.set_prompt_bytes(body.len());
    tr.reserve_call_ids(
        opts.messages
            .iter()
            .flat_map(|m| m.tool_calls().map(|(id, _, _)| id.as_str().to_owned())),
    );
    let signal = opts.signal.clone();
    if signal.is_cancelled() {
        return Err(FinishReason::Aborted { failure: aborted() });
    }
    let request_url = config.url("chat/completions");
    let url = redact_url(&request_url);
    tracing::debug!(route = %config.id, model = %opts.model, %url, "chat completion request");
    let mut req = route
        .client
        .post(&request_url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(k) = &key {
        req = req.bearer_auth(k);
    }
    let first_byte = Duration::from_millis(route.timeouts.first_byte_ms);
    let idle = Duration::from_millis(route.timeouts.idle_ms);
    let resp = tokio::select! {
        biased;
        () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
        r = tokio::time::timeout(first_byte, req.send()) => match r {
            Err(_) => return Err(FinishReason::Error { failure: LlmFailure::new(
                codes::TIMEOUT,
                format!(
                    "{}: POST {url} timed out after {} ms waiting for the response headers \
                     (first_byte_timeout_ms = {})",
                    config.id,
                    first_byte.as_millis(),
                    first_byte.as_millis()
                ),
            )}),
            Ok(Err(e)) => return Err(FinishReason::Error {
                failure: send_failure(route, &url, &e),
            }),
            Ok(Ok(resp)) => resp,
        },
    };
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id").or_else(|| header("request-id"));
    if resp.status().is_redirection() {
        let location = header("location").unwrap_or_default();
        let target = resp.url().join(&location).ok();
        let same_origin = target.as_ref().is_some_and(|t| {
            reqwest::Url::parse(&request_url).is_ok_and(|u| u.origin() == t.origin())
        });
        let message = if same_origin {
            format!(
                "{}: POST {url}: too many redirects ({MAX_REDIRECTS}); dsh stops following them \
                 (HTTP {status})",
                config.id
            )
        } else {
            let target = target.map_or(location, |u| u.to_string());
            format!(
                "{}: the provider redirected the request to another origin ({}); dsh does not \
                 follow it (HTTP {status})",
                config.id,
                redact_url(&target)
            )
        };
        let mut failure = LlmFailure::new(codes::REDIRECT_REFUSED, message).with_status(status);
        failure.request_id = request_id;
        return Err(FinishReason::Error { failure });
    }
    if !resp.status().is_success() {
        let retry = header("retry-after-ms")
            .and_then(|v| retry_after_ms_header(&v))
            .or_else(|| header("retry-after").and_then(|v| retry_after_ms(&v)));
        let text = tokio::select! {
            biased;
            () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
            t = tokio::time::timeout(idle, resp.bytes()) => match t {
                Ok(Ok(t)) => String::from_utf8_lossy(&t).into_owned(),
                _ => String::new(),
            },
        };
        let failure = http_failure(
            &config.id,
            status,
            &text,
            retry,
            request_id,
            config.api_key_env.as_deref(),
            key.as_deref(),
        );
        tracing::debug!(route = %config.id, status, code = %failure.code, "chat completion failed");
        return Err(FinishReason::Error { failure });
    }
    let is_json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if is_json {
        // a server that ignored `stream:true`: one complete chat.completion body
        let bytes = tokio::select! {
            biased;
            () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
            t = tokio::time::timeout(idle, resp.bytes()) => match t {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => return Err(FinishReason::Error {
                    failure: transport_failure(&config.id, "the response body failed", &e),
                }),
                Err(_) => return Err(FinishReason::Error {
                    failure: idle_failure(&config.id, &url, idle),
                }),
            },
        };
        let text = String::from_utf8_lossy(&bytes);
        if matches!(text, std::borrow::Cow::Owned(_)) {
            warn_invalid_utf8(&inner, opts.session_id.as_deref(), &config.id, &url);
        }
        let mut out = Vec::new();
        tr.push_completion(&text, &mut out);
        return Ok(Started::Complete(out));
    }
    let activity = Arc::new(AtomicU64::new(0));
    let counter = activity.clone();
    let utf8 = Arc::new(std::sync::Mutex::new(Utf8Repair::default()));
    let repair = utf8.clone();
    let mut guard = LineGuard::default();
    let bytes = resp.bytes_stream().map(move |r| {
        counter.fetch_add(1, Ordering::Relaxed);
        let b = r.map_err(BodyReadError::Http)?;
        guard.push(&b)?;
        Ok(repair.lock().unwrap_or_else(|e| e.into_inner()).push(b))
    });
    let tail = utf8.clone();
    let bytes = bytes.chain(futures::stream::iter(std::iter::from_fn(move || {
        tail.lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish()
            .map(Ok::<bytes::Bytes, BodyReadError>)
    })));
    let events: SseEvents = Box::pin(sse_stream::SseStream::from_bytes_stream(bytes));
    Ok(Started::Stream(Box::new(Streaming {
        events,
        activity,
        tr,
        signal,
        idle,
        route: config.id.clone(),
        url,
        base_url: config.base_url.clone(),
        request_id,
        utf8,
        warned_utf8: false,
        session_id: opts.session_id.clone(),
        inner: inner.clone(),
    })))
}

/// The one warning (and notice) per response that carried invalid UTF-8 (replaced by U+FFFD).
fn warn_invalid_utf8(inner: &Inner, session_id: Option<&str>, route: &str, url: &str) {
    tracing::warn!(
        target: "dsh_llm_deepseek",
        route,
        url,
        "the provider sent invalid UTF-8; it was replaced by U+FFFD"
    );
    if let Some(f) = inner.notices.get() {
        f(ProviderNotice {
            session_id: session_id.map(str::to_owned),
            route: route.to_owned(),
            message: format!(
                "{route}: the provider sent invalid UTF-8; each bad sequence is shown as U+FFFD"
            ),
        });
    }
}

/// Why reading the response body stopped: the transport failed, or the body holds an SSE line
/// (or event) longer than [`MAX_SSE_LINE_BYTES`].
#[derive(Debug, thiserror::Error)]
enum BodyReadError {
    /// The transport failed.
    #[error(transparent)]
    Http(reqwest::Error),
    /// An SSE line or event exceeds the cap.
    #[error("an SSE line or event is longer than {MAX_SSE_LINE_BYTES} bytes")]
    LineTooLong,
}

/// Counts the bytes the SSE decoder holds before the body reaches it: the current line (any
/// line, comments included) and the `data`-carrying lines of the current event (reset by a
/// blank line). Line ends are LF, CR or CRLF, as the SSE grammar has them.
#[derive(Debug, Default)]
struct LineGuard {
    line: usize,
    event: usize,
    comment: bool,
    after_cr: bool,
}

impl LineGuard {
    /// Accounts for one read.
    ///
    /// # Errors
    /// [`BodyReadError::LineTooLong`] once the current line, or the current event, exceeds
    /// [`MAX_SSE_LINE_BYTES`].
    fn push(&mut self, mut read: &[u8]) -> Result<(), BodyReadError> {
        while let Some(&first) = read.first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                read = &read[1..];
                continue;
            }
            let end = read.iter().position(|&c| c == b'\n' || c == b'\r');
            let len = end.unwrap_or(read.len());
            if len > 0 {
                if self.line == 0 {
                    self.comment = first == b':';
                }
                self.line += len;
                let held = if self.comment {
                    self.line
                } else {
                    self.event + self.line
                };
                if held > MAX_SSE_LINE_BYTES {
                    return Err(BodyReadError::LineTooLong);
                }
            }
            let Some(end) = end else { break };
            if self.line == 0 {
                self.event = 0;
            } else if !self.comment {
                self.event += self.line;
            }
            self.line = 0;
            self.after_cr = read[end] == b'\r';
            read = &read[end + 1..];
        }
        Ok(())
    }
}

/// The failure of an SSE body that stopped with `e`: `SSE_LINE_TOO_LONG` for an oversized line,
/// else `TRANSPORT`.
fn body_failure(route: &str, url: &str, e: &sse_stream::Error) -> LlmFailure {
    let too_long = match e {
        sse_stream::Error::Body(b) => {
            matches!(b.downcast_ref(), Some(BodyReadError::LineTooLong))
        }
        _ => false,
    };
    if too_long {
        return LlmFailure::new(
            SSE_LINE_TOO_LONG,
            format!(
                "{route}: POST {url}: the provider sent an SSE line or event longer than \
                 {MAX_SSE_LINE_BYTES} bytes; dsh stops reading the response"
            ),
        );
    }
    LlmFailure::new(
        codes::TRANSPORT,
        format!("{route}: POST {url}: the response body failed: {e}"),
    )
}

/// Waits for the next SSE event under the idle watchdog (any received bytes, including
/// keep-alive comments, restart the timer). `Err(())` = the watchdog fired.
async fn next_event(
    s: &mut Streaming,
) -> Result<Option<Result<sse_stream::Sse, sse_stream::Error>>, ()> {
    loop {
        let before = s.activity.load(Ordering::Relaxed);
        match tokio::time::timeout(s.idle, s.events.next()).await {
            Ok(v) => return Ok(v),
            Err(_) => {
                if s.activity.load(Ordering::Relaxed) == before {
                    return Err(());
                }
            }
        }
    }
}

impl Run {
    async fn step(mut self) -> Option<(Result<StreamChunk, LlmFailure>, Self)> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some((item, self));
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Start(b) => {
                    let (inner, opts) = *b;
                    match start(inner, opts).await {
                        Ok(Started::Stream(s)) => self.phase = Phase::Streaming(s),
                        Ok(Started::Complete(chunks)) => {
                            self.queue.extend(chunks.into_iter().map(Ok))
                        }
                        Err(reason) => self.queue.push_back(terminal(reason)),
                    }
                }
                Phase::Streaming(mut s) => {
                    let mut out = Vec::new();
                    let signal = s.signal.clone();
                    let ev = tokio::select! {
                        biased;
                        () = signal.cancelled() => None,
                        ev = next_event(&mut s) => Some(ev),
                    };
                    match ev {
                        None => s.tr.finish_with(aborted(), true, &mut out),
                        Some(Err(())) => s.tr.finish_with(
                            idle_failure(&s.route, &s.url, s.idle),
                            false,
                            &mut out,
                        ),
                        Some(Ok(None)) => s.tr.finish_eof(&mut out),
                        Some(Ok(Some(Err(e)))) => {
                            s.tr.finish_with(body_failure(&s.route, &s.url, &e), false, &mut out)
                        }
                        Some(Ok(Some(Ok(ev)))) => {
                            if let Some(data) = ev.data.as_deref() {
                                let _: Progress = s.tr.push_data(data, &mut out);
                            }
                        }
                    }
                    if !s.warned_utf8
                        && s.utf8.lock().unwrap_or_else(|e| e.into_inner()).replaced() > 0
                    {
                        s.warned_utf8 = true;
                        warn_invalid_utf8(&s.inner, s.session_id.as_deref(), &s.route, &s.url);
                    }
                    let rid = s.request_id.clone();
                    for mut c in out {
                        if let StreamChunk::Finish {
                            reason: FinishReason::Error { failure },
                            ..
                        } = &mut c
                            && failure.request_id.is_none()
                        {
                            failure.request_id = rid.clone();
                        }
                        if let StreamChunk::Finish { reason, .. } = &mut c {
                            scrub_reason(reason, &s.base_url);
                        }
                        self.queue.push_back(Ok(c));
                    }
                    if !s.tr.is_ended() {
                        self.phase = Phase::Streaming(s);
                    }
                }
            }
        }
    }
}

impl LlmAdapter for DeepSeekAdapter {
    fn stream(&self, opts: GenerateOptions) -> ChunkStream {
        let run = Run {
            queue: VecDeque::new(),
            phase: Phase::Start(Box::new((self.inner.clone(), opts))),
        };
        Box::pin(futures::stream::unfold(run, Run::step))
    }

    fn provider_info(&self, provider: &str) -> Option<ProviderInfo> {
        let route = self.route(provider)?;
        let configured = route
            .api_key_env
            .as_ref()
            .is_none_or(|env| self.inner.creds.resolve(env).is_some());
        Some(ProviderInfo {
            id: provider.to_owned(),
            display_name: route
                .display_name
                .clone()
                .unwrap_or_else(|| route.id.clone()),
            configured,
            setup_hint: match (&route.api_key_env, configured) {
                (Some(env), false) => Some(missing_credential(route, env).message),
                _ => None,
            },
        })
    }

    fn models(&self, provider: &str) -> Vec<ModelInfo> {
        self.route(provider)
            .map(|r| r.models.iter().map(|m| m.to_info()).collect())
            .unwrap_or_default()
    }

    fn discover_models(
        &self,
        provider: &str,
    ) -> BoxFuture<'static, Result<Vec<ModelInfo>, LlmFailure>> {
        let inner = self.inner.clone();
        let route = self.route(provider).cloned();
        let found = self
            .inner
            .find(provider)
            .map(|r| (r.client.clone(), r.timeouts));
        let provider = provider.to_owned();
        Box::pin(async move {
            let route = route.ok_or_else(|| {
                LlmFailure::new(
                    codes::NO_ADAPTER,
                    format!("no dsh-llm-deepseek route answers to {provider:?}"),
                )
            })?;
            let key = match &route.api_key_env {
                Some(env) => Some(
                    inner
                        .creds
                        .resolve(env)
                        .ok_or_else(|| missing_credential(&route, env))?,
                ),
                None => None,
            };
            let (client, timeouts) = found.ok_or_else(|| {
                LlmFailure::new(
                    codes::NO_ADAPTER,
                    format!("no dsh-llm-deepseek route answers to {provider:?}"),
                )
            })?;
            let mut req = client.get(route.url("models"));
            if let Some(k) = &key {
                req = req.bearer_auth(k);
            }
            let timeout = Duration::from_millis(timeouts.first_byte_ms);
            let resp = tokio::time::timeout(timeout, req.send())
                .await
                .map_err(|_| LlmFailure::new(codes::TIMEOUT, "model list request timed out"))?
                .map_err(|e| transport_failure(&route.id, "model list request failed", &e))?;
            let status = resp.status().as_u16();
            let request_id = resp
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let text = tokio::time::timeout(timeout, resp.text())
                .await
                .map_err(|_| LlmFailure::new(codes::TIMEOUT, "model list body timed out"))?
                .map_err(|e| transport_failure(&route.id, "model list body failed", &e))?;
            if !(200..300).contains(&status) {
                return Err(http_failure(
                    &route.id,
                    status,
                    &text,
                    None,
                    request_id,
                    route.api_key_env.as_deref(),
                    key.as_deref(),
                ));
            }
            parse_model_list(&route, &text)
        })
    }
}

/// Parses a `GET /models` body (`{"data":[{"id"},…]}`; no other field assumed) into catalog
/// infos: ids in body order, facts from the route's catalog when the id is listed there.
///
/// # Errors
/// `TRANSPORT` when the body is not JSON or has no `data` array of objects with string ids.
pub fn parse_model_list(route: &RouteConfig, body: &str) -> Result<Vec<ModelInfo>, LlmFailure> {
    let v: Value = serde_json::from_str(body.trim())
        .map_err(|e| LlmFailure::new(codes::TRANSPORT, format!("model list is not JSON: {e}")))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmFailure::new(codes::TRANSPORT, "model list has no `data` array"))?;
    data.iter()
        .map(|m| {
            let id = m.get("id").and_then(Value::as_str).ok_or_else(|| {
                LlmFailure::new(codes::TRANSPORT, "model list entry without a string `id`")
            })?;
            Ok(route
                .model(id)
                .map(|e| e.to_info())
                .unwrap_or_else(|| ModelInfo::new(id)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(reads: &[&[u8]]) -> Result<(), BodyReadError> {
        let mut g = LineGuard::default();
        reads.iter().try_for_each(|r| g.push(r))
    }

    #[test]
    fn the_line_guard_counts_lines_and_events_and_resets_on_blank_lines() {
        let big = vec![b'a'; MAX_SSE_LINE_BYTES / 2];
        let mut line = b"data: ".to_vec();
        line.extend_from_slice(&big);
        // two half-cap data lines in two events (LF, CRLF, CR blank lines): fine
        for sep in [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"] {
            assert!(feed(&[&line, sep, &line, sep]).is_ok());
        }
        // a CRLF split across reads is one line end, not a blank line
        assert!(matches!(
            feed(&[&line, b"\r", b"\n", &line, b"\n", &line, b"\n"]),
            Err(BodyReadError::LineTooLong)
        ));
        // comments do not add to the event but are bounded as lines
        assert!(feed(&[b":", &big, b"\n:", &big, b"\n:", &big, b"\n\n"]).is_ok());
        let long = vec![b'x'; MAX_SSE_LINE_BYTES];
        assert!(feed(&[&long, b"\n"]).is_ok());
        assert!(matches!(
            feed(&[&long, b"x"]),
            Err(BodyReadError::LineTooLong)
        ));
        assert!(matches!(
            feed(&[b":", &long]),
            Err(BodyReadError::LineTooLong)
        ));
    }

    #[test]
    fn urls_are_shown_without_their_user_info() {
        assert_eq!(
            redact_url("http://user:s3cret@127.0.0.1:18801/v1"),
            "http://user:***@127.0.0.1:18801/v1"
        );
        assert_eq!(redact_url("https://tok@h"), "https://***@h");
        assert_eq!(redact_url("https://h/p@q"), "https://h/p@q");
        assert_eq!(redact_url("notaurl"), "notaurl");
        assert_eq!(
            scrub_userinfo(
                "for url (http://user:s3cret@h/) and s3cret",
                "http://user:s3cret@h"
            ),
            "for url (http://user:***@h/) and ***"
        );
    }
}
