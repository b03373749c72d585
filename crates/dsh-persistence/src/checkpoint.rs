//! The checkpoint policy (upstream it is a plugin of its own; here a module registered by this
//! crate's plugin): flush barriers chosen by policy, not by the backend.
//!
//! Behaviour (`docs/persistence.md`, "Checkpoint policy"):
//! 1. `llm/stream` ([`dsh_llm::LlmStream`]) is wrapped: the adapter stream is not opened until the
//!    buffered events (including `request/header`) are durable; a flush failure yields a stream
//!    with one `Err(LlmFailure{code: SESSION_FLUSH_FAILED})` and the adapter is never called;
//! 2. `tools/execute` ([`dsh_tools::ToolsExecute`]) is wrapped: a tool body starts only after its
//!    `tool/call` is durable; cancellation during that flush ⇒ `ABORTED_BEFORE_DISPATCH`; a flush
//!    failure ⇒ `Err` (body not run, fail-closed).
//! 3. The step boundary: the loop emits `session/flush` before its next request; barrier (1) also
//!    covers it because the next request cannot open before the flush. (`agent/pre-step` does not
//!    exist yet in dsh; when the loop crate lands, hook it here.)
//!
//! The listeners are global (they see every agent's dispatch). The barrier drains the calling
//! session (`GenerateOptions::session_id`, `ToolExecution::caller.session_id`); without one it
//! drains every session with pending events (a superset barrier is still correct). Nested tool
//! dispatches (`call_id != root_call_id`) reuse the outer checkpoint and do not flush.

use dsh_kernel::ErrorCode;
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{LlmFailure, LlmStream};
use dsh_tools::{ToolsError, ToolsExecute};
use futures::StreamExt;

use std::sync::Arc;

use crate::service::PersistenceService;

/// Failure code of a fail-closed checkpoint (flush failed before a model call).
pub const SESSION_FLUSH_FAILED: &str = "SESSION_FLUSH_FAILED";

/// Registers the barriers through `ctx` (detached: they live as long as the scope). Without
/// persistence the barriers pass straight through; a backend that cannot be opened fails them.
///
/// # Errors
/// Kernel registration failures (inactive scope).
pub fn register(ctx: &Context, service: &Arc<PersistenceService>) -> Result<(), BoxError> {
    let coord = service.clone();
    ctx.on_waterfall_with::<LlmStream, _, _>(ListenOptions::global(), move |opts, next| {
        let coord = coord.clone();
        async move {
            let flushed = match opts.session_id.as_deref() {
                Some(id) => coord.flush(id).await,
                None => coord.flush_all().await,
            };
            match flushed {
                Ok(()) => next.run(opts).await,
                Err(e) => {
                    tracing::error!(code = e.code(), error = %e, "checkpoint before llm/stream failed; request not sent");
                    let failure = LlmFailure::new(SESSION_FLUSH_FAILED, format!("session checkpoint failed: {e}"));
                    futures::stream::once(async move { Err(failure) }).boxed()
                }
            }
        }
    })?
    .detach();
    let coord = service.clone();
    ctx.on_waterfall_with::<ToolsExecute, _, _>(ListenOptions::global(), move |exec, next| {
        let coord = coord.clone();
        async move {
            if exec.exec.call_id != exec.exec.root_call_id {
                return next.run(exec).await;
            }
            let signal = exec.signal.clone();
            let session = exec.exec.caller.as_ref().map(|c| c.session_id.to_string());
            let flush = async {
                match session.as_deref() {
                    Some(id) => coord.flush(id).await,
                    None => coord.flush_all().await,
                }
            };
            let flushed = tokio::select! {
                r = flush => Some(r),
                () = signal.cancelled() => None,
            };
            match flushed {
                None => Err(Box::new(ToolsError::AbortedBeforeDispatch) as BoxError),
                Some(Err(e)) => {
                    tracing::error!(code = e.code(), error = %e, "checkpoint before tool body failed; body not run");
                    Err(Box::new(e) as BoxError)
                }
                Some(Ok(())) => next.run(exec).await,
            }
        }
    })?
    .detach();
    Ok(())
}
