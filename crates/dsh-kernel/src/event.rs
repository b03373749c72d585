//! Typed events and the four dispatch modes.
//!
//! See docs/upstream/kernel.md (Events (dispatch modes)).
//!
//! Every event is declared once, as a marker type implementing exactly one of [`EmitEvent`],
//! [`SerialEvent`], [`ParallelEvent`] or [`WaterfallEvent`] (the [`crate::event!`] macro writes
//! the impl). The trait fixes the event's name, payload, output and mode.
//!
//! Ordering: within one event, listeners run in registration order; `prepend` inserts first.
//! The listener list is snapshotted at dispatch (one `Arc` clone), so listeners added or removed
//! while a dispatch runs do not affect it.
//!
//! Scope filtering: a dispatch carries an optional [`ScopeKey`]. An untagged listener receives
//! every dispatch; a listener tagged with key `T` receives a dispatch only when the carrier key is
//! `T` or a descendant of `T`; a listener registered with [`ListenOptions::global`] bypasses the
//! filter.
//!
//! **Deliberate difference from vendored Cordis:** `emit` contains listener failures. A listener
//! that panics is caught, logged (target `dsh_kernel`), and later listeners still run; Cordis lets a
//! synchronous throw stop the fan-out.

use std::any::{Any, TypeId};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;

use crate::error::{BoxError, KernelError, Result};
use crate::key::ScopeKey;
use crate::scope::{Context, Disposer, Registration};

/// An observe-only event: listeners run synchronously in order, return nothing, and a panicking
/// listener is contained and logged.
pub trait EmitEvent: 'static {
    /// The event's name, e.g. `"tools/change"`.
    const NAME: &'static str;
    /// What listeners receive (by reference).
    type Payload: Send + Sync + 'static;
}

/// An ordered, awaited checkpoint: listeners run one after another; the first that returns
/// `Some(value)` stops the dispatch and its value is returned. An `Err` also stops it.
pub trait SerialEvent: 'static {
    /// The event's name.
    const NAME: &'static str;
    /// What each listener receives (a clone per listener).
    type Payload: Clone + Send + Sync + 'static;
    /// The bail value.
    type Output: Send + 'static;
}

/// An awaited fan-out: all listeners start concurrently; the dispatch waits for all and
/// aggregates every failure into [`KernelError::Parallel`].
pub trait ParallelEvent: 'static {
    /// The event's name.
    const NAME: &'static str;
    /// What each listener receives (a clone per listener).
    type Payload: Clone + Send + Sync + 'static;
}

/// An async middleware chain: each listener receives the payload and a [`Next`]; it may call
/// `next.run(payload)` at most once (the type enforces it), may short-circuit by not calling it,
/// and may replace the payload going in or the value coming out. Listeners run outermost-first
/// in registration order; the dispatcher's terminal function is innermost.
pub trait WaterfallEvent: 'static {
    /// The event's name.
    const NAME: &'static str;
    /// The value threaded down the chain (owned).
    type Payload: Send + 'static;
    /// The value threaded back up.
    type Output: Send + 'static;
}

/// Registration options for a listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenOptions {
    /// Insert before every existing listener of the event instead of after.
    pub prepend: bool,
    /// Receive every dispatch regardless of the carrier key.
    pub global: bool,
}

impl ListenOptions {
    /// `prepend: true`.
    pub fn prepend() -> Self {
        Self {
            prepend: true,
            global: false,
        }
    }

    /// `global: true`.
    pub fn global() -> Self {
        Self {
            prepend: false,
            global: true,
        }
    }
}

type EmitFn<P> = dyn Fn(&P) + Send + Sync;
type SerialFn<P, O> =
    dyn Fn(P) -> BoxFuture<'static, std::result::Result<Option<O>, BoxError>> + Send + Sync;
type ParallelFn<P> =
    dyn Fn(P) -> BoxFuture<'static, std::result::Result<(), BoxError>> + Send + Sync;
