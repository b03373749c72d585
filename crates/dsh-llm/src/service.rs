//! [`LlmService`]: the adapter registry and the normalised, interceptable model-call stream
//! (`ctx.llm` upstream), provided as a kernel service by this crate's plugin.
//!
//! See docs/upstream/llm.md (Runtime and adapter seam; Adapter contract).
//!
//! - Routes: [`LlmService::register_adapter`] is all-or-nothing; the returned [`AdapterHandle`]
//!   unregisters on drop/dispose (it is a kernel effect of the scope it was registered through, so
//!   it also vanishes with that scope) and offers an atomic [`AdapterHandle::replace`]. Every
//!   topology commit emits `llm/adapters-updated` ([`AdaptersUpdated`]).
//! - Calls: [`LlmService::stream`] runs the `llm/stream` waterfall ([`LlmStream`]); its terminal
//!   `next` selects the adapter, materialises adapter defaults, strips replay state another
//!   adapter owns, and normalises every adapter-side failure (no adapter, unsupported effort,
//!   `Err` items, panics, cancellation) into one terminal `finish {error|aborted}` chunk. It also
//!   enforces the contract: nothing is forwarded after `finish`, and a `stop` finish after zero
//!   blocks becomes `finish {error, EMPTY_RESPONSE}`. Failures produced by `llm/stream`
//!   listeners themselves stay as they are (`Err` items reach the consumer).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, Context, Disposer, Registration, ScopeKey};
use futures::StreamExt;
use futures::stream;

use crate::adapter::{ChunkStream, LlmAdapter, ModelInfo, ProviderInfo};
use crate::chunk::{FinishReason, LlmFailure, StreamChunk, codes};
use crate::content::{Message, MessageSource, Role};
use crate::error::LlmError;
use crate::models::{LlmSettings, ModelCatalog, ModelLimits};
use crate::request::{AdapterDefaults, EpochHeader, GenerateOptions, LlmCallConfig, ToolSchema};

dsh_kernel::event! {
    /// `llm/stream` (waterfall): payload the [`GenerateOptions`] of one call, output its
    /// [`ChunkStream`]. The terminal `next` does the adapter lookup, so a listener may
    /// short-circuit by returning its own chunks, or wrap the stream `next` returns.
    pub struct LlmStream: waterfall("llm/stream") => GenerateOptions, ChunkStream;
}

dsh_kernel::event! {
    /// `llm/adapters-updated` (emit, no payload): the route table changed (register, replace,
    /// dispose). Listeners re-read [`LlmService::list_providers`].
    pub struct AdaptersUpdated: emit("llm/adapters-updated") => ();
}

/// One route in the table.
struct Route {
    provider: String,
    adapter: Arc<dyn LlmAdapter>,
    registration: u64,
}

/// Shared registry state.
struct Inner {
    /// The scope the service lives in: events are dispatched through it, and
    /// [`LlmService::register_adapter`] registrations are its effects.
    ctx: Context,
    /// Routes in commit order (a `replace` re-appends its routes at the end).
    routes: RwLock<Vec<Route>>,
    next_registration: AtomicU64,
    /// The effective model catalog: built-in entries plus the `[models]` overrides.
    catalog: ModelCatalog,
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Route>> {
        // The table is a plain list, consistent even if a panic poisoned the lock.
        self.routes.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Route>> {
        self.routes.write().unwrap_or_else(|e| e.into_inner())
    }

    fn adapter(&self, provider: &str) -> Option<Arc<dyn LlmAdapter>> {
        self.read()
            .iter()
            .find(|r| r.provider == provider)
            .map(|r| r.adapter.clone())
    }

    fn emit_updated(&self) {
        self.ctx.emit::<AdaptersUpdated>(&());
    }
}

/// Checks the adapter's own metadata for every candidate route (called before taking the table
/// lock, so adapter code never runs under it): a described route must keep its id and have a
/// non-empty display name.
fn validate_metadata(routes: &[String], adapter: &dyn LlmAdapter) -> Result<(), LlmError> {
    for provider in routes {
        if let Some(info) = adapter.provider_info(provider)
            && (info.id != *provider || info.display_name.is_empty())
        {
            return Err(LlmError::InvalidAdapter {
                reason: "adapter metadata must preserve the provider id and have a non-empty name",
            });
        }
    }
    Ok(())
}

/// Validates a candidate route set for registration `me` (routes `me` holds count as free).
fn validate(table: &[Route], routes: &[String], me: u64) -> Result<(), LlmError> {
    for (i, provider) in routes.iter().enumerate() {
        if provider.is_empty() {
            return Err(LlmError::InvalidAdapter {
                reason: "adapter provider names must be non-empty",
            });
        }
        let repeated = routes[..i].contains(provider);
        let taken = table
            .iter()
            .any(|r| r.provider == *provider && r.registration != me);
        if repeated || taken {
            return Err(LlmError::DuplicateAdapter {
                provider: provider.clone(),
            });
        }
    }
    Ok(())
}

/// Replaces registration `me`'s routes with `routes` (already validated) in one section.
fn commit(table: &mut Vec<Route>, routes: &[String], me: u64, adapter: &Arc<dyn LlmAdapter>) {
    table.retain(|r| r.registration != me);
    table.extend(routes.iter().map(|p| Route {
        provider: p.clone(),
        adapter: adapter.clone(),
        registration: me,
    }));
}

fn same_instance(a: &Arc<dyn LlmAdapter>, b: &Arc<dyn LlmAdapter>) -> bool {
    std::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

/// The LLM service: adapter registry plus the streaming call API.
///
/// Provided in the kernel by this crate's plugin (`ctx.get::<LlmService>()`); tests may build
/// one with [`LlmService::new`]. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct LlmService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LlmService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes: Vec<String> = self
            .inner
            .read()
            .iter()
            .map(|r| r.provider.clone())
            .collect();
        f.debug_struct("LlmService")
            .field("scope", &self.inner.ctx.label())
            .field("routes", &routes)
            .finish()
    }
}

