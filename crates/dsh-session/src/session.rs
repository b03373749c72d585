//! [`Session`]: the append-only, validated event log with its incremental projections (surface,
//! derived messages, request header, request context).
//!
//! See docs/upstream/session.md (Append contract; Derivation; Seeds, fork, end-seed).
//!
//! Concurrency: a `Session` is shared as `Arc<Session>`; every method takes `&self`. Appends are
//! serialized by an append lock that is held through publication, so observers see events in
//! seq order; projections take a short state lock and never wait for publication. An append
//! from a `session/event` observer of the same session on the publishing thread is refused
//! with `REENTRANT_APPEND` before the log changes. An observer must not block on another thread
//! that appends to the same session (that append waits for the publication to finish).
//!
//! Invariants ([`crate::InvariantChecker`]) are always tracked; violations are refused on
//! restore always and on live appends in debug builds only (`cfg(debug_assertions)`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dsh_llm::{EpochHeader, Message};
use serde_json::Value;

use crate::error::SessionError;
use crate::event::{
    CoreKind, EventData, EventType, RequestContext, SessionEvent, SurfaceIntent, SurfaceOp,
};
use crate::header::SessionHeader;
use crate::invariants::InvariantChecker;
use crate::lossless::{MAX_SAFE_INTEGER, check_lossless};
use crate::registry::EventTypeRegistry;
use crate::surface::{Placement, SessionSurface, SurfaceManager};

/// Post-commit observer hook installed by the [`crate::SessionStore`] (emits `session/event`).
pub type Publisher = Arc<dyn Fn(&Arc<SessionEvent>) + Send + Sync>;

/// The length below which a restore's shrinking input buffer (capacity `cap`, in events) is
/// shrunk again: 7/8 of it, so the consumed part never holds more than an eighth of the buffer
/// and the shrinks, when the allocator copies, add up to a few passes over the input. Buffers
/// of up to 4,096 events are never shrunk (floor 0).
fn shrink_floor(cap: usize) -> usize {
    cap.saturating_sub((cap / 8).max(4_096))
}

/// Current wall clock in epoch milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: Cell<u64> = const { Cell::new(0) };
    }
    TOKEN.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// Projects one event to the message it derives to: `user/message` → the message;
/// `assistant/message` → its message unless its content is empty; `tool/result` → its message;
/// anything else → `None`. Returns the shared message (no copy).
pub fn derive_event_message(event: &SessionEvent) -> Option<Arc<Message>> {
    match &event.data {
        EventData::UserMessage(m) => Some(m.clone()),
        EventData::AssistantMessage(d) if !d.message.content.is_empty() => Some(d.message.clone()),
        EventData::ToolResult(d) => Some(d.message.clone()),
        _ => None,
    }
}

/// The header in force after `events`: the latest `request/header` snapshot, or `None`.
pub fn fold_request_header(events: &[Arc<SessionEvent>]) -> Option<EpochHeader> {
    events.iter().rev().find_map(|e| match &e.data {
        EventData::RequestHeader(h) => Some(h.header.clone()),
        _ => None,
    })
}

/// The route capacity in force after `events`: the latest `request/context`, or `None`.
pub fn fold_request_context(events: &[Arc<SessionEvent>]) -> Option<RequestContext> {
    events.iter().rev().find_map(|e| match &e.data {
        EventData::RequestContext(c) => Some(c.clone()),
        _ => None,
    })
}

#[derive(Debug, Default)]
struct DeriveCache {
    /// Shared with snapshots handed out by `messages_snapshot`; pushed in place when no
    /// snapshot is outstanding (`Arc::make_mut`).
    messages: Arc<Vec<Arc<Message>>>,
    nodes_done: usize,
    generation: u64,
}

#[derive(Debug, Default)]
struct State {
    events: Vec<Arc<SessionEvent>>,
    surface: SurfaceManager,
    invariants: InvariantChecker,
    derived: DeriveCache,
    last_header: Option<Arc<SessionEvent>>,
    last_context: Option<Arc<SessionEvent>>,
    end_seed_pending: bool,
}

