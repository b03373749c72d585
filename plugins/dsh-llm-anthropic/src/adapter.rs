//! The HTTP adapter: one `POST {base_url}/v1/messages` streaming attempt per call, over the
//! shared client of `dsh-llm-http` (per-route timeouts, same-origin redirects, bounded SSE,
//! UTF-8 repair, cancellation), headers `x-api-key` + `anthropic-version`.
//!
//! See docs/upstream/anthropic.md (Headers; SSE decoding; Errors) and docs/upstream/llm.md
//! (Adapter contract).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dsh_llm::{
    ChunkStream, FinishReason, GenerateOptions, LlmAdapter, LlmFailure, ModelInfo, ProviderInfo,
    StreamChunk, codes,
};
use dsh_llm_http::{
    CredentialSource, EnvCredentials, NoticeFn, SendRoute, Sent, SseBody, Timeouts, aborted,
    body_failure, build_client, idle_failure, redact_url, scrub_userinfo,
};
use tokio_util::sync::CancellationToken;

use crate::config::{ANTHROPIC_VERSION, AnthropicRoute, AnthropicSettings};
use crate::error::AnthropicError;
use crate::parse::StreamTranslator;
use crate::request::{INTERLEAVED_THINKING_BETA, build_body};

struct Route {
    config: AnthropicRoute,
    timeouts: Timeouts,
    client: reqwest::Client,
}

struct Inner {
    routes: Vec<Route>,
    creds: Arc<dyn CredentialSource>,
    notices: std::sync::OnceLock<NoticeFn>,
}

impl Inner {
    fn find(&self, provider: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.config.id == provider)
    }
}

/// The Anthropic Messages adapter serving every Anthropic-format route. Cheap to clone.
#[derive(Clone)]
pub struct AnthropicAdapter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AnthropicAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicAdapter")
            .field("routes", &self.provider_ids())
            .finish()
    }
}

impl AnthropicAdapter {
    /// An adapter over `settings`, reading credentials from the environment at call time.
    ///
    /// # Errors
    /// [`AnthropicError::InvalidSettings`] (an id claimed twice, an empty base URL, a 0
    /// timeout), [`AnthropicError::InvalidBaseUrl`], [`AnthropicError::Client`].
    pub fn new(settings: AnthropicSettings) -> Result<Self, AnthropicError> {
        Self::with_credentials(settings, Arc::new(EnvCredentials))
    }

