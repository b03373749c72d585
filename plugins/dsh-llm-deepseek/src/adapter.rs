//! The HTTP adapter: one `POST {base_url}/chat/completions` streaming attempt per call, with
//! connect / first-byte / idle timeouts, cancellation, credential resolution at call time and
//! `GET /models` discovery.
//!
//! See docs/upstream/llm.md (Adapter contract; Usage and failures) and
//! docs/upstream/deepseek.md.

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

use crate::config::{CredentialSource, DeepSeekSettings, EnvCredentials, RouteConfig, Timeouts};
use crate::errors::{DeepSeekError, http_failure, retry_after_ms};
use crate::parse::{Progress, StreamTranslator};
use crate::request::build_body;

/// `User-Agent` sent on every request: `dsh/<crate version>`.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

struct Inner {
    routes: Vec<RouteConfig>,
    timeouts: Timeouts,
    client: reqwest::Client,
    creds: Arc<dyn CredentialSource>,
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
            for id in std::iter::once(&r.id).chain(&r.aliases) {
                if !seen.insert(id.clone()) {
                    return Err(DeepSeekError::InvalidSettings(format!(
                        "provider id {id:?} is claimed by two routes"
                    )));
                }
            }
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .connect_timeout(Duration::from_millis(settings.timeouts.connect_ms))
            .build()
            .map_err(|e| DeepSeekError::Client(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                routes,
                timeouts: settings.timeouts,
                client,
                creds,
            }),
        })
    }

    /// Every provider id served (route ids and aliases), in route order.
    pub fn provider_ids(&self) -> Vec<String> {
        self.inner
            .routes
            .iter()
            .flat_map(|r| std::iter::once(r.id.clone()).chain(r.aliases.iter().cloned()))
            .collect()
    }

    /// The route answering to `provider`.
    pub fn route(&self, provider: &str) -> Option<&RouteConfig> {
        self.inner.routes.iter().find(|r| r.answers_to(provider))
    }

    /// The timeouts in force.
    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }
}

fn missing_credential(route: &RouteConfig, env: &str) -> LlmFailure {
    LlmFailure::new(
        codes::MISSING_CREDENTIAL,
        format!(
            "No API key for provider route {:?}: the environment variable {env} is not set. \
             Create a key in your provider console (for DeepSeek: https://platform.deepseek.com/api_keys), \
             export it as {env} in the shell that runs dsh, or name another variable with \
             api_key_env in the provider's settings (dsh: [providers.<id>] in settings.toml); \
             local servers need no key (leave api_key_env unset).",
            route.id
        ),
    )
}

