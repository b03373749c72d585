//! The `tools/*` events. Every one is dispatched with the caller's scope key
//! ([`crate::ToolCaller::key`]), so listeners registered through an agent's tagged scope only see
//! that agent's (and its descendants') calls.
//!
//! Behaviour notes: `docs/tools.md` ("Registry", "Pipeline").
//!
//! A waterfall listener that returns `Err` "throws": for pre-execute and execute that yields a
//! final error result which skips post-execute; for post-execute an error result.

use std::sync::Arc;

use dsh_kernel::BoxError;
use tokio_util::sync::CancellationToken;

use crate::definition::ToolDefinition;
use crate::result::{PostToolDecision, PreToolDecision, ToolExecution, ToolExecutionResult};

/// Payload of [`ToolsChange`]: what changed in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsChanged {
    /// `registered` or `unregistered` or `restricted` or `unrestricted`.
    pub kind: &'static str,
    /// Tool names concerned (empty for restriction changes).
    pub names: Vec<String>,
    /// The agent scope id the change is scoped to (`None` = global).
    pub scope: Option<u64>,
}

/// Payload of `tools/execute`: the call, the definition captured at call start (`None` for an
/// unknown tool) and the signal the body will receive. Wrappers may only replace `signal`
/// (derive it from `signal.child_token()`; the registry also re-fuses the caller's signal:
/// when the caller aborts, the replacement is cancelled too).
#[derive(Clone)]
pub struct ToolDispatchExecution {
    /// The call.
    pub exec: Arc<ToolExecution>,
    /// The definition that will run (read-only for wrappers, e.g. its `timeout()`).
    pub def: Option<Arc<dyn ToolDefinition>>,
    /// The body's signal.
    pub signal: CancellationToken,
}

impl std::fmt::Debug for ToolDispatchExecution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDispatchExecution")
            .field("exec", &self.exec)
            .field("known", &self.def.is_some())
            .field("signal", &self.signal)
            .finish()
    }
}

/// Payload of `tools/post-execute` and `tools/result`.
#[derive(Debug, Clone)]
pub struct ToolResultEvent {
    /// The call.
    pub exec: Arc<ToolExecution>,
    /// Its result (for `tools/result`: the final, frozen one).
    pub result: Arc<ToolExecutionResult>,
}

dsh_kernel::event! {
    /// `tools/change` (emit): the registry changed (register/unregister/restrict).
    pub struct ToolsChange: emit("tools/change") => ToolsChanged;
}

dsh_kernel::event! {
    /// `tools/pre-execute` (waterfall `(exec, next) → PreToolDecision`; default allow).
    pub struct ToolsPreExecute: waterfall("tools/pre-execute") => Arc<ToolExecution>, Result<PreToolDecision, BoxError>;
}

dsh_kernel::event! {
    /// `tools/execute` (waterfall around the body). The terminal runs the body (or fails with
    /// `UNKNOWN_TOOL`); wrappers may replace the signal, time the call, or short-circuit with a
    /// result of their own.
    pub struct ToolsExecute: waterfall("tools/execute") => ToolDispatchExecution, Result<ToolExecutionResult, BoxError>;
}

dsh_kernel::event! {
    /// `tools/post-execute` (waterfall `(exec, result, next) → PostToolDecision`; default accept).
    pub struct ToolsPostExecute: waterfall("tools/post-execute") => ToolResultEvent, Result<PostToolDecision, BoxError>;
}

dsh_kernel::event! {
    /// `tools/result` (emit, observe-only): the final frozen result of every call.
    pub struct ToolsResult: emit("tools/result") => ToolResultEvent;
}
