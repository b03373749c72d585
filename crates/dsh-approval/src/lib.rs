//! The dsh approval service ([`ApprovalService`], upstream `ctx.approval` from
//! `dsh-user-approval`): asks whatever answerer a front end registers whether a tool call may run,
//! fails closed, and audits every question and answer in the caller's session log.
//!
//! See docs/upstream/approval.md.
//!
//! - Outcomes: `allowed-once | rejected | cancelled | unavailable` ([`ApprovalOutcome`]); only
//!   `allowed-once` grants.
//! - [`ApprovalService::request`] requires an open turn in the caller's session (else
//!   [`ApprovalError::NoOpenTurn`] before anything is appended), appends
//!   `approval/asked {id, toolName, callId?, reason?}`, runs the `approval/request` waterfall
//!   ([`ApprovalRequestEvent`]; default `unavailable`; scope-filtered by the caller's key), appends
//!   `approval/decided {id, outcome}` and returns the outcome.
//! - A listener that returns `Err` or panics ⇒ `unavailable`; an answer outside the vocabulary
//!   ([`ApprovalAnswer::Other`]) ⇒ `unavailable`; the request's signal fires first ⇒
//!   `cancelled` (a late answer is dropped).
//! - Policy ([`ApprovalPolicy`]): the effective policy is the last `approval/policy {policy}`
//!   event in the session log, else the service configuration (settings section `dsh-approval`,
//!   `{"policy": "ask" | "never"}`, default `ask`). `never` ⇒ `rejected` without dispatching
//!   answerers (still audited).
//!
//! The plugin provides the service on the root layer and declares the three log-only event types
//! (`approval/asked`, `approval/decided`, `approval/policy`) in the session event-type registry.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, ScopeKey};
use dsh_llm::{CallId, SessionId};
use dsh_session::Session;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The plugin / settings-section id.
pub const PLUGIN_ID: &str = "dsh-approval";

/// Log-only event `approval/asked`.
pub const EVENT_ASKED: &str = "approval/asked";
/// Log-only event `approval/decided`.
pub const EVENT_DECIDED: &str = "approval/decided";
/// Log-only event `approval/policy`.
pub const EVENT_POLICY: &str = "approval/policy";

/// Everything dsh-approval can refuse. Each variant has a stable code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum ApprovalError {
    /// `request` was called while the caller's session has no open turn; nothing was appended.
    /// Code `NO_OPEN_TURN`.
    #[error("approval requires an open turn in session {session}")]
    #[code("NO_OPEN_TURN")]
    NoOpenTurn {
        /// The session id.
        session: String,
    },
    /// Appending an audit event to the session failed. Code `SESSION_APPEND`.
    #[error("approval could not append `{event}`: {message}")]
    #[code("SESSION_APPEND")]
    Append {
        /// The event type.
        event: &'static str,
        /// The session error text.
        message: String,
        /// The session error code.
        code: &'static str,
    },
    /// Registering the service or its event types failed. Code `REGISTRATION`.
    #[error("approval plugin registration failed: {message}")]
    #[code("REGISTRATION")]
    Registration {
        /// What failed.
        message: String,
    },
}

/// The outcome of one request. JSON: `"allowed-once" | "rejected" | "cancelled" |
/// "unavailable"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// The one grant: this call may run.
    AllowedOnce,
    /// A human said no.
    Rejected,
    /// The request was aborted before an answer.
    Cancelled,
    /// Nobody could answer (no answerer, it failed, or it answered outside the vocabulary).
    Unavailable,
}

impl ApprovalOutcome {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowedOnce => "allowed-once",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "unavailable",
        }
    }

    /// Parses a wire string; `None` outside the vocabulary.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allowed-once" => Some(Self::AllowedOnce),
            "rejected" => Some(Self::Rejected),
            "cancelled" => Some(Self::Cancelled),
            "unavailable" => Some(Self::Unavailable),
            _ => None,
        }
    }
}

/// What an `approval/request` listener returns: an outcome, or a raw answer a bridge received
/// (mapped through [`ApprovalOutcome::parse`]; anything outside the vocabulary ⇒ `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// A typed outcome.
    Outcome(ApprovalOutcome),
    /// A raw wire answer.
    Other(String),
}

impl From<ApprovalOutcome> for ApprovalAnswer {
    fn from(o: ApprovalOutcome) -> Self {
        Self::Outcome(o)
    }
}

/// `ask` (default) or `never`. JSON: `"ask" | "never"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    /// Ask the answerers.
    #[default]
    Ask,
    /// Reject every request without asking.
    Never,
}

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

/// Payload of `approval/asked`. JSON: `{"id","toolName","callId"?,"reason"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskedData {
    /// The request id.
    pub id: String,
    /// The tool name.
    pub tool_name: String,
    /// The call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Payload of `approval/decided`. JSON: `{"id","outcome"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecidedData {
    /// The request id.
    pub id: String,
    /// The outcome.
    pub outcome: ApprovalOutcome,
}

/// Payload of `approval/policy`. JSON: `{"policy","source"?:"delegation"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyData {
    /// The new policy.
    pub policy: ApprovalPolicy,
    /// `delegation` when inherited from a parent agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The `dsh-approval` settings section. JSON: `{"policy": "ask" | "never"}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// The configured policy (used when the log holds no `approval/policy`).
    #[serde(default)]
    pub policy: ApprovalPolicy,
}

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

mod session_io;
pub use session_io::declarations;

fn register(ctx: &Context) -> Result<(), BoxError> {
    let config: ApprovalConfig = ctx.settings_section(PLUGIN_ID)?;
    ctx.provide(Arc::new(ApprovalService::new(ctx.clone(), config)))?
        .detach();
    Ok(())
}

fn start(ctx: &Context) -> Result<(), BoxError> {
    session_io::declare_types(ctx)
}

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN],
    settings = ApprovalConfig,
    aliases = ["approval"],
    register = register,
    start = start,
}
