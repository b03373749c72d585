//! The `tools/execute` wrapper that enforces [`crate::ToolDefinition::timeout`].
//!
//! Behaviour notes: `docs/tools.md` ("ToolDefinition": `timeoutMs` is enforced by a
//! `tools/execute` wrapper plugin, never sent to the model). The dsh-tools plugin installs it
//! once in its own scope; tests and embedders without the plugin call [`install_timeout_wrapper`].
//!
//! Behaviour: for a tool with a timeout, the body gets `signal.child_token()`; when the timeout
//! elapses first, that token is cancelled, the body is still awaited (drained), and the outcome
//! is replaced by [`crate::ToolsError::Timeout`] (`TOOL_TIMEOUT`,
//! `tool "<name>" timed out after <ms> ms`). Tools without a timeout pass straight through.

use dsh_kernel::{Context, Registration};

use crate::error::ToolsError;
use crate::events::ToolsExecute;
use crate::result::ToolExecutionResult;

/// Registers the timeout wrapper through `ctx` (untagged ⇒ applies to every call).
///
/// # Errors
/// [`ToolsError::Kernel`] if the scope is inactive.
pub fn install_timeout_wrapper(ctx: &Context) -> Result<Registration, ToolsError> {
    ctx.on_waterfall::<ToolsExecute, _, _>(|mut d, next| {
        let timeout = d.def.as_ref().and_then(|def| def.timeout());
        let Some(limit) = timeout else {
            return next.run(d);
        };
        let name = d.exec.name.clone();
        let child = d.signal.child_token();
        d.signal = child.clone();
        Box::pin(async move {
            let mut body = next.run(d);
            tokio::select! {
                biased;
                r = &mut body => r,
                () = tokio::time::sleep(limit) => {
                    child.cancel();
                    // Drain, never abandon.
                    let _ = body.await;
                    Ok(ToolExecutionResult::from_error(&ToolsError::Timeout {
                        tool: name,
                        ms: limit.as_millis(),
                    }))
                }
            }
        })
    })
    .map_err(Into::into)
}