type WaterfallFn<E> = dyn Fn(<E as WaterfallEvent>::Payload, Next<E>) -> BoxFuture<'static, <E as WaterfallEvent>::Output>
    + Send
    + Sync;

struct Entry<L: ?Sized> {
    id: u64,
    tag: Option<ScopeKey>,
    global: bool,
    f: Box<L>,
}

impl<L: ?Sized> Entry<L> {
    #[inline]
    fn admits(&self, key: Option<&ScopeKey>) -> bool {
        if self.global {
            return true;
        }
        match &self.tag {
            None => true,
            Some(tag) => key.is_some_and(|k| k.is_self_or_descendant_of(tag)),
        }
    }
}

type List<L> = Arc<Vec<Arc<Entry<L>>>>;

struct Slot<L: ?Sized> {
    list: RwLock<List<L>>,
}

impl<L: ?Sized> Slot<L> {
    fn snapshot(&self) -> List<L> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The kernel-wide listener table, shared by every scope of one kernel.
#[derive(Default)]
pub(crate) struct Bus {
    slots: RwLock<crate::fasthash::FastMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    next_id: AtomicU64,
}

impl Bus {
    fn slot<E: 'static, L: ?Sized + Send + Sync + 'static>(&self) -> Option<Arc<Slot<L>>> {
        let any = self
            .slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&TypeId::of::<E>())?
            .clone();
        any.downcast::<Slot<L>>().ok()
    }

    fn slot_or_insert<E: 'static, L: ?Sized + Send + Sync + 'static>(&self) -> Arc<Slot<L>> {
        if let Some(s) = self.slot::<E, L>() {
            return s;
        }
        let mut map = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let any = map
            .entry(TypeId::of::<E>())
            .or_insert_with(|| {
                Arc::new(Slot::<L> {
                    list: RwLock::new(Arc::new(Vec::new())),
                })
            })
            .clone();
        drop(map);
        // The map is keyed by the event type, and each event type has exactly one listener shape.
        match any.downcast::<Slot<L>>() {
            Ok(s) => s,
            Err(_) => unreachable_slot::<E>(),
        }
    }
}

#[cold]
fn unreachable_slot<E: 'static>() -> ! {
    // Only reachable if one marker type implemented two dispatch traits, which the listener
    // shapes make impossible to register consistently; fail loudly in that programming error.
    panic!(
        "event {} registered with two listener shapes",
        std::any::type_name::<E>()
    )
}