/// The result of [`LlmService::resolve_call_config`]: what the agent loop logs in an
/// [`EpochHeader`] and sends.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCallConfig {
    /// The config with adapter defaults materialised (`max_tokens` from
    /// `ModelInfo::default_max_tokens`, `reasoning_effort` = the model's first declared effort)
    /// where the caller left them unset.
    pub config: LlmCallConfig,
    /// Which fields of `config` came from adapter defaults.
    pub adapter_defaults: AdapterDefaults,
    /// The exact model's context window (tokens) from the effective catalog
    /// ([`LlmService::model_limits`]: the `[models]` override, the adapter's report, the
    /// built-in entry), when known.
    pub context_window: Option<u64>,
    /// The exact model's metadata, when the adapter knows the model.
    pub model: Option<ModelInfo>,
}

impl ResolvedCallConfig {
    /// The canonical epoch header for this config with `system` and `tools`
    /// (see [`EpochHeader::canonical`]).
    pub fn header(&self, system: Option<String>, tools: &[ToolSchema]) -> EpochHeader {
        EpochHeader::canonical(self.config.clone(), self.adapter_defaults, system, tools)
    }
}

/// Reports the effective catalog's context window in `r` and fits a defaulted (or unset)
/// `max_tokens` to the catalog: `min(default, max_output_tokens, context_window / 4)`, the
/// bound alone when there is no default; an explicit `max_tokens` is kept.
fn fit_output(catalog: &ModelCatalog, r: &mut ResolvedCallConfig) {
    let limits = catalog.resolve(&r.config.model, r.model.as_ref());
    r.context_window = limits.context_window;
    if r.config.max_tokens.is_some() && !r.adapter_defaults.max_tokens {
        return;
    }
    let bound = [
        limits.max_output_tokens,
        limits.context_window.map(|w| (w / 4).max(1)),
    ]
    .into_iter()
    .flatten()
    .min();
    let fitted = match (r.config.max_tokens, bound) {
        (Some(d), Some(b)) => Some(d.min(b)),
        (d, b) => d.or(b),
    };
    if fitted != r.config.max_tokens {
        r.config.max_tokens = fitted;
        r.adapter_defaults.max_tokens = true;
    }
}

/// Materialises defaults of `info` into `config` and validates an explicit reasoning effort.
///
/// # Errors
/// [`LlmError::UnsupportedReasoningEffort`] when `config.reasoning_effort` is set, the model
/// declares efforts, and the effort is not among them.
fn resolve_with(
    config: &LlmCallConfig,
    info: Option<ModelInfo>,
) -> Result<ResolvedCallConfig, LlmError> {
    let mut out = config.clone();
    let mut defaults = AdapterDefaults::default();
    if let Some(info) = &info {
        if out.max_tokens.is_none()
            && let Some(d) = info.default_max_tokens
        {
            out.max_tokens = Some(d);
            defaults.max_tokens = true;
        }
        if let Some(first) = info.reasoning_efforts.first() {
            match &out.reasoning_effort {
                Some(e) if !info.reasoning_efforts.contains(e) => {
                    return Err(LlmError::UnsupportedReasoningEffort {
                        provider: config.provider.clone(),
                        model: config.model.clone(),
                        effort: e.clone(),
                    });
                }
                Some(_) => {}
                None => {
                    out.reasoning_effort = Some(first.clone());
                    defaults.reasoning_effort = true;
                }
            }
        }
    }
    Ok(ResolvedCallConfig {
        config: out,
        adapter_defaults: defaults,
        context_window: info.as_ref().and_then(|i| i.context_window),
        model: info,
    })
}

