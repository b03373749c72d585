//! One question and who asks it: [`ApprovalCaller`], [`ApprovalRequest`], and the
//! `approval/request` waterfall ([`ApprovalRequestEvent`]) that carries it to the answerers.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, ScopeKey};
use dsh_llm::{CallId, SessionId};
use dsh_session::Session;
use tokio_util::sync::CancellationToken;

use crate::ApprovalAnswer;

/// The caller of a request: the agent's scope key (filters `approval/request` dispatch), its
/// scope and its session (where the audit events go).
#[derive(Clone)]
pub struct ApprovalCaller {
    /// The agent's scope key.
    pub key: ScopeKey,
    /// The agent's scope.
    pub ctx: Context,
    /// The agent's session log.
    pub session: Arc<Session>,
    /// The session id.
    pub session_id: SessionId,
}

impl std::fmt::Debug for ApprovalCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalCaller")
            .field("key", &self.key)
            .field("session_id", &self.session_id)
            .finish()
    }
}

/// One question (no arguments: a UI links it to the call by `call_id`).
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// Who asks.
    pub caller: ApprovalCaller,
    /// The tool's name.
    pub tool_name: String,
    /// The tool call id, if the request is about one call.
    pub call_id: Option<CallId>,
    /// Why approval is needed.
    pub reason: Option<String>,
    /// Fires when the question is moot (turn aborted) ⇒ `cancelled`.
    pub signal: CancellationToken,
}

/// Payload of `approval/request`: the request plus its fresh id.
#[derive(Debug, Clone)]
pub struct ApprovalQuestion {
    /// Fresh per request (a v4 UUID, as upstream writes it), as recorded in `approval/asked`.
    pub id: String,
    /// The request.
    pub request: Arc<ApprovalRequest>,
}

dsh_kernel::event! {
    /// `approval/request` (waterfall `(question, next) → answer`; default `unavailable`). Front
    /// ends register an answerer; it may call `next` to defer to outer answerers.
    pub struct ApprovalRequestEvent: waterfall("approval/request") => ApprovalQuestion, Result<ApprovalAnswer, BoxError>;
}