impl Context {
    fn listen<E: 'static, L: ?Sized + Send + Sync + 'static>(
        &self,
        name: &'static str,
        opts: ListenOptions,
        f: Box<L>,
    ) -> Result<Registration> {
        let bus = self.inner.bus.clone();
        let id = bus.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            tag: self.inner.key.clone(),
            global: opts.global,
            f,
        });
        let slot = bus.slot_or_insert::<E, L>();
        self.inner
            .add_effect_with(format!("listener:{name}"), || {
                {
                    let mut list = slot.list.write().unwrap_or_else(|e| e.into_inner());
                    let mut next: Vec<_> = Vec::with_capacity(list.len() + 1);
                    if opts.prepend {
                        next.push(entry);
                        next.extend(list.iter().cloned());
                    } else {
                        next.extend(list.iter().cloned());
                        next.push(entry);
                    }
                    *list = Arc::new(next);
                }
                let slot = slot.clone();
                Ok((
                    (),
                    vec![Disposer::infallible(move || {
                        let mut list = slot.list.write().unwrap_or_else(|e| e.into_inner());
                        let next: Vec<_> = list.iter().filter(|e| e.id != id).cloned().collect();
                        *list = Arc::new(next);
                    })],
                ))
            })
            .map(|((), r)| r)
    }

    /// Registers an `emit` listener through this scope.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_emit<E: EmitEvent>(
        &self,
        f: impl Fn(&E::Payload) + Send + Sync + 'static,
    ) -> Result<Registration> {
        self.on_emit_with::<E>(ListenOptions::default(), f)
    }

    /// [`Context::on_emit`] with options.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_emit_with<E: EmitEvent>(
        &self,
        opts: ListenOptions,
        f: impl Fn(&E::Payload) + Send + Sync + 'static,
    ) -> Result<Registration> {
        self.listen::<E, EmitFn<E::Payload>>(E::NAME, opts, Box::new(f))
    }

    /// Registers a `serial` listener. Return `Ok(Some(v))` to bail with `v`, `Ok(None)` to pass.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_serial<E: SerialEvent, F, Fut>(&self, f: F) -> Result<Registration>
    where
        F: Fn(E::Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Option<E::Output>, BoxError>> + Send + 'static,
    {
        self.on_serial_with::<E, F, Fut>(ListenOptions::default(), f)
    }

    /// [`Context::on_serial`] with options.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_serial_with<E: SerialEvent, F, Fut>(
        &self,
        opts: ListenOptions,
        f: F,
    ) -> Result<Registration>
    where
        F: Fn(E::Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Option<E::Output>, BoxError>> + Send + 'static,
    {
        let boxed: Box<SerialFn<E::Payload, E::Output>> = Box::new(move |p| Box::pin(f(p)));
        self.listen::<E, SerialFn<E::Payload, E::Output>>(E::NAME, opts, boxed)
    }

    /// Registers a `parallel` listener.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_parallel<E: ParallelEvent, F, Fut>(&self, f: F) -> Result<Registration>
    where
        F: Fn(E::Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        self.on_parallel_with::<E, F, Fut>(ListenOptions::default(), f)
    }

    /// [`Context::on_parallel`] with options.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_parallel_with<E: ParallelEvent, F, Fut>(
        &self,
        opts: ListenOptions,
        f: F,
    ) -> Result<Registration>
    where
        F: Fn(E::Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        let boxed: Box<ParallelFn<E::Payload>> = Box::new(move |p| Box::pin(f(p)));
        self.listen::<E, ParallelFn<E::Payload>>(E::NAME, opts, boxed)
    }

    /// Registers a `waterfall` listener (middleware).
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_waterfall<E: WaterfallEvent, F, Fut>(&self, f: F) -> Result<Registration>
    where
        F: Fn(E::Payload, Next<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = E::Output> + Send + 'static,
    {
        self.on_waterfall_with::<E, F, Fut>(ListenOptions::default(), f)
    }

    /// [`Context::on_waterfall`] with options.
    ///
    /// # Errors
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn on_waterfall_with<E: WaterfallEvent, F, Fut>(
        &self,
        opts: ListenOptions,
        f: F,
    ) -> Result<Registration>
    where
        F: Fn(E::Payload, Next<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = E::Output> + Send + 'static,
    {
        let boxed: Box<WaterfallFn<E>> = Box::new(move |p, n| Box::pin(f(p, n)));
        self.listen::<E, WaterfallFn<E>>(E::NAME, opts, boxed)
    }

    /// A dispatcher whose carrier key is `key` (`None` = only untagged and global listeners).
    pub fn dispatch_to(&self, key: Option<&ScopeKey>) -> Dispatch<'_> {
        Dispatch {
            ctx: self,
            key: key.cloned(),
        }
    }

    /// Unscoped `emit` (carrier key `None`). See [`Dispatch::emit`].
    pub fn emit<E: EmitEvent>(&self, payload: &E::Payload) {
        self.dispatch_to(None).emit::<E>(payload)
    }

    /// Unscoped `serial`. See [`Dispatch::serial`].
    ///
    /// # Errors
    /// [`KernelError::Listener`] with the first listener error.
    pub async fn serial<E: SerialEvent>(&self, payload: E::Payload) -> Result<Option<E::Output>> {
        self.dispatch_to(None).serial::<E>(payload).await
    }

    /// Unscoped `parallel`. See [`Dispatch::parallel`].
    ///
    /// # Errors
    /// [`KernelError::Parallel`] aggregating every listener failure.
    pub async fn parallel<E: ParallelEvent>(&self, payload: E::Payload) -> Result<usize> {
        self.dispatch_to(None).parallel::<E>(payload).await
    }

    /// Unscoped `waterfall`. See [`Dispatch::waterfall`].
    pub async fn waterfall<E, T, Fut>(&self, payload: E::Payload, terminal: T) -> E::Output
    where
        E: WaterfallEvent,
        T: FnOnce(E::Payload) -> Fut + Send + 'static,
        Fut: Future<Output = E::Output> + Send + 'static,
    {
        self.dispatch_to(None)
            .waterfall::<E, T, Fut>(payload, terminal)
            .await
    }
}

