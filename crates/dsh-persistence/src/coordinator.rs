//! [`WriteCoordinator`]: the shared write path. It copies each `session/event` into a per-session
//! controller without blocking the producer, writes batches after a fixed batching window, drains
//! on flush, and retains/retries background failures.
//!
//! Behaviour (`docs/persistence.md`, "Write path"):
//! - the first pending event starts a fixed window (`write_batch_ms`, default 200 ms); later
//!   events join without resetting the deadline; expiry writes one batch; events arriving during a
//!   write form the next batch with their own window;
//! - `flush` drains to quiescence (including events admitted meanwhile);
//! - a background failure is logged once, the batch is retained, automatic retry pauses until a new
//!   event starts a fresh window; an explicit flush retries immediately and returns the failure;
//! - a per-session cursor skips events already stored (after resume);
//! - one writer per session in this process; the backend's lock file excludes other processes.

use dsh_kernel::ErrorCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_session::SessionEvent;

use crate::error::{PersistenceError, Result};
use crate::header::SessionHeader;
use crate::seam::SharedPersistence;

/// Default batching window (setting `write_batch_ms`), in milliseconds.
pub const DEFAULT_WRITE_BATCH_MAX_DELAY_MS: u64 = 200;

struct CtlState {
    header: SessionHeader,
    /// The backend already knows the session (created here, or resumed from storage).
    created: bool,
    /// Next seq known durable.
    stored: u64,
    /// Admitted, not yet durable (contiguous from `stored` unless a producer skipped seqs).
    pending: Vec<Arc<SessionEvent>>,
    /// A window timer is armed.
    timer_armed: bool,
    /// The retained background failure, until a write succeeds.
    failure: Option<PersistenceError>,
}

struct Controller {
    id: String,
    st: Mutex<CtlState>,
    /// Serialises writes of this session (one writer).
    gate: tokio::sync::Mutex<()>,
}

struct Inner {
    backend: SharedPersistence,
    delay: Duration,
    sessions: Mutex<HashMap<String, Arc<Controller>>>,
    closed: std::sync::atomic::AtomicBool,
    handle: Option<tokio::runtime::Handle>,
}