/// Message-shape rules of the surface payloads: `user/message` and `tool/result` carry a
/// user-role message, `assistant/message` an assistant-role message with model provenance
/// (`source.kind == "model"`).
fn check_roles(e: &SessionEvent) -> Result<(), SessionError> {
    use dsh_llm::{MessageSource, Role};
    let bad = |m: &str| Err(SessionError::malformed(Some(e.seq), m));
    match &e.data {
        EventData::UserMessage(m) if m.role != Role::User => {
            bad("user/message must carry a user-role message")
        }
        EventData::ToolResult(d) if d.message.role != Role::User => {
            bad("tool/result must carry a user-role message")
        }
        EventData::AssistantMessage(d) if d.message.role != Role::Assistant => {
            bad("assistant/message must carry an assistant-role message")
        }
        EventData::AssistantMessage(d)
            if !matches!(d.message.source, MessageSource::Model { .. }) =>
        {
            bad("assistant/message must carry model provenance (source.kind = model)")
        }
        _ => Ok(()),
    }
}

/// What `commit` should do with an event that passed validation.
struct Checked {
    event: Arc<SessionEvent>,
    placement: Placement,
}

impl State {
    fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// Validates `e` against this state (with `checker` as the invariant state to use).
    fn validate(
        &self,
        e: SessionEvent,
        registry: &EventTypeRegistry,
        checker: &mut InvariantChecker,
        allow_end_seed: bool,
        check_invariants: bool,
        expected_seq: u64,
    ) -> Result<Checked, SessionError> {
        if e.seq != expected_seq {
            return Err(SessionError::SeqGap {
                expected: expected_seq,
                got: e.seq,
            });
        }
        if e.seq > MAX_SAFE_INTEGER || e.time > MAX_SAFE_INTEGER {
            return Err(SessionError::NonLosslessData {
                path: "/time".to_owned(),
                message: "seq/time outside ±(2^53−1)".to_owned(),
            });
        }
        let core = e.kind.core();
        if core != e.data.core_kind() {
            return Err(SessionError::malformed(
                Some(e.seq),
                format!("payload variant does not match event type `{}`", e.kind),
            ));
        }
        check_roles(&e)?;
        if core == Some(CoreKind::EndSeed) && !allow_end_seed {
            return Err(SessionError::ForbiddenEventType {
                kind: e.kind.to_string(),
                message: "only the session constructor writes session/end-seed".to_owned(),
            });
        }
        let opaque = match &e.data {
            EventData::Opaque(v) => Some(v),
            _ => None,
        };
        registry.check_admit(&e.kind, opaque, e.ignorable)?;
        check_lossless(&e.data)?;
        if let Some(r) = &e.residual {
            r.check_lossless()?;
        }
        let placement = self.surface.validate(
            &e.kind,
            e.seq,
            e.surface_op.as_ref(),
            e.source_event_seqs.as_deref(),
        )?;
        self.check_result_replacement(&e)?;
        // The tracker always advances (fork and `open_turn` read it); violations are only
        // enforced when asked (restore always, live appends in debug builds).
        if let Err(v) = checker.check(&e, Some(registry))
            && check_invariants
        {
            return Err(SessionError::Invariant(v));
        }
        Ok(Checked {
            event: Arc::new(e),
            placement,
        })
    }

    /// A `tool/result` replacing one surface node (the tool-result pruner) is exempt from step
    /// enclosure (see the invariants module), so it must replace a `tool/result` of the same
    /// turn, step and call. O(1).
    ///
    /// # Errors
    /// [`SessionError::BadSurfaceOp`] otherwise.
    fn check_result_replacement(&self, e: &SessionEvent) -> Result<(), SessionError> {
        let (EventData::ToolResult(new), Some(SurfaceOp::Replace { start, end })) =
            (&e.data, &e.surface_op)
        else {
            return Ok(());
        };
        if start != end {
            return Ok(());
        }
        let original = usize::try_from(*start)
            .ok()
            .and_then(|i| self.events.get(i));
        let same = original.is_some_and(|o| match &o.data {
            EventData::ToolResult(old) => {
                (old.turn, old.step) == (new.turn, new.step)
                    && old.call_id().is_some()
                    && old.call_id() == new.call_id()
            }
            _ => false,
        });
        if same {
            Ok(())
        } else {
            Err(SessionError::BadSurfaceOp {
                message: format!(
                    "a tool/result replacing seq {start} must replace a tool/result of the same turn, step and call"
                ),
            })
        }
    }

