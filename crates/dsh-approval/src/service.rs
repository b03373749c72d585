//! The approval service ([`ApprovalService`]): the open-turn check, the audit appends around
//! the `approval/request` dispatch, and the fail-closed mapping of answers to outcomes.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_kernel::Context;
use dsh_llm::{CallId, SessionId};
use dsh_session::Session;
use futures::FutureExt;

use crate::{
    ApprovalAnswer, ApprovalCaller, ApprovalConfig, ApprovalError, ApprovalOutcome, ApprovalPolicy,
    ApprovalQuestion, ApprovalRequest, ApprovalRequestEvent, AskedData, DecidedData, EVENT_ASKED,
    EVENT_DECIDED, EVENT_POLICY, PolicyData, session_io,
};

/// Most `allowed-once` grants kept for [`ApprovalService::take_grant`] (the oldest is dropped
/// first); a grant is normally taken by its call moments after the answer.
pub const MAX_PENDING_GRANTS: usize = 256;

/// The approval service (`ctx.approval`).
#[derive(Debug, Clone)]
pub struct ApprovalService {
    ctx: Context,
    config: ApprovalConfig,
    /// `(session id, call id)` of `allowed-once` answers not yet taken by their call.
    grants: Arc<Mutex<VecDeque<(SessionId, CallId)>>>,
    /// `(session id, call id, reason)` of `rejected` answers given with a reason, not yet
    /// taken by the tool pipeline.
    reasons: Arc<Mutex<VecDeque<(SessionId, CallId, String)>>>,
}

impl ApprovalService {
    /// A service dispatching through `ctx` with `config`.
    pub fn new(ctx: Context, config: ApprovalConfig) -> Self {
        Self {
            ctx,
            config,
            grants: Arc::default(),
            reasons: Arc::default(),
        }
    }

    /// Takes the reason the person gave for rejecting call `call_id` in session `session_id`
    /// ([`ApprovalAnswer::RejectedBecause`]): `Some` once after such an answer, `None` otherwise.
    /// The tool pipeline appends it to its denial text, so the model learns why.
    pub fn take_rejection_reason(
        &self,
        session_id: &SessionId,
        call_id: &CallId,
    ) -> Option<String> {
        let mut reasons = self.reasons.lock().unwrap_or_else(PoisonError::into_inner);
        let i = reasons
            .iter()
            .position(|(s, c, _)| s == session_id && c == call_id)?;
        reasons.remove(i).map(|(_, _, r)| r)
    }

    /// Takes the `allowed-once` grant of call `call_id` in session `session_id`: true exactly
    /// once after [`ApprovalService::request`] answered `allowed-once` for a request naming that
    /// call, false otherwise (never asked, refused, or already taken). A guard of the tool's own
    /// (the filesystem fence of `write`/`edit`) uses it to let an approved call through, so the
    /// approval covers that one call only.
    pub fn take_grant(&self, session_id: &SessionId, call_id: &CallId) -> bool {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        match grants
            .iter()
            .position(|(s, c)| s == session_id && c == call_id)
        {
            Some(i) => {
                grants.remove(i);
                true
            }
            None => false,
        }
    }

    fn record_grant(&self, session_id: &SessionId, call_id: &CallId) {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        if grants.len() >= MAX_PENDING_GRANTS {
            grants.pop_front();
        }
        grants.push_back((session_id.clone(), call_id.clone()));
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
        let grant = req
            .call_id
            .clone()
            .map(|c| (req.caller.session_id.clone(), c));
        let (outcome, why) = self.decide(&session, id.clone(), req).await;
        session_io::append(&session, EVENT_DECIDED, &DecidedData { id, outcome })?;
        if outcome == ApprovalOutcome::AllowedOnce
            && let Some((s, c)) = grant.clone()
        {
            self.record_grant(&s, &c);
        }
        if outcome == ApprovalOutcome::Rejected
            && let (Some((s, c)), Some(why)) = (grant, why)
        {
            let mut reasons = self.reasons.lock().unwrap_or_else(PoisonError::into_inner);
            if reasons.len() >= MAX_PENDING_GRANTS {
                reasons.pop_front();
            }
            reasons.push_back((s, c, why));
        }
        Ok(outcome)
    }

    /// The outcome, and the reason given with a rejection.
    async fn decide(
        &self,
        session: &Session,
        id: String,
        req: ApprovalRequest,
    ) -> (ApprovalOutcome, Option<String>) {
        if self.effective_policy(session) == ApprovalPolicy::Never {
            return (ApprovalOutcome::Rejected, None);
        }
        let signal = req.signal.clone();
        if signal.is_cancelled() {
            return (ApprovalOutcome::Cancelled, None);
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
            () = signal.cancelled() => (ApprovalOutcome::Cancelled, None),
            a = answer => match a {
                Ok(Ok(ApprovalAnswer::Outcome(o))) => (o, None),
                Ok(Ok(ApprovalAnswer::Other(s))) => (ApprovalOutcome::parse(&s).unwrap_or(ApprovalOutcome::Unavailable), None),
                Ok(Ok(ApprovalAnswer::RejectedBecause(why))) => (ApprovalOutcome::Rejected, Some(why)),
                Ok(Err(e)) => {
                    tracing::warn!(target: "dsh_approval", error = %e, "approval answerer failed; unavailable");
                    (ApprovalOutcome::Unavailable, None)
                }
                Err(_) => {
                    tracing::warn!(target: "dsh_approval", "approval answerer panicked; unavailable");
                    (ApprovalOutcome::Unavailable, None)
                }
            },
        }
    }
}
