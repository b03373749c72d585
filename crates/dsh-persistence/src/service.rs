//! [`PersistenceService`] (`ctx.sessionPersistence`): the chosen backend plus the write
//! coordinator, resolved once from [`PersistenceSettings`] and the [`PersistenceBackends`]
//! registry, and the kernel wiring (`session/*` listeners, checkpoint barriers, the resume
//! [`dsh_agent::SessionLoader`]).
//!
//! Resolution is deferred: the service and its listeners exist from the moment this crate's
//! plugin is applied, backends register afterwards, and the backend is opened on the first call
//! of [`PersistenceService::resolve`] (the host calls it after boot; every other entry point calls
//! it too). Behaviour: `docs/persistence.md` ("Backends are plugins").

use dsh_kernel::ErrorCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_session::{
    EventTypeRegistry, SessionCreated, SessionDisposed, SessionEventEmitted, SessionFlush,
};

use crate::backends::{BackendConfig, PersistenceBackends};
use crate::coordinator::WriteCoordinator;
use crate::error::{PersistenceError, Result};
use crate::seam::{LoadedSession, SharedPersistence};
use crate::settings::PersistenceSettings;

/// The resolved backend and its write path.
struct Active {
    backend: SharedPersistence,
    coordinator: WriteCoordinator,
}

/// How the service finds its backend.
enum Source {
    /// Chosen by settings among the registered backends.
    Registry {
        settings: PersistenceSettings,
        backends: Arc<PersistenceBackends>,
        registry: Arc<EventTypeRegistry>,
    },
    /// Given by the host ([`crate::install`]).
    Fixed,
}

/// The kernel service: the backend seam plus the write coordinator (service
/// `Arc<PersistenceService>`).
pub struct PersistenceService {
    source: Source,
    /// `Ok(None)`: persistence is off; `Err`: the configured backend could not be opened.
    resolved: OnceLock<Result<Option<Active>>>,
}

impl std::fmt::Debug for PersistenceService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistenceService")
            .field("backend", &self.backend_name())
            .finish_non_exhaustive()
    }
}

impl PersistenceService {
    /// A service that opens the backend named by `settings` from `backends` on first use.
    pub fn from_settings(
        settings: PersistenceSettings,
        backends: Arc<PersistenceBackends>,
        registry: Arc<EventTypeRegistry>,
    ) -> Self {
        Self {
            source: Source::Registry {
                settings,
                backends,
                registry,
            },
            resolved: OnceLock::new(),
        }
    }

    /// A service over an already opened backend, batching writes for `write_batch_max_delay`.
    pub fn with_backend(backend: SharedPersistence, write_batch_max_delay: Duration) -> Self {
        let resolved = OnceLock::new();
        let coordinator = WriteCoordinator::new(backend.clone(), write_batch_max_delay);
        let _ = resolved.set(Ok(Some(Active {
            backend,
            coordinator,
        })));
        Self {
            source: Source::Fixed,
            resolved,
        }
    }

    fn active(&self) -> &Result<Option<Active>> {
        self.resolved.get_or_init(|| {
            let Source::Registry {
                settings,
                backends,
                registry,
            } = &self.source
            else {
                return Ok(None);
            };
            let (Some(name), Some(dir)) = (settings.backend_name(), settings.dir.as_ref()) else {
                return Ok(None);
            };
            let config = BackendConfig {
                dir: dir.clone(),
                registry: registry.clone(),
            };
            match backends.open(name, &config) {
                Ok(backend) => Ok(Some(Active {
                    coordinator: WriteCoordinator::new(
                        backend.clone(),
                        settings.write_batch_delay(),
                    ),
                    backend,
                })),
                Err(e) => {
                    // Surfaced to the caller by `resolve` and every flush; logged once for the record.
                    tracing::warn!(backend = name, code = e.code(), error = %e, "session persistence backend cannot be opened; nothing will be stored");
                    Err(e)
                }
            }
        })
    }

    /// Opens the configured backend if not done yet (idempotent; the result is kept). Returns
    /// whether sessions are persisted (`false`: persistence is off by settings).
    ///
    /// # Errors
    /// [`PersistenceError::UnknownBackend`] (the message lists the registered names) or the
    /// backend's open failure; every later use fails with the same error.
    pub fn resolve(&self) -> Result<bool> {
        match self.active() {
            Ok(a) => Ok(a.is_some()),
            Err(e) => Err(e.clone()),
        }
    }

    fn require(&self) -> Result<&Active> {
        match self.active() {
            Ok(Some(a)) => Ok(a),
            Ok(None) => Err(PersistenceError::Disabled),
            Err(e) => Err(e.clone()),
        }
    }

    /// The resolved backend seam.
    ///
    /// # Errors
    /// [`PersistenceError::Disabled`] when persistence is off; resolution errors as
    /// [`PersistenceService::resolve`].
    pub fn backend(&self) -> Result<SharedPersistence> {
        self.require().map(|a| a.backend.clone())
    }