    fn commit(&mut self, c: Checked) -> Arc<SessionEvent> {
        self.surface.apply(c.event.seq, &c.placement);
        match &c.event.data {
            EventData::RequestHeader(_) => self.last_header = Some(c.event.clone()),
            EventData::RequestContext(_) => self.last_context = Some(c.event.clone()),
            _ => {}
        }
        self.events.push(c.event.clone());
        c.event
    }

    fn refresh_derived(&mut self) {
        let nodes = self.surface.nodes();
        let cache = &mut self.derived;
        if cache.generation != self.surface.generation() {
            cache.messages = Arc::new(Vec::with_capacity(nodes.len()));
            cache.nodes_done = 0;
            cache.generation = self.surface.generation();
        }
        let start = cache.nodes_done.min(nodes.len());
        if start == nodes.len() {
            return;
        }
        let list = Arc::make_mut(&mut cache.messages);
        for &seq in &nodes[start..] {
            if let Some(e) = usize::try_from(seq).ok().and_then(|i| self.events.get(i))
                && let Some(m) = derive_event_message(e)
            {
                list.push(m);
            }
        }
        cache.nodes_done = nodes.len();
    }
}

/// An event-sourced session: an append-only log of [`SessionEvent`]s and its projections.
pub struct Session {
    header: SessionHeader,
    first_live_seq: u64,
    registry: Arc<EventTypeRegistry>,
    publisher: OnceLock<Publisher>,
    append_lock: Mutex<()>,
    publishing: AtomicU64,
    state: Mutex<State>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.header.id)
            .field("len", &self.len())
            .finish()
    }
}

/// True when invariants are enforced on live appends (debug builds).
const CHECK_INVARIANTS_ON_APPEND: bool = cfg!(debug_assertions);

impl Session {
    /// Creates a session. `seed` (fork/replay) is validated like a restore; a seeded session
    /// (even `Some(vec![])`) writes `session/end-seed {}` as its first live write unless the
    /// seed already ends with one. `header` defaults to a minimal one (version 0, now).
    /// Uses [`EventTypeRegistry::shared_default`].
    ///
    /// # Errors
    /// As [`Session::from_restore`].
    pub fn create(
        id: impl Into<String>,
        seed: Option<Vec<SessionEvent>>,
        header: Option<SessionHeader>,
    ) -> Result<Session, SessionError> {
        Self::create_with(id, seed, header, EventTypeRegistry::shared_default())
    }

    /// [`Session::create`] with an explicit registry.
    ///
    /// # Errors
    /// As [`Session::from_restore`].
    pub fn create_with(
        id: impl Into<String>,
        seed: Option<Vec<SessionEvent>>,
        header: Option<SessionHeader>,
        registry: Arc<EventTypeRegistry>,
    ) -> Result<Session, SessionError> {
        let seeded = seed.is_some();
        let s = Self::restore_inner(id.into(), seed.unwrap_or_default(), header, registry)?;
        if seeded {
            let mut st = s.lock_state();
            let ends_with_seed = st
                .events
                .last()
                .is_some_and(|e| e.kind.core() == Some(CoreKind::EndSeed));
            st.end_seed_pending = !ends_with_seed;
        }
        Ok(s)
    }

    /// Restores a session from its full stored log (no end-seed is written). Validates the
    /// header, every envelope (contiguous seqs from 0, known types, lossless data), the surface
    /// ops, and the invariants.
    ///
    /// # Errors
    /// [`SessionError::FormatUnsupported`] (bad header, id mismatch), and every append error
    /// ([`SessionError::SeqGap`], [`SessionError::UnknownEventType`], …) for the first bad
    /// event (its `session/end-seed` events are allowed).
    pub fn from_restore(
        id: impl Into<String>,
        events: Vec<SessionEvent>,
        header: Option<SessionHeader>,
    ) -> Result<Session, SessionError> {
        Self::restore_inner(
            id.into(),
            events,
            header,
            EventTypeRegistry::shared_default(),
        )
    }

