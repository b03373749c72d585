//! dsh-session: the append-only session log that is the single source of truth of an agent's
//! history — typed events ([`SessionEvent`], [`EventData`]), validated appends
//! ([`Session::append`]), the ordered surface and derived model messages
//! ([`Session::derive_messages`]), the event-type registry ([`EventTypeRegistry`]), the invariants
//! checker ([`InvariantChecker`]), the packed chunk-row codec ([`packed`]) and the kernel service
//! [`SessionStore`] with its events (`session/created`, `session/disposed`, `session/event`,
//! `session/flush`).
//!
//! See docs/upstream/session.md; wire form = upstream
//! session log format v0 (see `docs/formats.md`).
//!
//! The crate registers itself as a kernel plugin (after `dsh-llm`) that provides
//! `Arc<SessionStore>` and `Arc<EventTypeRegistry>` in the root scope layer.

mod error;
mod event;
mod header;
mod invariants;
mod lossless;
pub mod packed;
mod registry;
mod session;
mod store;
mod surface;

pub use error::SessionError;
pub use event::{
    AssistantChunkData, AssistantMessageData, CoreKind, EventData, EventType, RequestContext,
    RequestHeaderData, RequestHeaderReason, SESSION_FORMAT_VERSION, SessionEvent, StepData,
    SurfaceIntent, SurfaceOp, TodoItem, TodoStatus, TodoWriteData, ToolCallData, ToolResultData,
    ToolResultError, TurnEndData, TurnEndReason, TurnStartData,
};
pub use header::SessionHeader;
pub use invariants::{InvariantChecker, Violation, ViolationKind, check_invariants};
pub use lossless::{MAX_SAFE_INTEGER, ObjectEdit, Residual, check_lossless, json_equiv};
pub use registry::{
    EventTypeDecl, EventTypeRegistry, FORBIDDEN_TYPES, PayloadValidator, TypeStatus,
    UPSTREAM_CATALOG_OWNER, UPSTREAM_LOG_ONLY_TYPES,
};
pub use session::{
    Publisher, Session, derive_event_message, fold_request_context, fold_request_header, now_ms,
};
pub use store::{
    CreateOptions, SessionCreated, SessionDisposed, SessionEventEmitted, SessionEventNotice,
    SessionFlush, SessionNotice, SessionStore, is_known_type,
};
pub use surface::{
    Placement, SessionSurface, SurfaceFold, SurfaceManager, SurfaceReplacement, fold_surface,
};

use std::sync::Arc;

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let registry = Arc::new(EventTypeRegistry::with_upstream_catalog());
    ctx.provide(registry.clone())?.detach();
    let store = Arc::new(SessionStore::new(ctx.clone(), registry));
    ctx.provide(store.clone())?.detach();
    // On teardown every live session is announced as disposed (persistence drains it).
    ctx.effect(
        "dispose live sessions",
        vec![dsh_kernel::Disposer::infallible(move || {
            store.dispose_all();
        })],
    )?
    .detach();
    Ok(())
}

dsh_kernel::plugin! { after = [dsh_llm::PLUGIN], register = apply }

#[cfg(test)]
mod tests;
