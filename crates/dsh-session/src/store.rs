//! [`SessionStore`]: the kernel service that creates, lists, forks and flushes live sessions,
//! and the kernel events it dispatches.
//!
//! See docs/upstream/session.md (Session store; Seeds, fork, end-seed).
//!
//! Events (all dispatched through the session's owner scope key, so scope-tagged listeners only
//! see their agents' sessions):
//! - [`SessionCreated`] `emit("session/created")` → [`SessionNotice`], after a session is live.
//! - [`SessionDisposed`] `emit("session/disposed")` → [`SessionNotice`], once per disposed session.
//! - [`SessionEventEmitted`] `emit("session/event")` → [`SessionEventNotice`], after every
//!   committed append, in seq order (constructor seeds are not published). Listener panics are
//!   contained by the kernel; the append still succeeds.
//! - [`SessionFlush`] `parallel("session/flush")` → [`SessionNotice`]: persistence drains the
//!   session's buffered events; [`SessionStore::flush`] reports whether any listener ran.
//!
//! Difference from upstream: a `session/created` listener cannot veto creation (kernel `emit`
//! contains listener failures).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use dsh_kernel::{Context, ScopeKey};

use crate::error::SessionError;
use crate::event::{EventType, SessionEvent};
use crate::header::{SessionHeader, is_absolute};
use crate::invariants::InvariantChecker;
use crate::registry::EventTypeRegistry;
use crate::session::{Session, now_ms};

/// Payload of `session/created`, `session/disposed` and `session/flush`.
#[derive(Debug, Clone)]
pub struct SessionNotice {
    /// The session.
    pub session: Arc<Session>,
    /// The scope key of the session's owner (agent), if any.
    pub owner: Option<ScopeKey>,
}

/// Payload of `session/event`: the session and the committed event.
#[derive(Debug, Clone)]
pub struct SessionEventNotice {
    /// The session the event was appended to.
    pub session: Arc<Session>,
    /// The committed (immutable) event.
    pub event: Arc<SessionEvent>,
}

dsh_kernel::event! {
    /// `session/created`: a session became live (after `SessionStore::create`/`fork`).
    pub struct SessionCreated: emit("session/created") => SessionNotice;
}
dsh_kernel::event! {
    /// `session/disposed`: a live session was released (`SessionStore::dispose`), once.
    pub struct SessionDisposed: emit("session/disposed") => SessionNotice;
}
dsh_kernel::event! {
    /// `session/event`: one committed append, published synchronously in seq order.
    pub struct SessionEventEmitted: emit("session/event") => SessionEventNotice;
}
dsh_kernel::event! {
    /// `session/flush`: make the session's accepted events durable (listeners = persistence).
    pub struct SessionFlush: parallel("session/flush") => SessionNotice;
}

/// Options of [`SessionStore::create`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Seed events (fork/replay); `Some(vec![])` still writes `session/end-seed` first.
    pub seed: Option<Vec<SessionEvent>>,
    /// Header/metadata; defaults to a minimal header (id, now, depth 0). Its `id` is overwritten
    /// by the store's id.
    pub meta: Option<SessionHeader>,
    /// The owner scope key used to filter this session's events.
    pub owner: Option<ScopeKey>,
}

#[derive(Debug)]
struct Entry {
    session: Arc<Session>,
    owner: Option<ScopeKey>,
}

/// The live-session registry (`ctx.sessions`). Provided as `Arc<SessionStore>` by this crate's
/// plugin.
#[derive(Debug)]
pub struct SessionStore {
    ctx: Context,
    registry: Arc<EventTypeRegistry>,
    sessions: Mutex<Sessions>,
    counter: AtomicU64,
}

/// The live sessions in creation order, plus their ids for O(1) duplicate checks (creating an
/// agent must not cost O(live sessions)).
#[derive(Debug, Default)]
struct Sessions {
    list: Vec<Entry>,
    ids: std::collections::HashSet<String>,
}

impl SessionStore {
    /// A store dispatching through `ctx`, admitting types through `registry`.
    pub fn new(ctx: Context, registry: Arc<EventTypeRegistry>) -> Self {
        Self {
            ctx,
            registry,
            sessions: Mutex::new(Sessions::default()),
            counter: AtomicU64::new(0),
        }
    }

