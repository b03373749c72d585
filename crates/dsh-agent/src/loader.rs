//! The resume loader seam: [`SessionLoader`] (service `Arc<SessionLoader>`) loads a stored
//! session's header and balanced event log by id. A persistence plugin provides it; the agent
//! loop resumes through it, so the loop does not depend on any storage crate.

use dsh_kernel::BoxError;
use dsh_session::{SessionEvent, SessionHeader};
use futures::future::BoxFuture;

/// A stored session ready for `SessionStore::restore`: its header and every event
/// (`events[i].seq == i`, crash-repair closers included).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The stored header.
    pub header: SessionHeader,
    /// The balanced event log.
    pub events: Vec<SessionEvent>,
}

type LoadFn = dyn Fn(String) -> BoxFuture<'static, Result<StoredSession, BoxError>> + Send + Sync;

/// Loads stored sessions for resume (service `Arc<SessionLoader>`).
pub struct SessionLoader {
    load: Box<LoadFn>,
}

impl std::fmt::Debug for SessionLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLoader").finish_non_exhaustive()
    }
}

impl SessionLoader {
    /// A loader calling `load(id)`. The future must also make the store treat the session as
    /// resumed by this process (durable repair committed, restored events never re-written).
    pub fn new(
        load: impl Fn(String) -> BoxFuture<'static, Result<StoredSession, BoxError>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            load: Box::new(load),
        }
    }

    /// Loads the stored session `id`.
    ///
    /// # Errors
    /// The provider's failure (not found, corrupt, locked, persistence off, …), boxed.
    pub async fn load(&self, id: &str) -> Result<StoredSession, BoxError> {
        (self.load)(id.to_owned()).await
    }
}