    /// The name of the resolved backend (`None` when off or failed).
    pub fn backend_name(&self) -> Option<&'static str> {
        match self.resolved.get() {
            Some(Ok(Some(a))) => Some(a.backend.name()),
            _ => None,
        }
    }

    /// The write coordinator fed by `session/event` (`None` when off or failed).
    pub fn coordinator(&self) -> Option<&WriteCoordinator> {
        match self.active() {
            Ok(Some(a)) => Some(&a.coordinator),
            _ => None,
        }
    }

    /// The backend registry this service chooses from (`None` for a host-given backend).
    pub fn backends(&self) -> Option<&Arc<PersistenceBackends>> {
        match &self.source {
            Source::Registry { backends, .. } => Some(backends),
            Source::Fixed => None,
        }
    }

    /// Loads (and durably repairs) a stored session for resume, and registers the coordinator
    /// cursor at its length so restored events are never re-appended. Blocking I/O runs on
    /// `spawn_blocking`. Feed the result to `Session::from_restore(id, loaded.events,
    /// Some(loaded.header))`.
    ///
    /// # Errors
    /// As [`crate::SessionPersistence::prepare`]; [`PersistenceError::Disabled`] when off.
    pub async fn resume(&self, id: &str) -> Result<LoadedSession> {
        let active = self.require()?;
        let backend = active.backend.clone();
        let owned = id.to_owned();
        let loaded = tokio::task::spawn_blocking(move || backend.prepare(&owned))
            .await
            .map_err(|e| PersistenceError::Backend {
                backend: "coordinator",
                detail: e.to_string(),
            })??;
        active
            .coordinator
            .attach_restored(&loaded.header, loaded.events.len() as u64);
        Ok(loaded)
    }

    /// Flushes one session (as `session/flush` does). Without persistence there is nothing to
    /// flush.
    ///
    /// # Errors
    /// As [`WriteCoordinator::flush`]; the resolution error when the backend cannot be opened
    /// (fail-closed: nothing the caller made durable can be claimed).
    pub async fn flush(&self, id: &str) -> Result<()> {
        match self.active() {
            Ok(Some(a)) => a.coordinator.flush(id).await,
            Ok(None) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Flushes every session.
    ///
    /// # Errors
    /// As [`PersistenceService::flush`].
    pub async fn flush_all(&self) -> Result<()> {
        match self.active() {
            Ok(Some(a)) => a.coordinator.flush_all().await,
            Ok(None) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Provides `service` in `ctx` and registers global listeners for `session/created` (admits seed
/// events, which are not published), `session/event` (admit, never blocks), `session/flush`
/// (drain; failure surfaces to the flusher), `session/disposed` (final drain, release; failure
/// logged), the checkpoint barriers, and the resume [`dsh_agent::SessionLoader`].
///
/// # Errors
/// Kernel registration failures.
pub fn wire(ctx: &Context, service: Arc<PersistenceService>) -> std::result::Result<(), BoxError> {
    ctx.provide(service.clone())?.detach();
    let s = service.clone();
    ctx.provide(Arc::new(dsh_agent::SessionLoader::new(move |id| {
        let s = s.clone();
        Box::pin(async move {
            let loaded = s.resume(&id).await.map_err(|e| Box::new(e) as BoxError)?;
            Ok(dsh_agent::StoredSession {
                header: loaded.header,
                events: loaded.events,
            })
        })
    })))?
    .detach();
    let s = service.clone();
    ctx.on_emit_with::<SessionEventEmitted>(ListenOptions::global(), move |n| {
        if let Some(c) = s.coordinator() {
            c.admit(n.session.header(), &n.event);
        }
    })?
    .detach();
    let s = service.clone();
    // Seed events (fork/replay) are not published as `session/event`: admit them at creation.
    ctx.on_emit_with::<SessionCreated>(ListenOptions::global(), move |n| {
        if let Some(c) = s.coordinator() {
            let header = n.session.header().clone();
            for e in n.session.events() {
                c.admit(&header, &e);
            }
        }
    })?
    .detach();
    let s = service.clone();
    ctx.on_parallel_with::<SessionFlush, _, _>(ListenOptions::global(), move |n| {
        let s = s.clone();
        let id = n.session.id().to_owned();
        async move { s.flush(&id).await.map_err(|e| Box::new(e) as BoxError) }
    })?
    .detach();
    let s = service.clone();
    ctx.on_emit_with::<SessionDisposed>(ListenOptions::global(), move |n| {
        let Some(c) = s.coordinator().cloned() else {
            return;
        };
        let id = n.session.id().to_owned();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                if let Err(e) = c.release(&id).await {
                    tracing::error!(session = %id, code = e.code(), error = %e, "final session drain failed");
                }
            });
        }
    })?
    .detach();
    crate::checkpoint::register(ctx, &service)?;
    Ok(())
}