    /// [`Session::from_restore`] with an explicit registry.
    ///
    /// # Errors
    /// As [`Session::from_restore`].
    pub fn from_restore_with(
        id: impl Into<String>,
        events: Vec<SessionEvent>,
        header: Option<SessionHeader>,
        registry: Arc<EventTypeRegistry>,
    ) -> Result<Session, SessionError> {
        Self::restore_inner(id.into(), events, header, registry)
    }

    fn restore_inner(
        id: String,
        events: Vec<SessionEvent>,
        header: Option<SessionHeader>,
        registry: Arc<EventTypeRegistry>,
    ) -> Result<Session, SessionError> {
        let header = header.unwrap_or_else(|| SessionHeader::new(id.clone(), now_ms()));
        header.validate()?;
        if header.id != id {
            return Err(SessionError::FormatUnsupported {
                message: format!("header id `{}` does not match session id `{id}`", header.id),
            });
        }
        let mut st = State::default();
        st.events.reserve(events.len());
        // Each event moves into its own `Arc`. The input is reversed in place and popped, and
        // its buffer shrunk as it empties, so the consumed events' slots are released while
        // the restored ones grow: the log is never held twice. See docs/persistence.md
        // (Memory of a resume).
        let mut pending = events;
        pending.reverse();
        let mut floor = shrink_floor(pending.capacity());
        while let Some(e) = pending.pop() {
            let mut checker = std::mem::take(&mut st.invariants);
            let expected = st.next_seq();
            let r = st.validate(e, &registry, &mut checker, true, true, expected);
            st.invariants = checker;
            let c = r?;
            st.commit(c);
            if pending.len() < floor {
                pending.shrink_to_fit();
                floor = shrink_floor(pending.capacity());
            }
        }
        let first_live_seq = st.next_seq();
        Ok(Session {
            header,
            first_live_seq,
            registry,
            publisher: OnceLock::new(),
            append_lock: Mutex::new(()),
            publishing: AtomicU64::new(0),
            state: Mutex::new(st),
        })
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs the post-commit publisher (once; later calls are ignored and return false).
    pub fn set_publisher(&self, publisher: Publisher) -> bool {
        self.publisher.set(publisher).is_ok()
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// The creation header (kept outside the log).
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The registry this session admits types through.
    pub fn registry(&self) -> &Arc<EventTypeRegistry> {
        &self.registry
    }

    /// The first seq appended in this process (= constructor seed length).
    pub fn first_live_seq(&self) -> u64 {
        self.first_live_seq
    }

    /// The next seq (= log length).
    pub fn seq(&self) -> u64 {
        self.lock_state().next_seq()
    }

    /// Log length in events.
    pub fn len(&self) -> usize {
        self.lock_state().events.len()
    }

    /// True when the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the whole log (cheap `Arc` copies; later appends do not grow it).
    pub fn events(&self) -> Vec<Arc<SessionEvent>> {
        self.lock_state().events.clone()
    }

    /// Events with `seq >= from` (empty past the end).
    pub fn events_from(&self, from: u64) -> Vec<Arc<SessionEvent>> {
        let st = self.lock_state();
        let from = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(st.events.len());
        st.events[from..].to_vec()
    }

    /// The event at `seq`.
    pub fn event(&self, seq: u64) -> Option<Arc<SessionEvent>> {
        let st = self.lock_state();
        usize::try_from(seq)
            .ok()
            .and_then(|i| st.events.get(i).cloned())
    }

    /// The last event.
    pub fn last_event(&self) -> Option<Arc<SessionEvent>> {
        self.lock_state().events.last().cloned()
    }

    /// Appends one event stamped with the next seq and the current time (never earlier than
    /// the previous event's time).
    ///
    /// `intent` is required for surface types and must be `None` otherwise.
    ///
    /// # Errors
    /// `MALFORMED_EVENT` (payload variant ≠ type), `FORBIDDEN_EVENT_TYPE`
    /// (`session/end-seed`, `request/header-delta`), `UNKNOWN_EVENT_TYPE`,
    /// `INVALID_PLUGIN_PAYLOAD`, `NON_LOSSLESS_DATA`, `MISSING_SURFACE_INTENT`,
    /// `UNEXPECTED_SURFACE_INTENT`, `BAD_PROVENANCE`, `BAD_SURFACE_OP`, `INVARIANT_VIOLATION`
    /// (debug builds), `REENTRANT_APPEND`. The log is unchanged on error.
    pub fn append(
        &self,
        kind: impl Into<EventType>,
        data: EventData,
        intent: Option<SurfaceIntent>,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        self.append_opts(kind.into(), data, intent, false)
    }

    /// [`Session::append`] for a JSON payload: core types are parsed into their typed payload
    /// (`MALFORMED_EVENT` if they do not match; fields dsh does not model are carried in the
    /// event's `residual`, see docs/formats.md), others stay opaque. `ignorable` marks the event
    /// skippable by readers that do not know its type.
    ///
    /// # Errors
    /// As [`Session::append`].
    pub fn append_value(
        &self,
        kind: impl Into<EventType>,
        data: Value,
        intent: Option<SurfaceIntent>,
        ignorable: bool,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let kind = kind.into();
        let (data, residual) = EventData::from_value_carrying(&kind, data, None)?;
        let (surface_op, source_event_seqs) = match intent {
            Some(i) => (Some(i.surface_op), i.source_event_seqs),
            None => (None, None),
        };
        self.append_inner(
            SessionEvent {
                kind,
                seq: 0,
                time: 0,
                data,
                ignorable,
                source_event_seqs,
                surface_op,
                residual: residual.map(Arc::new),
            },
            true,
        )
    }

    /// [`Session::append`] with the `ignorable` flag.
    ///
    /// # Errors
    /// As [`Session::append`].
    pub fn append_opts(
        &self,
        kind: EventType,
        data: EventData,
        intent: Option<SurfaceIntent>,
        ignorable: bool,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let (surface_op, source_event_seqs) = match intent {
            Some(i) => (Some(i.surface_op), i.source_event_seqs),
            None => (None, None),
        };
        self.append_inner(
            SessionEvent {
                kind,
                seq: 0,
                time: 0,
                data,
                ignorable,
                source_event_seqs,
                surface_op,
                residual: None,
            },
            true,
        )
    }

    /// Appends a fully formed event (replay through the live rules): its `seq` must equal the
    /// log length and its `time` is kept as given. `session/end-seed` is refused like in
    /// [`Session::append`].
    ///
    /// # Errors
    /// As [`Session::append`], plus `SEQ_GAP`.
    pub fn append_event(&self, event: SessionEvent) -> Result<Arc<SessionEvent>, SessionError> {
        self.append_inner(event, false)
    }

    fn append_inner(
        &self,
        event: SessionEvent,
        stamp: bool,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let me = thread_token();
        if self.publishing.load(Ordering::Acquire) == me {
            return Err(SessionError::ReentrantAppend);
        }
        let _guard = self.append_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (pre_ev, result) = {
            let mut st = self.lock_state();
            let pending = st.end_seed_pending;
            // The invariant tracker is advanced in place (a failed check leaves it unchanged
            // and it runs last); only a pending end-seed needs a copy to roll back to.
            let saved = pending.then(|| st.invariants.clone());
            let mut checker = std::mem::take(&mut st.invariants);
            let outcome = self.validate_candidate(&st, &mut checker, event, stamp);
            let (pre, checked) = match outcome {
                Ok(v) => v,
                Err(e) => {
                    st.invariants = saved.unwrap_or(checker);
                    return Err(e);
                }
            };
            // Commit point: nothing below can fail.
            let pre_ev = pre.map(|p| st.commit(p));
            if pre_ev.is_some() {
                st.end_seed_pending = false;
            }
            let ev = st.commit(checked);
            st.invariants = checker;
            (pre_ev, ev)
        };
        if let Some(publisher) = self.publisher.get() {
            self.publishing.store(me, Ordering::Release);
            for e in pre_ev.iter().chain(std::iter::once(&result)) {
                if let Err(panic) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| publisher(e)))
                {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(target: "dsh_session", session = %self.header.id, seq = e.seq, panic = %msg, "session/event publisher panicked; contained");
                }
            }
            self.publishing.store(0, Ordering::Release);
        }
        Ok(result)
    }