    /// The event-type registry sessions of this store use.
    pub fn registry(&self) -> &Arc<EventTypeRegistry> {
        &self.registry
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a live session (default id `session-<n>`), installs its `session/event`
    /// publisher and emits `session/created`.
    ///
    /// # Errors
    /// [`SessionError::DuplicateSession`] for a live id; [`SessionError::FormatUnsupported`]
    /// for a bad header (relative `cwd`, …); any restore error of the seed.
    pub fn create(
        &self,
        id: Option<String>,
        opts: CreateOptions,
    ) -> Result<Arc<Session>, SessionError> {
        let id = match id {
            Some(id) => id,
            None => loop {
                let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
                let candidate = format!("session-{n}");
                if !self.lock().ids.contains(&candidate) {
                    break candidate;
                }
            },
        };
        if self.lock().ids.contains(&id) {
            return Err(SessionError::DuplicateSession { id });
        }
        let mut header = opts
            .meta
            .unwrap_or_else(|| SessionHeader::new(id.clone(), now_ms()));
        header.id = id.clone();
        if let Some(cwd) = &header.cwd
            && !is_absolute(cwd)
        {
            return Err(SessionError::FormatUnsupported {
                message: format!("cwd `{cwd}` is not absolute"),
            });
        }
        let session = Session::create_with(id, opts.seed, Some(header), self.registry.clone())?;
        self.adopt(session, opts.owner)
    }

    /// Makes an already constructed session live (e.g. `Session::from_restore_with(…,
    /// store.registry().clone())` for a resume that must not write `session/end-seed`):
    /// installs its `session/event` publisher, lists it and emits `session/created`.
    ///
    /// # Errors
    /// [`SessionError::DuplicateSession`] when its id is live;
    /// [`SessionError::Registration`] when it already has a publisher (adopted elsewhere).
    pub fn adopt(
        &self,
        session: Session,
        owner: Option<ScopeKey>,
    ) -> Result<Arc<Session>, SessionError> {
        let id = session.id().to_owned();
        let session = Arc::new(session);
        {
            let mut list = self.lock();
            if list.ids.contains(&id) {
                return Err(SessionError::DuplicateSession { id });
            }
            let weak: Weak<Session> = Arc::downgrade(&session);
            let ctx = self.ctx.clone();
            let key = owner.clone();
            let installed = session.set_publisher(Arc::new(move |event: &Arc<SessionEvent>| {
                if let Some(session) = weak.upgrade() {
                    ctx.dispatch_to(key.as_ref()).emit::<SessionEventEmitted>(
                        &SessionEventNotice {
                            session,
                            event: event.clone(),
                        },
                    );
                }
            }));
            if !installed {
                return Err(SessionError::Registration {
                    kind: "session/event".to_owned(),
                    message: format!("session `{id}` already has a publisher"),
                });
            }
            list.ids.insert(id.clone());
            list.list.push(Entry {
                session: session.clone(),
                owner: owner.clone(),
            });
        }
        self.ctx
            .dispatch_to(owner.as_ref())
            .emit::<SessionCreated>(&SessionNotice {
                session: session.clone(),
                owner,
            });
        Ok(session)
    }

    /// Disposes every live session (emitting `session/disposed` for each, in creation order).
    /// Run by the plugin when its scope is disposed. Returns how many were disposed.
    pub fn dispose_all(&self) -> usize {
        let ids: Vec<String> = self
            .lock()
            .list
            .iter()
            .map(|e| e.session.id().to_owned())
            .collect();
        ids.iter().filter(|id| self.dispose(id)).count()
    }

    /// Publishes a session restored from its stored log (resume): validates it like
    /// [`Session::from_restore`] (no `session/end-seed` is written), installs its
    /// `session/event` publisher and emits `session/created`.
    ///
    /// # Errors
    /// [`SessionError::DuplicateSession`] for a live id; every restore error of the log.
    pub fn restore(
        &self,
        events: Vec<SessionEvent>,
        header: SessionHeader,
        owner: Option<ScopeKey>,
    ) -> Result<Arc<Session>, SessionError> {
        let id = header.id.clone();
        if self.lock().ids.contains(&id) {
            return Err(SessionError::DuplicateSession { id });
        }
        let session = Session::from_restore_with(id, events, Some(header), self.registry.clone())?;
        self.adopt(session, owner)
    }

    /// The live session with `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock()
            .list
            .iter()
            .find(|e| e.session.id() == id)
            .map(|e| e.session.clone())
    }

