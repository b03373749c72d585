//! dsh-approval: asks whether a tool call may run, fails closed, and audits the answer.
//!
//! The approval service ([`ApprovalService`], upstream `ctx.approval` from
//! `dsh-user-approval`) asks whatever answerer a front end registers whether a tool call may run,
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
//! - An `allowed-once` answer to a request naming a call is also kept as a grant that the call's
//!   own guards may take once ([`ApprovalService::take_grant`]): the filesystem fence of
//!   `write`/`edit` lets exactly that approved call through.
//! - A rejection may carry the person's reason ([`ApprovalAnswer::RejectedBecause`]): logged as
//!   `rejected`, the reason kept for the tool pipeline's denial text
//!   ([`ApprovalService::take_rejection_reason`]), so the model learns why.
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

mod audit;
mod config;
mod error;
mod outcome;
mod plugin;
mod request;
mod service;
mod session_io;

pub use audit::{AskedData, DecidedData, PolicyData};
pub use config::{ApprovalConfig, ApprovalPolicy};
pub use error::ApprovalError;
pub use outcome::{ApprovalAnswer, ApprovalOutcome};
pub use request::{ApprovalCaller, ApprovalQuestion, ApprovalRequest, ApprovalRequestEvent};
pub use service::{ApprovalService, MAX_PENDING_GRANTS};
pub use session_io::declarations;

/// The plugin / settings-section id.
pub const PLUGIN_ID: &str = "dsh-approval";

/// Log-only event `approval/asked`.
pub const EVENT_ASKED: &str = "approval/asked";
/// Log-only event `approval/decided`.
pub const EVENT_DECIDED: &str = "approval/decided";
/// Log-only event `approval/policy`.
pub const EVENT_POLICY: &str = "approval/policy";

dsh_kernel::plugin! {
    after = [dsh_session::PLUGIN],
    settings = ApprovalConfig,
    aliases = ["approval"],
    register = plugin::register,
    start = plugin::start,
}