    /// Validates a live candidate (and the pending end-seed before it, if any).
    fn validate_candidate(
        &self,
        st: &State,
        checker: &mut InvariantChecker,
        mut event: SessionEvent,
        stamp: bool,
    ) -> Result<(Option<Checked>, Checked), SessionError> {
        let mut next = st.next_seq();
        let now = if stamp {
            now_ms().max(st.events.last().map_or(0, |e| e.time))
        } else {
            event.time
        };
        let mut pre = None;
        if st.end_seed_pending {
            let seed_end = SessionEvent {
                kind: EventType::END_SEED,
                seq: next,
                time: now,
                data: EventData::EndSeed,
                ignorable: false,
                source_event_seqs: None,
                surface_op: None,
                residual: None,
            };
            pre = Some(st.validate(seed_end, &self.registry, checker, true, true, next)?);
            next += 1;
        }
        if stamp {
            event.seq = next;
            event.time = now;
        }
        let checked = st.validate(
            event,
            &self.registry,
            checker,
            false,
            CHECK_INVARIANTS_ON_APPEND,
            next,
        )?;
        Ok((pre, checked))
    }

    /// True when the next live write will be preceded by `session/end-seed`.
    pub fn end_seed_pending(&self) -> bool {
        self.lock_state().end_seed_pending
    }