    /// The owner key of a live session.
    pub fn owner_of(&self, id: &str) -> Option<ScopeKey> {
        self.lock()
            .list
            .iter()
            .find(|e| e.session.id() == id)
            .and_then(|e| e.owner.clone())
    }

    /// Every live session, in creation order.
    pub fn list(&self) -> Vec<Arc<Session>> {
        self.lock().list.iter().map(|e| e.session.clone()).collect()
    }

    /// Releases a live session and emits `session/disposed` once. Returns false if `id` was
    /// not live.
    pub fn dispose(&self, id: &str) -> bool {
        let entry = {
            let mut list = self.lock();
            if !list.ids.remove(id) {
                return false;
            }
            let Some(i) = list.list.iter().position(|e| e.session.id() == id) else {
                return false;
            };
            list.list.remove(i)
        };
        self.ctx
            .dispatch_to(entry.owner.as_ref())
            .emit::<SessionDisposed>(&SessionNotice {
                session: entry.session,
                owner: entry.owner,
            });
        true
    }

    /// Forks `source_id` at the inclusive `boundary` seq (default: its last event) into a new
    /// live session seeded with a deep copy of that prefix, header `{parentSession,
    /// seedLength, cwd (inherited), delegationDepth (inherited)}`. Its first live write is
    /// `session/end-seed`.
    ///
    /// # Errors
    /// [`SessionError::SessionNotFound`]; [`SessionError::BadForkBoundary`] for a boundary
    /// past the end or a prefix that ends inside an open turn (no clipping); create errors.
    pub fn fork(
        &self,
        source_id: &str,
        boundary: Option<u64>,
        child_id: Option<String>,
    ) -> Result<Arc<Session>, SessionError> {
        let source = self
            .get(source_id)
            .ok_or_else(|| SessionError::SessionNotFound {
                id: source_id.to_owned(),
            })?;
        let events = source.events();
        let end = match boundary {
            Some(b) => {
                if b >= events.len() as u64 {
                    return Err(SessionError::BadForkBoundary {
                        message: format!("boundary {b} past the log end ({} events)", events.len()),
                    });
                }
                b as usize + 1
            }
            None => events.len(),
        };
        let prefix = &events[..end];
        let mut tracker = InvariantChecker::new();
        for e in prefix {
            // Errors were already enforced at append time; only the open-turn state matters.
            let _ = tracker.check(e, None);
        }
        if let Some(t) = tracker.open_turn() {
            return Err(SessionError::BadForkBoundary {
                message: format!("prefix ends inside open turn {t}"),
            });
        }
        let seed: Vec<SessionEvent> = prefix.iter().map(|e| (**e).clone()).collect();
        let src_header = source.header();
        let mut header = SessionHeader::new(String::new(), now_ms());
        header.cwd = src_header.cwd.clone();
        header.parent_session = Some(source.id().to_owned());
        header.seed_length = Some(seed.len() as u64);
        header.delegation_depth = Some(src_header.depth());
        self.create(
            child_id,
            CreateOptions {
                seed: Some(seed),
                meta: Some(header),
                owner: self.owner_of(source_id),
            },
        )
    }

    /// Dispatches `session/flush` for `session` (parallel) and waits for every listener.
    /// Returns whether at least one listener ran.
    ///
    /// # Errors
    /// [`SessionError::Listener`] carrying every listener failure, after all settled.
    pub async fn flush(&self, session: &Arc<Session>) -> Result<bool, SessionError> {
        let owner = self.owner_of(session.id());
        let n = self
            .ctx
            .dispatch_to(owner.as_ref())
            .parallel::<SessionFlush>(SessionNotice {
                session: session.clone(),
                owner: owner.clone(),
            })
            .await
            .map_err(|e| SessionError::Listener {
                message: e.to_string(),
            })?;
        Ok(n > 0)
    }
}

/// True when `kind` is a type the store's registry admits without `ignorable`.
pub fn is_known_type(registry: &EventTypeRegistry, kind: &EventType) -> bool {
    !matches!(
        registry.status(kind),
        crate::registry::TypeStatus::Unknown | crate::registry::TypeStatus::Forbidden
    )
}