    /// An adapter resolving credential references through `creds`.
    ///
    /// # Errors
    /// As [`AnthropicAdapter::new`].
    pub fn with_credentials(
        settings: AnthropicSettings,
        creds: Arc<dyn CredentialSource>,
    ) -> Result<Self, AnthropicError> {
        let mut seen = std::collections::BTreeSet::new();
        let mut routes = Vec::new();
        for config in settings.routes {
            if config.base_url.trim().is_empty() {
                return Err(AnthropicError::InvalidSettings(format!(
                    "route {:?} has an empty base_url",
                    config.id
                )));
            }
            config.validate(settings.timeouts)?;
            if !seen.insert(config.id.clone()) {
                return Err(AnthropicError::InvalidSettings(format!(
                    "provider id {:?} is claimed by two routes",
                    config.id
                )));
            }
            let timeouts = config.timeouts.resolve(settings.timeouts);
            let client = build_client(timeouts.connect_ms)
                .map_err(|e| AnthropicError::Client(e.to_string()))?;
            routes.push(Route {
                config,
                timeouts,
                client,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                routes,
                creds,
                notices: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Every provider id served, in route order.
    pub fn provider_ids(&self) -> Vec<String> {
        self.inner
            .routes
            .iter()
            .map(|r| r.config.id.clone())
            .collect()
    }

    /// The route answering to `provider`.
    pub fn route(&self, provider: &str) -> Option<&AnthropicRoute> {
        self.inner.find(provider).map(|r| &r.config)
    }

    /// Sends every provider notice (invalid UTF-8 from the provider) to `f` from now on. Only
    /// the first call takes effect.
    pub fn set_notices(&self, f: NoticeFn) {
        let _ = self.inner.notices.set(f);
    }
}

fn missing_credential(route: &AnthropicRoute, env: &str) -> LlmFailure {
    LlmFailure::new(
        codes::MISSING_CREDENTIAL,
        format!(
            "No API key for provider route {:?}: the environment variable {env} is not set. \
             Create a key in your provider console (for Anthropic: \
             https://console.anthropic.com/settings/keys; for DeepSeek: \
             https://platform.deepseek.com/api_keys), export it as {env} in the shell that \
             runs dsh, or name another variable with api_key_env in [providers.{}] in \
             settings.toml.",
            route.id, route.id
        ),
    )
}

struct Streaming {
    body: SseBody,
    tr: StreamTranslator,
    signal: CancellationToken,
    idle: Duration,
    route: String,
    url: String,
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

fn scrub_reason(reason: &mut FinishReason, base_url: &str) {
    if let FinishReason::Error { failure } | FinishReason::Aborted { failure } = reason {
        failure.message = scrub_userinfo(&failure.message, base_url);
    }
}

/// Sends the request; `Err` = the terminal finish to yield instead of a stream.
async fn start(inner: Arc<Inner>, opts: GenerateOptions) -> Result<Box<Streaming>, FinishReason> {
    let Some(route) = inner.find(&opts.provider) else {
        return Err(FinishReason::Error {
            failure: LlmFailure::new(
                codes::NO_ADAPTER,
                format!("no dsh-llm-anthropic route answers to {:?}", opts.provider),
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
    let built = build_body(config, &opts).map_err(|failure| FinishReason::Error { failure })?;
    let body: Vec<u8> = serde_json::to_vec(&built.body).map_err(|e| FinishReason::Error {
        failure: LlmFailure::new(
            codes::INVALID_REQUEST,
            format!("the request body cannot be serialized: {e}"),
        ),
    })?;
    let prompt_bytes = body.len();
    let signal = opts.signal.clone();
    if signal.is_cancelled() {
        return Err(FinishReason::Aborted { failure: aborted() });
    }
    let request_url = config.messages_url();
    let url = redact_url(&request_url);
    tracing::debug!(route = %config.id, model = %opts.model, %url, "messages request");
    let mut req = route
        .client
        .post(&request_url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("anthropic-version", ANTHROPIC_VERSION)
        .body(body);
    if built.thinking {
        req = req.header("anthropic-beta", INTERLEAVED_THINKING_BETA);
    }
    if let Some(k) = &key {
        req = req.header("x-api-key", k);
    }
    let send_route = SendRoute {
        id: &config.id,
        timeouts: route.timeouts,
        key_env: config.api_key_env.as_deref(),
        key: key.as_deref(),
    };
    let Sent {
        response,
        request_id,
    } = dsh_llm_http::send(send_route, &request_url, req, &signal).await?;
    Ok(Box::new(Streaming {
        body: SseBody::new(response),
        tr: {
            let mut tr = StreamTranslator::new(&config.id, &opts.model);
            tr.set_prompt_bytes(prompt_bytes);
            tr
        },
        signal,
        idle: Duration::from_millis(route.timeouts.idle_ms),
        route: config.id.clone(),
        url,
        base_url: config.base_url.clone(),
        request_id,
        warned_utf8: false,
        inner: inner.clone(),
        session_id: opts.session_id.clone(),
    }))
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
                    let base_url = inner
                        .find(&opts.provider)
                        .map(|r| r.config.base_url.clone())
                        .unwrap_or_default();
                    match start(inner, opts).await {
                        Ok(s) => self.phase = Phase::Streaming(s),
                        Err(mut reason) => {
                            scrub_reason(&mut reason, &base_url);
                            self.queue.push_back(Ok(StreamChunk::Finish {
                                reason,
                                replay_state: None,
                            }));
                        }
                    }
                }
                Phase::Streaming(mut s) => {
                    let mut out = Vec::new();
                    let signal = s.signal.clone();
                    let idle = s.idle;
                    let ev = tokio::select! {
                        biased;
                        () = signal.cancelled() => None,
                        ev = s.body.next_event(idle) => Some(ev),
                    };
                    match ev {
                        None => s.tr.finish_with(aborted(), true, &mut out),
                        Some(Err(())) => {
                            let f = idle_failure(&s.route, &s.url, s.idle);
                            s.tr.finish_with(f, false, &mut out);
                        }
                        Some(Ok(None)) => s.tr.finish_eof(&mut out),
                        Some(Ok(Some(Err(e)))) => {
                            let f = body_failure(&s.route, &s.url, &e);
                            s.tr.finish_with(f, false, &mut out);
                        }
                        Some(Ok(Some(Ok(ev)))) => {
                            if let Some(data) = ev.data.as_deref() {
                                s.tr.push_event(ev.event.as_deref(), data, &mut out);
                            }
                        }
                    }
                    if !s.warned_utf8 && s.body.replaced() > 0 {
                        s.warned_utf8 = true;
                        dsh_llm_http::warn_invalid_utf8(
                            s.inner.notices.get(),
                            s.session_id.as_deref(),
                            &s.route,
                            &s.url,
                        );
                    }
                    for mut c in out {
                        if let StreamChunk::Finish { reason, .. } = &mut c {
                            if let FinishReason::Error { failure } = reason
                                && failure.request_id.is_none()
                            {
                                failure.request_id.clone_from(&s.request_id);
                            }
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

impl LlmAdapter for AnthropicAdapter {
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
            display_name: route.display_name.clone(),
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
}