impl LlmService {
    /// A service living in scope `ctx` (events dispatch through it; registrations made with
    /// [`LlmService::register_adapter`] are its effects).
    pub fn new(ctx: Context) -> Self {
        Self::with_catalog(ctx, ModelCatalog::builtin())
    }

    /// Like [`LlmService::new`] with `catalog` as the effective model catalog (the plugin
    /// passes the built-in catalog with the `[models]` settings overrides).
    pub fn with_catalog(ctx: Context, catalog: ModelCatalog) -> Self {
        Self {
            inner: Arc::new(Inner {
                ctx,
                routes: RwLock::new(Vec::new()),
                next_registration: AtomicU64::new(1),
                catalog,
            }),
        }
    }

    /// The effective model catalog: the built-in entries and the user's `[models."<id>"]`
    /// overrides (see [`crate::models`]).
    pub fn catalog(&self) -> &ModelCatalog {
        &self.inner.catalog
    }

    /// The limits of `model` on route `provider` (tokens): the user's override, then what the
    /// adapter serving the route reports ([`LlmAdapter::resolve_model`]), then the built-in
    /// catalog ([`ModelCatalog::resolve`]); `None` fields are unknown.
    pub fn model_limits(&self, provider: &str, model: &str) -> ModelLimits {
        self.inner
            .catalog
            .resolve(model, self.resolve_model(provider, model).as_ref())
    }

    /// Registers `adapter` for `routes`, owned by the service's own scope (it vanishes when the
    /// handle is dropped or disposed, or when the LLM plugin's scope is disposed). Plugins should
    /// prefer [`LlmService::register_adapter_in`] with their own scope.
    ///
    /// # Errors
    /// As [`LlmService::register_adapter_in`].
    pub fn register_adapter(
        &self,
        routes: Vec<String>,
        adapter: Arc<dyn LlmAdapter>,
    ) -> Result<AdapterHandle, LlmError> {
        let scope = self.inner.ctx.clone();
        self.register_adapter_in(&scope, routes, adapter)
    }

    /// Registers `adapter` for every route in `routes`, all or nothing, as an effect of `scope`
    /// (disposing `scope` unregisters it; so does dropping or disposing the handle unless it was
    /// detached). Emits `llm/adapters-updated` on success.
    ///
    /// # Errors
    /// [`LlmError::InvalidAdapter`] for an empty route list, an empty route name, or adapter
    /// metadata ([`LlmAdapter::provider_info`]) whose id differs from the route or whose display
    /// name is empty;
    /// [`LlmError::DuplicateAdapter`] when a route is listed twice or already served;
    /// [`LlmError::Kernel`] (`INACTIVE_SCOPE`) when `scope` is disposing. Nothing is registered
    /// on error.
    pub fn register_adapter_in(
        &self,
        scope: &Context,
        routes: Vec<String>,
        adapter: Arc<dyn LlmAdapter>,
    ) -> Result<AdapterHandle, LlmError> {
        if routes.is_empty() {
            return Err(LlmError::InvalidAdapter {
                reason: "an adapter must register at least one provider",
            });
        }
        validate_metadata(&routes, adapter.as_ref())?;
        let id = self.inner.next_registration.fetch_add(1, Ordering::Relaxed);
        {
            let mut table = self.inner.write();
            validate(&table, &routes, id)?;
            commit(&mut table, &routes, id, &adapter);
        }
        let released = Arc::new(AtomicBool::new(false));
        let control = AdapterRoutes {
            inner: self.inner.clone(),
            registration: id,
            adapter,
            released: released.clone(),
        };
        let inner = self.inner.clone();
        let disposer = Disposer::infallible(move || {
            {
                let mut table = inner.write();
                released.store(true, Ordering::SeqCst);
                table.retain(|r| r.registration != id);
            }
            inner.emit_updated();
        });
        match scope.effect("llm:adapter", vec![disposer]) {
            Ok(registration) => {
                self.inner.emit_updated();
                Ok(AdapterHandle {
                    control,
                    registration: Some(registration),
                })
            }
            Err(e) => {
                self.inner.write().retain(|r| r.registration != id);
                control.released.store(true, Ordering::SeqCst);
                Err(e.into())
            }
        }
    }

