//! The approval service ([`ApprovalService`]): the open-turn check, the audit appends around
//! the `approval/request` dispatch, and the fail-closed mapping of answers to outcomes.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dsh_kernel::Context;
use dsh_session::Session;
use futures::FutureExt;

use crate::{
    ApprovalAnswer, ApprovalCaller, ApprovalConfig, ApprovalError, ApprovalOutcome, ApprovalPolicy,
    ApprovalQuestion, ApprovalRequest, ApprovalRequestEvent, AskedData, DecidedData, EVENT_ASKED,
    EVENT_DECIDED, EVENT_POLICY, PolicyData, session_io,
};

/// The approval service (`ctx.approval`).
#[derive(Debug, Clone)]
pub struct ApprovalService {
    ctx: Context,
    config: ApprovalConfig,
}

impl ApprovalService {
    /// A service dispatching through `ctx` with `config`.
    pub fn new(ctx: Context, config: ApprovalConfig) -> Self {
        Self { ctx, config }
    }

    /// The configured (fallback) policy.
    pub fn configured_policy(&self) -> ApprovalPolicy {
        self.config.policy
    }

    /// The effective policy for `session`: its last `approval/policy` event, else the config.
    pub fn effective_policy(&self, session: &Session) -> ApprovalPolicy {
        session_io::last_policy(session).unwrap_or(self.config.policy)
    }

    /// Records a policy change for the caller's session (`approval/policy {policy}`).
    /// Queuing a model-facing notice for the next step is the agent's job (dsh-agent).
    ///
    /// # Errors
    /// [`ApprovalError::Append`] if the session refuses the event.
    pub fn set_policy(
        &self,
        caller: &ApprovalCaller,
        policy: ApprovalPolicy,
    ) -> Result<(), ApprovalError> {
        let data = PolicyData {
            policy,
            source: None,
        };
        session_io::append(&caller.session, EVENT_POLICY, &data)
    }

    /// Asks. See the crate docs for the exact sequence.
    ///
    /// # Errors
    /// [`ApprovalError::NoOpenTurn`] (nothing appended) when the session has no open turn;
    /// [`ApprovalError::Append`] if an audit event is refused.
    pub async fn request(&self, req: ApprovalRequest) -> Result<ApprovalOutcome, ApprovalError> {
        let session = req.caller.session.clone();
        if !session_io::has_open_turn(&session) {
            return Err(ApprovalError::NoOpenTurn {
                session: req.caller.session_id.to_string(),
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        session_io::append(
            &session,
            EVENT_ASKED,
            &AskedData {
                id: id.clone(),
                tool_name: req.tool_name.clone(),
                call_id: req.call_id.as_ref().map(|c| c.to_string()),
                reason: req.reason.clone(),
            },
        )?;
        let outcome = self.decide(&session, id.clone(), req).await;
        session_io::append(&session, EVENT_DECIDED, &DecidedData { id, outcome })?;
        Ok(outcome)
    }

    async fn decide(&self, session: &Session, id: String, req: ApprovalRequest) -> ApprovalOutcome {
        if self.effective_policy(session) == ApprovalPolicy::Never {
            return ApprovalOutcome::Rejected;
        }
        let signal = req.signal.clone();
        if signal.is_cancelled() {
            return ApprovalOutcome::Cancelled;
        }
        let key = req.caller.key.clone();
        let question = ApprovalQuestion {
            id,
            request: Arc::new(req),
        };
        let dispatch = self.ctx.dispatch_to(Some(&key));
        let answer = AssertUnwindSafe(
            dispatch.waterfall::<ApprovalRequestEvent, _, _>(question, |_| async {
                Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Unavailable))
            }),
        )
        .catch_unwind();
        tokio::select! {
            biased;
            () = signal.cancelled() => ApprovalOutcome::Cancelled,
            a = answer => match a {
                Ok(Ok(ApprovalAnswer::Outcome(o))) => o,
                Ok(Ok(ApprovalAnswer::Other(s))) => ApprovalOutcome::parse(&s).unwrap_or(ApprovalOutcome::Unavailable),
                Ok(Err(e)) => {
                    tracing::warn!(target: "dsh_approval", error = %e, "approval answerer failed; unavailable");
                    ApprovalOutcome::Unavailable
                }
                Err(_) => {
                    tracing::warn!(target: "dsh_approval", "approval answerer panicked; unavailable");
                    ApprovalOutcome::Unavailable
                }
            },
        }
    }
}