fn transport_failure(route: &str, what: &str, e: &reqwest::Error) -> LlmFailure {
    let code = if e.is_timeout() {
        codes::TIMEOUT
    } else {
        codes::TRANSPORT
    };
    LlmFailure::new(code, format!("{route}: {what}: {e}"))
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
    request_id: Option<String>,
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

/// Sends the request and returns the SSE stream (or the translated non-streaming body), or the
/// terminal chunk to yield instead.
async fn start(inner: Arc<Inner>, opts: GenerateOptions) -> Result<Started, FinishReason> {
    let Some(route) = inner
        .routes
        .iter()
        .find(|r| r.answers_to(&opts.provider))
        .cloned()
    else {
        return Err(FinishReason::Error {
            failure: LlmFailure::new(
                codes::NO_ADAPTER,
                format!("no dsh-llm-deepseek route answers to {:?}", opts.provider),
            ),
        });
    };
    let key = match &route.api_key_env {
        Some(env) => match inner.creds.resolve(env) {
            Some(k) => Some(k),
            None => {
                return Err(FinishReason::Error {
                    failure: missing_credential(&route, env),
                });
            }
        },
        None => None,
    };
    let body = build_body(&route, &opts).map_err(|failure| FinishReason::Error { failure })?;
    let signal = opts.signal.clone();
    if signal.is_cancelled() {
        return Err(FinishReason::Aborted { failure: aborted() });
    }
    let url = route.url("chat/completions");
    tracing::debug!(route = %route.id, model = %opts.model, %url, "chat completion request");
    let mut req = inner
        .client
        .post(&url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(&body);
    if let Some(k) = &key {
        req = req.bearer_auth(k);
    }
    let first_byte = Duration::from_millis(inner.timeouts.first_byte_ms);
    let idle = Duration::from_millis(inner.timeouts.idle_ms);
    let resp = tokio::select! {
        biased;
        () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
        r = tokio::time::timeout(first_byte, req.send()) => match r {
            Err(_) => return Err(FinishReason::Error { failure: LlmFailure::new(
                codes::TIMEOUT,
                format!("{}: no response within {} ms", route.id, first_byte.as_millis()),
            )}),
            Ok(Err(e)) => return Err(FinishReason::Error {
                failure: transport_failure(&route.id, "request failed", &e),
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
    if !resp.status().is_success() {
        let retry = header("retry-after-ms")
            .and_then(|v| v.trim().parse::<u64>().ok().filter(|n| *n > 0))
            .or_else(|| header("retry-after").and_then(|v| retry_after_ms(&v)));
        let text = tokio::select! {
            biased;
            () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
            t = tokio::time::timeout(idle, resp.text()) => match t {
                Ok(Ok(t)) => t,
                _ => String::new(),
            },
        };
        let failure = http_failure(
            &route.id,
            status,
            &text,
            retry,
            request_id,
            route.api_key_env.as_deref(),
            key.as_deref(),
        );
        tracing::debug!(route = %route.id, status, code = %failure.code, "chat completion failed");
        return Err(FinishReason::Error { failure });
    }
    let is_json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if is_json {
        // a server that ignored `stream:true`: one complete chat.completion body
        let text = tokio::select! {
            biased;
            () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
            t = tokio::time::timeout(idle, resp.text()) => match t {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => return Err(FinishReason::Error {
                    failure: transport_failure(&route.id, "the response body failed", &e),
                }),
                Err(_) => return Err(FinishReason::Error { failure: LlmFailure::new(
                    codes::TIMEOUT,
                    format!("{}: no data from the provider for {} ms", route.id, idle.as_millis()),
                )}),
            },
        };
        let mut tr = StreamTranslator::new();
        let mut out = Vec::new();
        tr.push_completion(&text, &mut out);
        return Ok(Started::Complete(out));
    }
    let activity = Arc::new(AtomicU64::new(0));
    let counter = activity.clone();
    let bytes = resp.bytes_stream().map(move |r| {
        counter.fetch_add(1, Ordering::Relaxed);
        r
    });
    let events: SseEvents = Box::pin(sse_stream::SseStream::from_bytes_stream(bytes));
    Ok(Started::Stream(Box::new(Streaming {
        events,
        activity,
        tr: StreamTranslator::new(),
        signal,
        idle,
        route: route.id.clone(),
        request_id,
    })))
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
                            LlmFailure::new(
                                codes::TIMEOUT,
                                format!(
                                    "{}: no data from the provider for {} ms",
                                    s.route,
                                    s.idle.as_millis()
                                ),
                            ),
                            false,
                            &mut out,
                        ),
                        Some(Ok(None)) => s.tr.finish_eof(&mut out),
                        Some(Ok(Some(Err(e)))) => s.tr.finish_with(
                            LlmFailure::new(
                                codes::TRANSPORT,
                                format!("{}: the response body failed: {e}", s.route),
                            ),
                            false,
                            &mut out,
                        ),
                        Some(Ok(Some(Ok(ev)))) => {
                            if let Some(data) = ev.data.as_deref() {
                                let _: Progress = s.tr.push_data(data, &mut out);
                            }
                        }
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
            let mut req = inner.client.get(route.url("models"));
            if let Some(k) = &key {
                req = req.bearer_auth(k);
            }
            let timeout = Duration::from_millis(inner.timeouts.first_byte_ms);
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