    /// Every registered route in commit order, described by its adapter
    /// ([`LlmAdapter::provider_info`]) or, when the adapter says nothing,
    /// `{id: route, displayName: route, configured: true}`.
    pub fn list_providers(&self) -> Vec<ProviderInfo> {
        let routes: Vec<(String, Arc<dyn LlmAdapter>)> = self
            .inner
            .read()
            .iter()
            .map(|r| (r.provider.clone(), r.adapter.clone()))
            .collect();
        routes
            .into_iter()
            .map(|(p, a)| describe(&p, a.as_ref()))
            .collect()
    }

    /// The description of one registered route (as in [`LlmService::list_providers`]);
    /// `None` when no adapter serves it.
    pub fn provider_info(&self, provider: &str) -> Option<ProviderInfo> {
        self.inner
            .adapter(provider)
            .map(|a| describe(provider, a.as_ref()))
    }

    /// True when an adapter serves `provider`.
    pub fn has_provider(&self, provider: &str) -> bool {
        self.inner.adapter(provider).is_some()
    }

    /// The adapter serving `provider`, if any.
    pub fn adapter(&self, provider: &str) -> Option<Arc<dyn LlmAdapter>> {
        self.inner.adapter(provider)
    }

    /// True when `a` and `b` are both served by the same adapter instance (the condition for
    /// handing replay state across routes, adapter-contract item 9).
    pub fn same_adapter(&self, a: &str, b: &str) -> bool {
        match (self.inner.adapter(a), self.inner.adapter(b)) {
            (Some(x), Some(y)) => same_instance(&x, &y),
            _ => false,
        }
    }

    /// The advisory model catalog of `provider` ([`LlmAdapter::models`]).
    ///
    /// # Errors
    /// [`LlmError::NoAdapter`] when no adapter serves `provider`.
    pub fn models(&self, provider: &str) -> Result<Vec<ModelInfo>, LlmError> {
        self.require_adapter(provider).map(|a| a.models(provider))
    }

    /// Live model discovery for `provider` ([`LlmAdapter::discover_models`]).
    ///
    /// # Errors
    /// [`LlmError::NoAdapter`] when no adapter serves `provider`; [`LlmError::Provider`] with
    /// the adapter's failure.
    pub async fn discover_models(&self, provider: &str) -> Result<Vec<ModelInfo>, LlmError> {
        let adapter = self.require_adapter(provider)?;
        adapter
            .discover_models(provider)
            .await
            .map_err(LlmError::Provider)
    }

    /// Exact-route model metadata ([`LlmAdapter::resolve_model`]); `None` when no adapter
    /// serves `provider` or the adapter does not know `model`.
    pub fn resolve_model(&self, provider: &str, model: &str) -> Option<ModelInfo> {
        self.inner
            .adapter(provider)
            .and_then(|a| a.resolve_model(provider, model))
    }

    /// Like [`LlmService::resolve_model`], but missing is an error.
    ///
    /// # Errors
    /// [`LlmError::NoAdapter`] when no adapter serves `provider`; [`LlmError::UnknownModel`]
    /// when the adapter does not know `model`.
    pub fn require_model(&self, provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        self.require_adapter(provider)?
            .resolve_model(provider, model)
            .ok_or_else(|| LlmError::UnknownModel {
                provider: provider.to_owned(),
                model: model.to_owned(),
            })
    }

    /// Materialises adapter defaults into `config` from the exact model's [`ModelInfo`]:
    /// `max_tokens` ← `default_max_tokens` and `reasoning_effort` ← the first declared effort,
    /// each only when unset, and marks them in `adapter_defaults`; also reports the context
    /// window (tokens). An unknown model passes through unchanged (the catalog is advisory).
    /// A `max_tokens` the caller left unset is fitted to the effective catalog (`[models]`
    /// overrides included): at most its `max_output_tokens` and a quarter of its context
    /// window, and set to that bound when the adapter has no default (marked as a default);
    /// an explicit `max_tokens` is kept (docs/upstream/compaction.md, "Output limits").
    ///
    /// # Errors
    /// [`LlmError::NoAdapter`] when no adapter serves `config.provider`;
    /// [`LlmError::UnsupportedReasoningEffort`] for an explicit effort the model does not declare
    /// (only checked when it declares some; no clamping).
    pub fn resolve_call_config(
        &self,
        config: &LlmCallConfig,
    ) -> Result<ResolvedCallConfig, LlmError> {
        let adapter = self.require_adapter(&config.provider)?;
        let mut r = resolve_with(
            config,
            adapter.resolve_model(&config.provider, &config.model),
        )?;
        fit_output(&self.inner.catalog, &mut r);
        Ok(r)
    }

