//! Contexts, scopes, effects and effect-scoped disposal.
//!
//! See docs/upstream/kernel.md (Effects and disposal).
//!
//! A [`Context`] is a handle on one scope. Every registration made through it (service, listener,
//! effect, child scope, spawned task) becomes an *effect* owned by that scope and is undone when the
//! scope is disposed:
//! - within one effect, its disposers run in reverse order, one after another;
//! - across a scope's effects, all are started in reverse registration order and run concurrently;
//!   failures are logged, never propagated, never panics.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::error::{BoxError, KernelError, Result};
use crate::event::Bus;
use crate::key::ScopeKey;

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// One teardown step of an effect.
///
/// Build it with [`Disposer::sync`] for a synchronous step or [`Disposer::future`] for an async
/// one. A failing step is logged by the scope (target `dsh_kernel`) and never stops the others.
pub struct Disposer(DisposerKind);

enum DisposerKind {
    Sync(Box<dyn FnOnce() -> std::result::Result<(), BoxError> + Send>),
    Async(Box<dyn FnOnce() -> BoxFuture<'static, std::result::Result<(), BoxError>> + Send>),
}

impl Disposer {
    /// A synchronous teardown step.
    pub fn sync(f: impl FnOnce() -> std::result::Result<(), BoxError> + Send + 'static) -> Self {
        Self(DisposerKind::Sync(Box::new(f)))
    }

    /// A synchronous teardown step that cannot fail.
    pub fn infallible(f: impl FnOnce() + Send + 'static) -> Self {
        Self::sync(move || {
            f();
            Ok(())
        })
    }

    /// An asynchronous teardown step; the future is created when the step runs.
    pub fn future<F, Fut>(f: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        Self(DisposerKind::Async(Box::new(move || Box::pin(f()))))
    }

    fn is_sync(&self) -> bool {
        matches!(self.0, DisposerKind::Sync(_))
    }
}

impl std::fmt::Debug for Disposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_sync() {
            "Disposer::sync"
        } else {
            "Disposer::future"
        })
    }
}

struct EffectRecord {
    id: u64,
    label: Cow<'static, str>,
    disposers: Vec<Disposer>,
}

/// Runs one effect's disposers in reverse order, one after another, logging failures.
async fn run_effect(scope_label: String, effect: EffectRecord) {
    let EffectRecord {
        label, disposers, ..
    } = effect;
    for d in disposers.into_iter().rev() {
        let res = match d.0 {
            DisposerKind::Sync(f) => f(),
            DisposerKind::Async(f) => f().await,
        };
        if let Err(err) = res {
            tracing::error!(target: "dsh_kernel", scope = %scope_label, effect = %label, error = %err, "disposer failed");
        }
    }
}

/// Runs an all-synchronous effect inline; returns it back if it has an async step.
fn try_run_sync(scope_label: &str, effect: EffectRecord) -> Option<EffectRecord> {
    if effect.disposers.iter().all(Disposer::is_sync) {
        for d in effect.disposers.into_iter().rev() {
            if let DisposerKind::Sync(f) = d.0
                && let Err(err) = f()
            {
                tracing::error!(target: "dsh_kernel", scope = %scope_label, effect = %effect.label, error = %err, "disposer failed");
            }
        }
        None
    } else {
        Some(effect)
    }
}

/// Runs an effect without blocking the caller: inline when every step is synchronous, otherwise
/// on the current tokio runtime, or on a helper thread when no runtime is running.
fn run_detached(scope_label: String, effect: EffectRecord) {
    let Some(effect) = try_run_sync(&scope_label, effect) else {
        return;
    };
    let fut = run_effect(scope_label, effect);
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(fut);
        }
        Err(_) => {
            std::thread::spawn(move || futures::executor::block_on(fut));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Active,
    Disposing,
    Disposed,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Active => "active",
            Phase::Disposing => "disposing",
            Phase::Disposed => "disposed",
        }
    }
}

struct ScopeState {
    phase: Phase,
    effects: Vec<EffectRecord>,
    next_effect: u64,
}

pub(crate) type ServiceKey = (TypeId, Option<String>);

pub(crate) struct ServiceEntry {
    pub(crate) value: Arc<dyn Any + Send + Sync>,
}

/// One service layer. Plain child scopes (plugin scopes) share their parent's layer, so what a
/// plugin provides is visible to every scope; tagged and isolated scopes open a new layer whose
/// lookups fall back to the parent layer (and whose entries shadow it).
pub(crate) struct Layer {
    pub(crate) label: String,
    pub(crate) services: RwLock<crate::fasthash::FastMap<ServiceKey, ServiceEntry>>,
    pub(crate) parent: Option<Arc<Layer>>,
}

impl Layer {
    fn new(label: String, parent: Option<Arc<Layer>>) -> Arc<Self> {
        Arc::new(Self {
            label,
            services: RwLock::new(crate::fasthash::FastMap::default()),
            parent,
        })
    }
}