/// A dispatch carrier: a context plus the scope key used for filtering.
pub struct Dispatch<'a> {
    ctx: &'a Context,
    key: Option<ScopeKey>,
}

impl Dispatch<'_> {
    /// `emit`: calls each admitted listener synchronously in order. A panicking listener is
    /// caught and logged; later listeners still run.
    pub fn emit<E: EmitEvent>(&self, payload: &E::Payload) {
        let Some(slot) = self.ctx.inner.bus.slot::<E, EmitFn<E::Payload>>() else {
            return;
        };
        let list = slot.snapshot();
        let key = self.key.as_ref();
        for entry in list.iter() {
            if !entry.admits(key) {
                continue;
            }
            let f = &entry.f;
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| f(payload))) {
                tracing::error!(
                    target: "dsh_kernel",
                    event = E::NAME,
                    panic = %panic_message(panic.as_ref()),
                    "emit listener panicked; contained"
                );
            }
        }
    }

    /// Number of listeners of `E` this carrier would admit for an `emit`.
    pub fn emit_listeners<E: EmitEvent>(&self) -> usize {
        self.ctx
            .inner
            .bus
            .slot::<E, EmitFn<E::Payload>>()
            .map_or(0, |s| {
                s.snapshot()
                    .iter()
                    .filter(|e| e.admits(self.key.as_ref()))
                    .count()
            })
    }

    /// `serial`: awaits admitted listeners one by one; returns the first `Some` value
    /// (`Ok(None)` if every listener passed).
    ///
    /// # Errors
    /// [`KernelError::Listener`] with the first listener error; later listeners do not run.
    pub async fn serial<E: SerialEvent>(&self, payload: E::Payload) -> Result<Option<E::Output>> {
        let Some(slot) = self
            .ctx
            .inner
            .bus
            .slot::<E, SerialFn<E::Payload, E::Output>>()
        else {
            return Ok(None);
        };
        let list = slot.snapshot();
        for entry in list.iter() {
            if !entry.admits(self.key.as_ref()) {
                continue;
            }
            match (entry.f)(payload.clone()).await {
                Ok(Some(v)) => return Ok(Some(v)),
                Ok(None) => {}
                Err(source) => {
                    return Err(KernelError::Listener {
                        event: E::NAME,
                        source,
                    });
                }
            }
        }
        Ok(None)
    }

    /// `parallel`: starts every admitted listener concurrently and waits for all. Returns the
    /// number of listeners that ran.
    ///
    /// # Errors
    /// [`KernelError::Parallel`] with every failure, in listener order, after all settled.
    pub async fn parallel<E: ParallelEvent>(&self, payload: E::Payload) -> Result<usize> {
        let Some(slot) = self.ctx.inner.bus.slot::<E, ParallelFn<E::Payload>>() else {
            return Ok(0);
        };
        let list = slot.snapshot();
        let futs: Vec<_> = list
            .iter()
            .filter(|e| e.admits(self.key.as_ref()))
            .map(|e| (e.f)(payload.clone()))
            .collect();
        let n = futs.len();
        let results = futures::future::join_all(futs).await;
        let errors: Vec<BoxError> = results.into_iter().filter_map(|r| r.err()).collect();
        if errors.is_empty() {
            Ok(n)
        } else {
            Err(KernelError::Parallel {
                event: E::NAME,
                errors,
            })
        }
    }

    /// `waterfall`: runs the admitted listeners as a middleware chain around `terminal`, which
    /// runs only if the innermost listener calls its `next` (or there are no listeners).
    pub async fn waterfall<E, T, Fut>(&self, payload: E::Payload, terminal: T) -> E::Output
    where
        E: WaterfallEvent,
        T: FnOnce(E::Payload) -> Fut + Send + 'static,
        Fut: Future<Output = E::Output> + Send + 'static,
    {
        let list = match self.ctx.inner.bus.slot::<E, WaterfallFn<E>>() {
            Some(slot) => slot.snapshot(),
            None => return terminal(payload).await,
        };
        let next = Next::<E> {
            list,
            index: 0,
            key: self.key.clone(),
            terminal: Box::new(move |p| Box::pin(terminal(p))),
        };
        next.run(payload).await
    }
}