    fn require_adapter(&self, provider: &str) -> Result<Arc<dyn LlmAdapter>, LlmError> {
        self.inner
            .adapter(provider)
            .ok_or_else(|| LlmError::NoAdapter {
                provider: provider.to_owned(),
            })
    }

    /// Streams one model call through the `llm/stream` waterfall with no carrier key (only
    /// untagged and global listeners see it). See [`LlmService::stream_scoped`].
    pub fn stream(&self, opts: GenerateOptions) -> ChunkStream {
        self.stream_scoped(None, opts)
    }

    /// Streams one model call: dispatches `llm/stream` with carrier key `key` (listeners of that
    /// agent scope and its ancestors see it); the terminal selects the adapter for
    /// `opts.provider`. Lazy: nothing runs until the stream is polled.
    ///
    /// Adapter-side failures never surface as `Err`: they become one terminal
    /// `finish {kind:"error"|"aborted", failure}` chunk (aborted when `opts.signal` fired or the
    /// code is `ABORTED`): no adapter (`NO_ADAPTER`), an unsupported explicit effort
    /// (`UNSUPPORTED_REASONING_EFFORT`), an `Err` item (its failure; an empty message becomes `LLM adapter failed`, an empty code `UNKNOWN`), a panic in the adapter
    /// (`UNKNOWN`), and cancellation while waiting for the next chunk (`ABORTED`, the adapter
    /// stream is dropped). Nothing is forwarded after a `finish`; a `stop` finish with zero
    /// blocks becomes `finish {error, EMPTY_RESPONSE}`. A stream that ends without `finish` ends
    /// as is (the assembler then reports `stop`). `Err` items produced by `llm/stream` listeners
    /// are passed through unchanged.
    pub fn stream_scoped(&self, key: Option<&ScopeKey>, opts: GenerateOptions) -> ChunkStream {
        dispatch(&self.inner, key, opts, None)
    }

    /// Resolves `config` as [`LlmService::resolve_call_config`] and binds the adapter serving
    /// `config.provider` now, for a later one-shot [`PreparedCall::stream`].
    ///
    /// # Errors
    /// As [`LlmService::resolve_call_config`].
    pub fn prepare_call(&self, config: &LlmCallConfig) -> Result<PreparedCall, LlmError> {
        let adapter = self.require_adapter(&config.provider)?;
        let mut resolved = resolve_with(
            config,
            adapter.resolve_model(&config.provider, &config.model),
        )?;
        fit_output(&self.inner.catalog, &mut resolved);
        Ok(PreparedCall {
            inner: self.inner.clone(),
            adapter,
            resolved,
            dispatched: AtomicBool::new(false),
        })
    }
}

fn describe(provider: &str, adapter: &dyn LlmAdapter) -> ProviderInfo {
    adapter
        .provider_info(provider)
        .unwrap_or_else(|| ProviderInfo {
            id: provider.to_owned(),
            display_name: provider.to_owned(),
            configured: true,
            setup_hint: None,
        })
}

/// The message of a caught panic payload.
fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn panic_failure(p: &(dyn Any + Send)) -> LlmFailure {
    LlmFailure::new(
        codes::UNKNOWN,
        format!("LLM adapter panicked: {}", panic_message(p)),
    )
}

/// The terminal chunk for an adapter-side failure: `aborted` when the call was cancelled or the
/// code is `ABORTED`, else `error`.
pub fn failure_finish(failure: LlmFailure, cancelled: bool) -> StreamChunk {
    let reason = if cancelled || failure.code == codes::ABORTED {
        FinishReason::Aborted { failure }
    } else {
        FinishReason::Error { failure }
    };
    StreamChunk::Finish {
        reason,
        replay_state: None,
    }
}

fn failure_stream(failure: LlmFailure, cancelled: bool) -> ChunkStream {
    stream::once(futures::future::ready(Ok(failure_finish(
        failure, cancelled,
    ))))
    .boxed()
}