/// The per-process write coordinator over one [`crate::SessionPersistence`] backend. Cheap to clone.
#[derive(Clone)]
pub struct WriteCoordinator {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WriteCoordinator {
    /// A coordinator writing through `backend` with a batching window of `delay`. Timers run on
    /// the current tokio runtime at admission (or the one current at construction); without any
    /// runtime, events wait for an explicit [`WriteCoordinator::flush`].
    pub fn new(backend: SharedPersistence, delay: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                backend,
                delay,
                sessions: Mutex::new(HashMap::new()),
                closed: std::sync::atomic::AtomicBool::new(false),
                handle: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &SharedPersistence {
        &self.inner.backend
    }

    /// The batching window.
    pub fn delay(&self) -> Duration {
        self.inner.delay
    }

    fn controller(&self, header: &SessionHeader, created: bool, stored: u64) -> Arc<Controller> {
        let mut sessions = lock(&self.inner.sessions);
        sessions
            .entry(header.id.clone())
            .or_insert_with(|| {
                Arc::new(Controller {
                    id: header.id.clone(),
                    st: Mutex::new(CtlState {
                        header: header.clone(),
                        created,
                        stored,
                        pending: Vec::new(),
                        timer_armed: false,
                        failure: None,
                    }),
                    gate: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// Registers a session restored from storage (`load`/`prepare`): its first `next_seq` events
    /// are durable, so re-emitted events below the cursor are skipped.
    pub fn attach_restored(&self, header: &SessionHeader, next_seq: u64) {
        let ctl = self.controller(header, true, next_seq);
        let mut st = lock(&ctl.st);
        st.created = true;
        if st.stored < next_seq {
            st.stored = next_seq;
            st.pending.retain(|e| e.seq >= next_seq);
        }
    }

    /// Admits a copy of one committed event (the `session/event` observer). Never blocks on I/O:
    /// it takes a short in-memory lock and may arm the window timer. Events below the session's
    /// durable cursor or already pending are skipped; pending events are kept in seq order. After
    /// `close`, ignored.
    pub fn admit(&self, header: &SessionHeader, event: &Arc<SessionEvent>) {
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let ctl = self.controller(header, false, 0);
        let arm = {
            let mut st = lock(&ctl.st);
            if event.seq < st.stored {
                return;
            }
            // Pending stays sorted by seq and duplicate-free, so a seed admitted after a live
            // event (or a re-emitted event) still forms one contiguous batch.
            match st.pending.binary_search_by_key(&event.seq, |e| e.seq) {
                Ok(_) => return,
                Err(pos) => st.pending.insert(pos, event.clone()),
            }
            !std::mem::replace(&mut st.timer_armed, true)
        };
        if arm {
            let handle = tokio::runtime::Handle::try_current()
                .ok()
                .or_else(|| self.inner.handle.clone());
            match handle {
                Some(h) => {
                    let this = self.clone();
                    let ctl = ctl.clone();
                    // The deadline is fixed at admission of the first pending event.
                    let deadline = tokio::time::Instant::now() + self.inner.delay;
                    h.spawn(async move {
                        tokio::time::sleep_until(deadline).await;
                        this.window_expired(&ctl).await;
                    });
                }
                None => lock(&ctl.st).timer_armed = false,
            }
        }
    }

    async fn window_expired(&self, ctl: &Arc<Controller>) {
        let _gate = ctl.gate.lock().await;
        let batch = {
            let mut st = lock(&ctl.st);
            st.timer_armed = false;
            std::mem::take(&mut st.pending)
        };
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.write(ctl, batch).await {
            let first = {
                let mut st = lock(&ctl.st);
                let first = st.failure.is_none();
                st.failure = Some(e.clone());
                first
            };
            if first {
                tracing::error!(session = %ctl.id, code = e.code(), error = %e, "background session write failed; batch retained, retry on next event or flush");
            }
        }
    }

    /// Writes `batch` (creating the session in the backend first if needed). On failure the batch
    /// is put back in front of the pending events and the failure is returned.
    async fn write(&self, ctl: &Arc<Controller>, batch: Vec<Arc<SessionEvent>>) -> Result<()> {
        let (header, created) = {
            let st = lock(&ctl.st);
            (st.header.clone(), st.created)
        };
        let backend = self.inner.backend.clone();
        let id = ctl.id.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let r = (|| {
                if !created {
                    backend.create(header)?;
                }
                backend.append(&id, &batch)
            })();
            (batch, r)
        })
        .await;
        let (batch, result) = match joined {
            Ok(v) => v,
            Err(e) => {
                return Err(PersistenceError::Backend {
                    backend: "coordinator",
                    detail: format!("write task failed: {e}"),
                });
            }
        };
        let mut st = lock(&ctl.st);
        match result {
            Ok(()) => {
                st.created = true;
                st.stored += batch.len() as u64;
                st.failure = None;
                Ok(())
            }
            Err(e) => {
                let mut rest = std::mem::take(&mut st.pending);
                st.pending = batch;
                st.pending.append(&mut rest);
                st.pending.sort_by_key(|e| e.seq);
                st.pending.dedup_by_key(|e| e.seq);
                Err(e)
            }
        }
    }

    /// Drains the session's pending events to quiescence (events admitted meanwhile included).
    /// Unknown sessions flush trivially.
    ///
    /// # Errors
    /// The write failure (retained failures are retried first); the events stay pending.
    pub async fn flush(&self, id: &str) -> Result<()> {
        let Some(ctl) = lock(&self.inner.sessions).get(id).cloned() else {
            return Ok(());
        };
        loop {
            let _gate = ctl.gate.lock().await;
            let batch = std::mem::take(&mut lock(&ctl.st).pending);
            if batch.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.write(&ctl, batch).await {
                lock(&ctl.st).failure = Some(e.clone());
                return Err(e);
            }
        }
    }

    /// Flushes every session; returns the first failure after trying all.
    ///
    /// # Errors
    /// The first session's write failure.
    pub async fn flush_all(&self) -> Result<()> {
        let ids: Vec<String> = lock(&self.inner.sessions).keys().cloned().collect();
        let mut first = None;
        for id in ids {
            if let Err(e) = self.flush(&id).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The retained background failure of a session, if its last write failed.
    pub fn retained_failure(&self, id: &str) -> Option<PersistenceError> {
        let ctl = lock(&self.inner.sessions).get(id).cloned()?;
        let st = lock(&ctl.st);
        st.failure.clone()
    }

    /// `(stored next seq, pending count)` of a session, if known.
    pub fn cursor(&self, id: &str) -> Option<(u64, usize)> {
        let ctl = lock(&self.inner.sessions).get(id).cloned()?;
        let st = lock(&ctl.st);
        Some((st.stored, st.pending.len()))
    }

    /// `session/disposed`: final drain, then forget the session and release its backend writer.
    ///
    /// # Errors
    /// The final flush failure (the session is released anyway; pending events are dropped and
    /// the failure is returned so the caller can report it).
    pub async fn release(&self, id: &str) -> Result<()> {
        let r = self.flush(id).await;
        lock(&self.inner.sessions).remove(id);
        let backend = self.inner.backend.clone();
        let id = id.to_owned();
        let _ = tokio::task::spawn_blocking(move || backend.release(&id)).await;
        r
    }

    /// Teardown: stop admission, then flush every session.
    ///
    /// # Errors
    /// The first flush failure.
    pub async fn close(&self) -> Result<()> {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.flush_all().await
    }
}