type Terminal<E> = Box<
    dyn FnOnce(<E as WaterfallEvent>::Payload) -> BoxFuture<'static, <E as WaterfallEvent>::Output>
        + Send,
>;

/// The rest of a waterfall chain, handed to each listener. Calling [`Next::run`] consumes it,
/// so a listener can continue the chain at most once; dropping it short-circuits.
pub struct Next<E: WaterfallEvent> {
    list: List<WaterfallFn<E>>,
    index: usize,
    key: Option<ScopeKey>,
    terminal: Terminal<E>,
}

impl<E: WaterfallEvent> Next<E> {
    /// Runs the next admitted listener (or the terminal) with `payload` and returns its output.
    pub fn run(mut self, payload: E::Payload) -> BoxFuture<'static, E::Output> {
        while let Some(entry) = self.list.get(self.index).cloned() {
            self.index += 1;
            if entry.admits(self.key.as_ref()) {
                return (entry.f)(payload, self);
            }
        }
        (self.terminal)(payload)
    }
}

impl<E: WaterfallEvent> std::fmt::Debug for Next<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("event", &E::NAME)
            .field("index", &self.index)
            .finish()
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Declares an event marker type and its dispatch mode in one place.
///
/// ```
/// # use dsh_kernel::event;
/// pub struct ToolsChanged { pub names: Vec<String> }
/// event! {
///     /// Fired after the tool registry changed.
///     pub struct ToolsChange: emit("tools/change") => ToolsChanged;
/// }
/// event! {
///     /// Middleware around a request.
///     pub struct AroundRequest: waterfall("demo/request") => String, usize;
/// }
/// ```
#[macro_export]
macro_rules! event {
    ($(#[$m:meta])* $vis:vis struct $name:ident : emit($ename:literal) => $payload:ty;) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name;
        impl $crate::EmitEvent for $name {
            const NAME: &'static str = $ename;
            type Payload = $payload;
        }
    };
    ($(#[$m:meta])* $vis:vis struct $name:ident : serial($ename:literal) => $payload:ty, $out:ty;) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name;
        impl $crate::SerialEvent for $name {
            const NAME: &'static str = $ename;
            type Payload = $payload;
            type Output = $out;
        }
    };
    ($(#[$m:meta])* $vis:vis struct $name:ident : parallel($ename:literal) => $payload:ty;) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name;
        impl $crate::ParallelEvent for $name {
            const NAME: &'static str = $ename;
            type Payload = $payload;
        }
    };
    ($(#[$m:meta])* $vis:vis struct $name:ident : waterfall($ename:literal) => $payload:ty, $out:ty;) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name;
        impl $crate::WaterfallEvent for $name {
            const NAME: &'static str = $ename;
            type Payload = $payload;
            type Output = $out;
        }
    };
}
