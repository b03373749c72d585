//! The HTTP adapter: one `POST {base_url}/chat/completions` streaming attempt per call, with
//! per-route connect / first-byte / idle timeouts, no redirect to another origin, lossy UTF-8
//! repair of the body, estimated usage when the provider sends none, cancellation, credential
//! resolution at call time and `GET /models` discovery.
//!
//! See docs/upstream/llm.md (Adapter contract; Usage and failures) and
//! docs/upstream/deepseek.md (Timeouts; Redirects; Invalid UTF-8; Estimated usage).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dsh_llm::{
    ChunkStream, FinishReason, GenerateOptions, LlmAdapter, LlmFailure, ModelInfo, ProviderInfo,
    StreamChunk, codes,
};
use dsh_llm_http::{
    CredentialSource, EnvCredentials, NoticeFn, SendRoute, Sent, SseBody, Timeouts, aborted,
    body_failure, build_client, http_failure, idle_failure, redact_url, scrub_userinfo,
    transport_failure,
};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{DeepSeekSettings, RouteConfig};
use crate::errors::DeepSeekError;
use crate::parse::{Progress, StreamTranslator};
use crate::request::build_body;

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
        let routes = routes
            .into_iter()
            .map(|config| {
                let timeouts = config.timeouts.resolve(settings.timeouts);
                let client = build_client(timeouts.connect_ms)
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

fn terminal(reason: FinishReason) -> Result<StreamChunk, LlmFailure> {
    Ok(StreamChunk::Finish {
        reason,
        replay_state: None,
    })
}

struct Streaming {
    body: SseBody,
    tr: StreamTranslator,
    signal: CancellationToken,
    idle: Duration,
    route: String,
    /// The request URL for messages (user info redacted).
    url: String,
    /// The route's base URL as configured (to scrub messages of its user info).
    base_url: String,
    request_id: Option<String>,
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
    let idle = Duration::from_millis(route.timeouts.idle_ms);
    let send_route = SendRoute {
        id: &config.id,
        timeouts: route.timeouts,
        key_env: config.api_key_env.as_deref(),
        key: key.as_deref(),
    };
    let Sent {
        response: resp,
        request_id,
    } = dsh_llm_http::send(send_route, &request_url, req, &signal).await?;
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
    Ok(Started::Stream(Box::new(Streaming {
        body: SseBody::new(resp),
        tr,
        signal,
        idle,
        route: config.id.clone(),
        url,
        base_url: config.base_url.clone(),
        request_id,
        warned_utf8: false,
        session_id: opts.session_id.clone(),
        inner: inner.clone(),
    })))
}

/// The one warning (and notice) per response that carried invalid UTF-8 (replaced by U+FFFD).
fn warn_invalid_utf8(inner: &Inner, session_id: Option<&str>, route: &str, url: &str) {
    dsh_llm_http::warn_invalid_utf8(inner.notices.get(), session_id, route, url);
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
                        ev = s.body.next_event(s.idle) => Some(ev),
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
                    if !s.warned_utf8 && s.body.replaced() > 0 {
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