    /// A snapshot of the surface (nodes in model order + replace generation).
    pub fn surface(&self) -> SessionSurface {
        self.lock_state().surface.snapshot()
    }

    /// The current replace generation.
    pub fn replace_generation(&self) -> u64 {
        self.lock_state().surface.generation()
    }

    /// The derived model history: one message per surface node in order, skipping nodes that
    /// derive nothing. Cached: a call costs O(nodes added since the last call); a replace
    /// rebuilds from the (already shared) messages. Returns a fresh `Vec` of shared `Arc`s.
    ///
    /// Cost: projection O(new nodes) plus the copy of the `Arc` pointers (O(messages), one
    /// refcount increment each). Use [`Session::messages_snapshot`] to avoid the copy.
    pub fn derive_messages(&self) -> Vec<Arc<Message>> {
        let mut st = self.lock_state();
        st.refresh_derived();
        st.derived.messages.as_ref().clone()
    }

    /// The derived history as a shared immutable snapshot: O(new nodes) and no copy, as long
    /// as the caller drops the previous snapshot before the next append (otherwise the next
    /// refresh copies the list once). Same content as [`Session::derive_messages`].
    pub fn messages_snapshot(&self) -> Arc<Vec<Arc<Message>>> {
        let mut st = self.lock_state();
        st.refresh_derived();
        st.derived.messages.clone()
    }

    /// Number of derived messages (refreshes the cache, no copy).
    pub fn derived_len(&self) -> usize {
        let mut st = self.lock_state();
        st.refresh_derived();
        st.derived.messages.len()
    }

    /// See [`derive_event_message`].
    pub fn derive_event_message(&self, event: &SessionEvent) -> Option<Arc<Message>> {
        derive_event_message(event)
    }

    /// The header in force for the next request (latest `request/header`), O(1).
    pub fn request_header(&self) -> Option<EpochHeader> {
        self.lock_state()
            .last_header
            .as_ref()
            .and_then(|e| match &e.data {
                EventData::RequestHeader(h) => Some(h.header.clone()),
                _ => None,
            })
    }

    /// The latest `request/header` event itself (no header clone), O(1).
    pub fn request_header_event(&self) -> Option<Arc<SessionEvent>> {
        self.lock_state().last_header.clone()
    }

    /// The route capacity in force (latest `request/context`), O(1).
    pub fn request_context(&self) -> Option<RequestContext> {
        self.lock_state()
            .last_context
            .as_ref()
            .and_then(|e| match &e.data {
                EventData::RequestContext(c) => Some(c.clone()),
                _ => None,
            })
    }

    /// The latest `request/context` event itself (no payload clone), O(1).
    pub fn request_context_event(&self) -> Option<Arc<SessionEvent>> {
        self.lock_state().last_context.clone()
    }

    /// The open turn and step per the invariant tracker (`(turn, step)`), e.g. for fork checks.
    pub fn open_turn(&self) -> Option<(u64, Option<u64>)> {
        let st = self.lock_state();
        st.invariants
            .open_turn()
            .map(|t| (t, st.invariants.open_step()))
    }
}
