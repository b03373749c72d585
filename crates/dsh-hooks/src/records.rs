//! The durable `hook/invoked` / `hook/result` records (log-only, inside a turn), with typed
//! declarations that validate them on append and restore. See docs/upstream/hooks.md
//! ("Records").

use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_session::{EventTypeDecl, EventTypeRegistry};
use serde::{Deserialize, Serialize};

/// Owner of the two declarations (both bridges declare them; the same owner replaces).
pub const OWNER: &str = "dsh-hooks";
/// `hook/invoked`.
pub const EVENT_INVOKED: &str = "hook/invoked";
/// `hook/result`.
pub const EVENT_RESULT: &str = "hook/result";

/// Payload of `hook/invoked`, written before the hook's process starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookInvoked {
    /// The turn (≥ 1).
    pub turn: u64,
    /// The hook event (`PreToolUse`, …).
    pub point: String,
    /// `claude-code` or `codex`.
    pub dialect: String,
    /// `<dialect>:<Point>:<n>`.
    pub handler_id: String,
    /// The group's matcher as written, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
}

/// The record's decision vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordDecision {
    /// `decision: "block"` or exit 2.
    Block,
    /// `permissionDecision: "deny"`.
    Deny,
    /// `permissionDecision: "ask"`.
    Ask,
    /// `permissionDecision: "allow"`.
    Allow,
    /// `decision: "approve"`.
    Approve,
    /// `continue: false` without a decision.
    Stop,
    /// Nothing decided.
    Pass,
}

/// Payload of `hook/result`, written after the hook's process ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookResult {
    /// The turn (≥ 1).
    pub turn: u64,
    /// The hook event.
    pub point: String,
    /// As in the `hook/invoked` before it.
    pub handler_id: String,
    /// What the hook's output decided.
    pub decision: RecordDecision,
    /// The exit code (absent: killed, timed out, or never started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Trimmed stderr, at most 500 characters then `…` (absent when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_summary: Option<String>,
    /// Wall time in milliseconds (fractional).
    pub duration_ms: f64,
}

/// The two typed declarations (inside a turn only).
pub fn declarations() -> Vec<EventTypeDecl> {
    vec![
        EventTypeDecl::new(EVENT_INVOKED, OWNER, false).typed::<HookInvoked>(),
        EventTypeDecl::new(EVENT_RESULT, OWNER, false).typed::<HookResult>(),
    ]
}

/// Declares both types in the process-wide default registry and in the
/// [`EventTypeRegistry`] service of `ctx`, if one is provided.
///
/// # Errors
/// The registry refused a declaration (another plugin owns the name), boxed.
pub fn declare(ctx: &Context) -> Result<(), BoxError> {
    let mut registries: Vec<Arc<EventTypeRegistry>> = vec![EventTypeRegistry::shared_default()];
    if let Some(r) = ctx.get::<EventTypeRegistry>()
        && !registries.iter().any(|x| Arc::ptr_eq(x, &r))
    {
        registries.push(r);
    }
    for r in registries {
        for d in declarations() {
            r.register(d)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid(name: &str, v: &serde_json::Value) -> Result<(), String> {
        let d = declarations().into_iter().find(|d| d.name == name).unwrap();
        (d.validate.unwrap())(v)
    }

    #[test]
    fn upstream_shapes_validate() {
        valid(
            EVENT_INVOKED,
            &json!({"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1","matcher":"bash"}),
        )
        .unwrap();
        valid(
            EVENT_RESULT,
            &json!({"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"block","exitCode":2,"stderrSummary":"no","durationMs":3.6819170000001122}),
        )
        .unwrap();
        valid(
            EVENT_RESULT,
            &json!({"turn":1,"point":"Stop","handlerId":"codex:Stop:2","decision":"pass","durationMs":2.5}),
        )
        .unwrap();
        assert!(
            valid(
                EVENT_RESULT,
                &json!({"turn":1,"point":"Stop","handlerId":"x","decision":"maybe","durationMs":1.0})
            )
            .is_err()
        );
        assert!(
            valid(
                EVENT_INVOKED,
                &json!({"turn":1,"point":"Stop","dialect":"codex"})
            )
            .is_err()
        );
    }
}