/// Drops replay state from assistant messages whose historical route is not served by `adapter`
/// (adapter-contract item 9); messages are cloned only when changed.
fn strip_foreign_replay(
    inner: &Inner,
    mut opts: GenerateOptions,
    adapter: &Arc<dyn LlmAdapter>,
) -> GenerateOptions {
    for m in &mut opts.messages {
        let MessageSource::Model {
            provider,
            replay_state: Some(_),
            ..
        } = &m.source
        else {
            continue;
        };
        if m.role != Role::Assistant {
            continue;
        }
        let owned = inner
            .adapter(provider)
            .is_some_and(|a| same_instance(&a, adapter));
        if !owned {
            let mut copy: Message = (**m).clone();
            if let MessageSource::Model { replay_state, .. } = &mut copy.source {
                *replay_state = None;
            }
            *m = Arc::new(copy);
        }
    }
    opts
}

/// The call-config fields of `opts`.
fn config_of(opts: &GenerateOptions) -> LlmCallConfig {
    LlmCallConfig {
        provider: opts.provider.clone(),
        model: opts.model.clone(),
        reasoning_effort: opts.reasoning_effort.clone(),
        temperature: opts.temperature,
        max_tokens: opts.max_tokens,
        stop: opts.stop.clone(),
    }
}

/// An adapter bound by [`LlmService::prepare_call`] together with its resolved config.
type Bound = (Arc<dyn LlmAdapter>, LlmCallConfig);

/// The terminal of `llm/stream`: adapter selection (or the prepared binding), defaults,
/// dispatch and normalisation.
fn adapter_stream(inner: &Arc<Inner>, opts: GenerateOptions, bound: Option<Bound>) -> ChunkStream {
    let signal = opts.signal.clone();
    let (adapter, prepared_config) = match bound {
        Some((a, c)) => (a, Some(c)),
        None => match inner.adapter(&opts.provider) {
            Some(a) => (a, None),
            None => {
                let e = LlmError::NoAdapter {
                    provider: opts.provider.clone(),
                };
                return failure_stream(e.to_failure(), signal.is_cancelled());
            }
        },
    };
    let prepared = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let config = config_of(&opts);
        let resolved = match prepared_config {
            Some(c) if c == config => c,
            Some(_) => {
                return Err(LlmError::InvalidPreparedCall {
                    reason: "prepared LLM call config changed before adapter dispatch",
                });
            }
            None => {
                resolve_with(&config, adapter.resolve_model(&opts.provider, &opts.model))?.config
            }
        };
        let mut opts = strip_foreign_replay(inner, opts, &adapter);
        opts.max_tokens = resolved.max_tokens;
        opts.reasoning_effort = resolved.reasoning_effort;
        Ok::<_, LlmError>(adapter.stream(opts))
    }));
    let stream = match prepared {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return failure_stream(e.to_failure(), signal.is_cancelled()),
        Err(p) => return failure_stream(panic_failure(p.as_ref()), signal.is_cancelled()),
    };
    guard(stream, signal)
}

/// Dispatches `llm/stream` with carrier `key`; the terminal uses `bound` when given.
fn dispatch(
    inner: &Arc<Inner>,
    key: Option<&ScopeKey>,
    opts: GenerateOptions,
    bound: Option<Bound>,
) -> ChunkStream {
    let inner = inner.clone();
    let key = key.cloned();
    let fut = async move {
        let terminal_inner = inner.clone();
        inner
            .ctx
            .dispatch_to(key.as_ref())
            .waterfall::<LlmStream, _, _>(opts, move |o| async move {
                adapter_stream(&terminal_inner, o, bound)
            })
            .await
    };
    stream::once(fut).flatten().boxed()
}

/// One call resolved under the adapter registration current at [`LlmService::prepare_call`]:
/// the config to log in the `EpochHeader` and a one-shot [`PreparedCall::stream`] bound to the
/// same adapter instance, so a route change between header logging and dispatch cannot pair one
/// adapter's capabilities with another adapter.
pub struct PreparedCall {
    inner: Arc<Inner>,
    adapter: Arc<dyn LlmAdapter>,
    resolved: ResolvedCallConfig,
    dispatched: AtomicBool,
}

impl std::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("resolved", &self.resolved)
            .field("dispatched", &self.dispatched.load(Ordering::SeqCst))
            .finish()
    }
}

impl PreparedCall {
    /// The resolved config (defaults materialised), its markers and the context window.
    pub fn resolved(&self) -> &ResolvedCallConfig {
        &self.resolved
    }

    /// The resolved config.
    pub fn config(&self) -> &LlmCallConfig {
        &self.resolved.config
    }

    /// Which fields of [`PreparedCall::config`] came from adapter defaults.
    pub fn adapter_defaults(&self) -> AdapterDefaults {
        self.resolved.adapter_defaults
    }

    /// The model's context window (tokens), when known.
    pub fn context_window(&self) -> Option<u64> {
        self.resolved.context_window
    }