pub(crate) struct ScopeInner {
    pub(crate) id: u64,
    pub(crate) label: String,
    pub(crate) parent: Option<Arc<ScopeInner>>,
    pub(crate) key: Option<ScopeKey>,
    pub(crate) bus: Arc<Bus>,
    state: Mutex<ScopeState>,
    pub(crate) layer: Arc<Layer>,
    cancel: CancellationToken,
    disposed: tokio::sync::OnceCell<()>,
    /// The parent's effect that owns this scope, removed once this scope is disposed directly.
    owner_effect: Mutex<Option<(Weak<ScopeInner>, u64)>>,
}

impl ScopeInner {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, ScopeState> {
        // A poisoned lock only means a panic elsewhere while holding it; the state itself is a
        // plain list and stays consistent, so keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn inactive(&self, phase: Phase) -> KernelError {
        KernelError::InactiveScope {
            label: self.label.clone(),
            state: phase.name(),
        }
    }

    /// Registers an effect atomically with `install`, which runs under the scope lock so a
    /// concurrent disposal cannot miss it.
    pub(crate) fn add_effect_with<T>(
        self: &Arc<Self>,
        label: impl Into<Cow<'static, str>>,
        install: impl FnOnce() -> Result<(T, Vec<Disposer>)>,
    ) -> Result<(T, Registration)> {
        let mut st = self.lock_state();
        if st.phase != Phase::Active {
            return Err(self.inactive(st.phase));
        }
        let (value, disposers) = install()?;
        let id = st.next_effect;
        st.next_effect += 1;
        st.effects.push(EffectRecord {
            id,
            label: label.into(),
            disposers,
        });
        Ok((
            value,
            Registration {
                scope: Arc::downgrade(self),
                effect_id: id,
                armed: true,
            },
        ))
    }

    fn take_effect(&self, id: u64) -> Option<EffectRecord> {
        let mut st = self.lock_state();
        let pos = st.effects.iter().position(|e| e.id == id)?;
        Some(st.effects.remove(pos))
    }

    fn dispose(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let this = self.clone();
            self.disposed
                .get_or_init(|| async move {
                    let effects = {
                        let mut st = this.lock_state();
                        st.phase = Phase::Disposing;
                        std::mem::take(&mut st.effects)
                    };
                    this.cancel.cancel();
                    // Started in reverse registration order, run concurrently.
                    let futs = effects
                        .into_iter()
                        .rev()
                        .map(|e| run_effect(this.label.clone(), e));
                    futures::future::join_all(futs).await;
                    this.lock_state().phase = Phase::Disposed;
                    let owner = this
                        .owner_effect
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take();
                    if let Some((parent, effect_id)) = owner
                        && let Some(parent) = parent.upgrade()
                    {
                        // Drop the record without running it: this scope is already gone.
                        drop(parent.take_effect(effect_id));
                    }
                })
                .await;
        })
    }
}

/// A guard for one registration (service, listener, effect, child scope, task).
///
/// Dropping it unregisters: the effect's disposers run in reverse order (inline when all are
/// synchronous, otherwise spawned on the runtime; a drop never blocks). [`Registration::detach`]
/// binds the registration to its scope instead, so it lives until the scope is disposed.
#[must_use = "dropping a Registration unregisters it at once; call .detach() to bind it to its scope"]
pub struct Registration {
    scope: Weak<ScopeInner>,
    effect_id: u64,
    armed: bool,
}

impl Registration {
    /// Keeps the registration alive until its owning scope is disposed.
    pub fn detach(mut self) {
        self.armed = false;
    }

    /// Unregisters now and waits for the teardown to finish. Idempotent with scope disposal:
    /// if the scope already ran this effect, nothing happens.
    pub async fn dispose(mut self) {
        self.armed = false;
        if let Some(scope) = self.scope.upgrade()
            && let Some(effect) = scope.take_effect(self.effect_id)
        {
            run_effect(scope.label.clone(), effect).await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(scope) = self.scope.upgrade()
            && let Some(effect) = scope.take_effect(self.effect_id)
        {
            run_detached(scope.label.clone(), effect);
        }
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("effect_id", &self.effect_id)
            .field("armed", &self.armed)
            .finish()
    }
}

/// A handle on one scope (a Cordis "fiber"): the way plugins reach services, register listeners
/// and own their effects. Cloning is cheap (one `Arc`); dropping a `Context` does not dispose its
/// scope — call [`Context::dispose`] or dispose an ancestor.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ScopeInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.inner.id)
            .field("label", &self.inner.label)
            .field("key", &self.inner.key)
            .finish()
    }
}