    /// Streams the call through `llm/stream` (carrier `key`) with the bound adapter; the stream
    /// is normalised as in [`LlmService::stream_scoped`]. `opts`' config fields (provider, model,
    /// effort, temperature, max tokens, stop) must equal [`PreparedCall::config`].
    ///
    /// # Errors
    /// [`LlmError::InvalidPreparedCall`] when called a second time or when `opts` does not carry
    /// the prepared config (nothing is dispatched).
    pub fn stream(
        &self,
        key: Option<&ScopeKey>,
        opts: GenerateOptions,
    ) -> Result<ChunkStream, LlmError> {
        if config_of(&opts) != self.resolved.config {
            return Err(LlmError::InvalidPreparedCall {
                reason: "prepared LLM call config changed before adapter dispatch",
            });
        }
        if self.dispatched.swap(true, Ordering::SeqCst) {
            return Err(LlmError::InvalidPreparedCall {
                reason: "a prepared LLM call can only be dispatched once",
            });
        }
        Ok(dispatch(
            &self.inner,
            key,
            opts,
            Some((self.adapter.clone(), self.resolved.config.clone())),
        ))
    }
}

/// State of the contract guard around one adapter stream.
struct Guard {
    /// `None` once the terminal chunk was forwarded (or the adapter ended).
    stream: Option<ChunkStream>,
    signal: dsh_kernel::CancellationToken,
    /// A block-start / delta / block-end arrived.
    seen_block: bool,
}

enum Step {
    Item(Option<Result<Result<StreamChunk, LlmFailure>, Box<dyn Any + Send>>>),
    Cancelled,
}

/// Wraps an adapter stream with the contract rules (see [`LlmService::stream_scoped`]).
fn guard(stream: ChunkStream, signal: dsh_kernel::CancellationToken) -> ChunkStream {
    let state = Guard {
        stream: Some(stream),
        signal,
        seen_block: false,
    };
    stream::unfold(state, |mut st| async move {
        let s = st.stream.as_mut()?;
        let step = {
            let next = futures::future::poll_fn(|cx| {
                match std::panic::catch_unwind(AssertUnwindSafe(|| s.poll_next_unpin(cx))) {
                    Ok(std::task::Poll::Ready(item)) => std::task::Poll::Ready(item.map(Ok)),
                    Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
                    Err(p) => std::task::Poll::Ready(Some(Err(p))),
                }
            });
            tokio::select! {
                biased;
                item = next => Step::Item(item),
                () = st.signal.cancelled() => Step::Cancelled,
            }
        };
        let cancelled = st.signal.is_cancelled();
        let out = match step {
            Step::Cancelled => {
                st.stream = None;
                failure_finish(LlmFailure::new(codes::ABORTED, "request aborted"), true)
            }
            Step::Item(None) => return None,
            Step::Item(Some(Err(p))) => {
                st.stream = None;
                failure_finish(panic_failure(p.as_ref()), cancelled)
            }
            Step::Item(Some(Ok(Err(mut failure)))) => {
                st.stream = None;
                if failure.message.is_empty() {
                    failure.message = "LLM adapter failed".to_owned();
                }
                if failure.code.is_empty() {
                    failure.code = codes::UNKNOWN.to_owned();
                }
                failure_finish(failure, cancelled)
            }
            Step::Item(Some(Ok(Ok(chunk)))) => match chunk {
                StreamChunk::Finish {
                    reason: FinishReason::Stop,
                    ..
                } if !st.seen_block => {
                    st.stream = None;
                    failure_finish(
                        LlmFailure::new(
                            codes::EMPTY_RESPONSE,
                            "model returned a completed response with no content",
                        ),
                        false,
                    )
                }
                StreamChunk::Finish { .. } => {
                    st.stream = None;
                    chunk
                }
                StreamChunk::BlockStart { .. }
                | StreamChunk::TextDelta { .. }
                | StreamChunk::ReasoningDelta { .. }
                | StreamChunk::ToolCallDelta { .. }
                | StreamChunk::BlockEnd { .. } => {
                    st.seen_block = true;
                    chunk
                }
                other => other,
            },
        };
        Some((Ok(out), st))
    })
    .boxed()
}

/// The plugin's `apply`: reads the top-level `models` settings key ([`LlmSettings`]), builds
/// the effective catalog (built-in + overrides) and provides `Arc<LlmService>` living in the
/// plugin's scope.
///
/// # Errors
/// An ill-typed `models` table (the kernel's settings error),
/// [`crate::models::ModelSettingsError`] for a 0 limit or an output limit above the window, or
/// the kernel's error when the service is already provided in this layer or the scope is
/// inactive.
fn apply(ctx: &Context) -> Result<(), BoxError> {
    let settings: LlmSettings = ctx.settings_section(PLUGIN.id)?;
    let catalog = ModelCatalog::builtin().with_overrides(&settings.models)?;
    ctx.provide(Arc::new(LlmService::with_catalog(ctx.clone(), catalog)))?
        .detach();
    Ok(())
}

dsh_kernel::plugin! {
    settings = LlmSettings,
    top_level = ["models"],
    register = apply,
}

/// A clonable handle on one adapter registration's routes: atomic replacement without the
/// ownership of the registration itself (see [`AdapterHandle::routes_handle`]).
#[derive(Clone)]
pub struct AdapterRoutes {
    inner: Arc<Inner>,
    registration: u64,
    adapter: Arc<dyn LlmAdapter>,
    released: Arc<AtomicBool>,
}

impl std::fmt::Debug for AdapterRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterRoutes")
            .field("registration", &self.registration)
            .field("routes", &self.routes())
            .field("released", &self.is_released())
            .finish()
    }
}

impl AdapterRoutes {
    /// Replaces this registration's routes with `routes`, keeping the same adapter instance.
    /// The whole set is validated first (a rejection leaves the current routes untouched) and
    /// the swap is one critical section, so no call observes a gap. An empty list is legal (the
    /// registration stays alive with zero routes). Emits `llm/adapters-updated` on success.
    ///
    /// # Errors
    /// [`LlmError::RegistrationDisposed`] once the registration was released;
    /// [`LlmError::DuplicateAdapter`] for a repeated route or one held by another registration;
    /// [`LlmError::InvalidAdapter`] for an empty route name or bad adapter metadata (as at
    /// registration).
    pub fn replace(&self, routes: Vec<String>) -> Result<(), LlmError> {
        if self.released.load(Ordering::SeqCst) {
            return Err(LlmError::RegistrationDisposed);
        }
        validate_metadata(&routes, self.adapter.as_ref())?;
        {
            let mut table = self.inner.write();
            if self.released.load(Ordering::SeqCst) {
                return Err(LlmError::RegistrationDisposed);
            }
            validate(&table, &routes, self.registration)?;
            commit(&mut table, &routes, self.registration, &self.adapter);
        }
        self.inner.emit_updated();
        Ok(())
    }

    /// The routes this registration holds now, in commit order.
    pub fn routes(&self) -> Vec<String> {
        self.inner
            .read()
            .iter()
            .filter(|r| r.registration == self.registration)
            .map(|r| r.provider.clone())
            .collect()
    }

    /// True once the registration was released (disposed, dropped, or its scope disposed).
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }
}

/// What [`LlmService::register_adapter`] returns: the owner of one adapter registration.
///
/// Dropping it (or [`AdapterHandle::dispose`]) releases every route it holds and emits
/// `llm/adapters-updated`; [`AdapterHandle::detach`] instead binds the registration to the scope
/// it was registered through, so it lives until that scope is disposed.
#[must_use = "dropping an AdapterHandle unregisters the adapter; call .detach() to bind it to its scope"]
pub struct AdapterHandle {
    control: AdapterRoutes,
    registration: Option<Registration>,
}

impl std::fmt::Debug for AdapterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterHandle")
            .field("control", &self.control)
            .finish()
    }
}

impl AdapterHandle {
    /// See [`AdapterRoutes::replace`].
    ///
    /// # Errors
    /// As [`AdapterRoutes::replace`].
    pub fn replace(&self, routes: Vec<String>) -> Result<(), LlmError> {
        self.control.replace(routes)
    }

    /// The routes held now, in commit order.
    pub fn routes(&self) -> Vec<String> {
        self.control.routes()
    }

    /// True once released.
    pub fn is_released(&self) -> bool {
        self.control.is_released()
    }

    /// A clonable route controller for this registration (e.g. for a settings listener).
    pub fn routes_handle(&self) -> AdapterRoutes {
        self.control.clone()
    }

    /// Releases the registration now (synchronously: routes removed, `llm/adapters-updated`
    /// emitted before this returns). Idempotent with scope disposal.
    pub fn dispose(mut self) {
        drop(self.registration.take());
    }

    /// Binds the registration to its scope and returns the route controller.
    pub fn detach(mut self) -> AdapterRoutes {
        if let Some(r) = self.registration.take() {
            r.detach();
        }
        self.control.clone()
    }
}