impl Context {
    pub(crate) fn new_root(label: impl Into<String>) -> Self {
        let label = label.into();
        Self {
            inner: Arc::new(ScopeInner {
                id: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
                layer: Layer::new(label.clone(), None),
                label,
                parent: None,
                key: None,
                bus: Arc::new(Bus::default()),
                state: Mutex::new(ScopeState {
                    phase: Phase::Active,
                    effects: Vec::new(),
                    next_effect: 0,
                }),
                cancel: CancellationToken::new(),
                disposed: tokio::sync::OnceCell::new(),
                owner_effect: Mutex::new(None),
            }),
        }
    }

    /// The scope's label (for logs).
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// A process-unique scope number.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The key this scope is tagged with: its own, or the nearest tagged ancestor's.
    /// Listeners registered through the scope carry this tag.
    pub fn key(&self) -> Option<&ScopeKey> {
        self.inner.key.as_ref()
    }

    /// The parent scope, if any.
    pub fn parent(&self) -> Option<Context> {
        self.inner.parent.clone().map(|inner| Context { inner })
    }

    /// True until disposal starts.
    pub fn is_active(&self) -> bool {
        self.inner.lock_state().phase == Phase::Active
    }

    /// A token cancelled when this scope's disposal starts (child of the parent scope's token).
    pub fn cancellation(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    /// Creates a child scope owned by this one: disposing this scope disposes the child.
    /// The child inherits this scope's key and shares its service layer, so services it provides
    /// are visible wherever this scope's are (plugin scopes are made this way), yet they are
    /// removed when the child is disposed.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if this scope is disposing or disposed.
    pub fn child(&self, label: impl Into<String>) -> Result<Context> {
        self.make_child(label.into(), self.inner.key.clone(), false)
    }

    /// Creates a child scope with its own service layer: it sees this scope's services, may
    /// shadow them, and what it provides is visible only to itself and its descendants.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if this scope is disposing or disposed.
    pub fn isolated(&self, label: impl Into<String>) -> Result<Context> {
        self.make_child(label.into(), self.inner.key.clone(), true)
    }

    /// Creates a child scope tagged with `key` (e.g. an agent scope), with its own service layer
    /// (as [`Context::isolated`]). Listeners registered through it (or its descendants) only
    /// receive dispatches whose carrier key is `key` or a descendant of it, unless registered as
    /// global.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if this scope is disposing or disposed.
    pub fn tagged(&self, key: ScopeKey, label: impl Into<String>) -> Result<Context> {
        self.make_child(label.into(), Some(key), true)
    }

    fn make_child(&self, label: String, key: Option<ScopeKey>, new_layer: bool) -> Result<Context> {
        let layer = if new_layer {
            Layer::new(label.clone(), Some(self.inner.layer.clone()))
        } else {
            self.inner.layer.clone()
        };
        let child = Arc::new(ScopeInner {
            id: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
            layer,
            label,
            parent: Some(self.inner.clone()),
            key,
            bus: self.inner.bus.clone(),
            state: Mutex::new(ScopeState {
                phase: Phase::Active,
                effects: Vec::new(),
                next_effect: 0,
            }),
            cancel: self.inner.cancel.child_token(),
            disposed: tokio::sync::OnceCell::new(),
            owner_effect: Mutex::new(None),
        });
        let label = format!("scope:{}", child.label);
        let for_disposer = child.clone();
        let ((), reg) = self.inner.add_effect_with(label, || {
            Ok((
                (),
                vec![Disposer::future(move || async move {
                    for_disposer.dispose().await;
                    Ok(())
                })],
            ))
        })?;
        *child.owner_effect.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::downgrade(&self.inner), reg.effect_id));
        reg.detach();
        Ok(Context { inner: child })
    }

    /// Registers an effect: `disposers` are the teardown steps of something already set up,
    /// run in reverse order when the registration is dropped or the scope disposed.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if this scope is disposing or disposed (the disposers are
    /// then dropped without running).
    pub fn effect(
        &self,
        label: impl Into<Cow<'static, str>>,
        disposers: Vec<Disposer>,
    ) -> Result<Registration> {
        self.inner
            .add_effect_with(label, || Ok(((), disposers)))
            .map(|((), r)| r)
    }

    /// Spawns a task owned by this scope. On disposal the scope's [`Context::cancellation`] token
    /// fires first and the disposer then waits for the task to finish (drain, not abandon), so
    /// tasks must watch the token.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if this scope is disposing or disposed (nothing is spawned).
    pub fn spawn<F>(&self, label: impl Into<Cow<'static, str>>, fut: F) -> Result<Registration>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner
            .add_effect_with(label, || {
                let handle = tokio::spawn(fut);
                Ok((
                    (),
                    vec![Disposer::future(move || async move {
                        handle.await.map_err(|e| Box::new(e) as BoxError)
                    })],
                ))
            })
            .map(|((), r)| r)
    }

    /// Disposes this scope: all its effects (child scopes included) are torn down. Idempotent;
    /// concurrent callers all wait for the same teardown.
    pub async fn dispose(&self) {
        self.inner.clone().dispose().await;
    }
}
