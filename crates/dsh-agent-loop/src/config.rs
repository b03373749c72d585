//! The loop's settings section ([`LoopConfig`]).

use serde::Deserialize;

/// The default of [`LoopConfig::max_steps_per_turn`]: 200 model steps.
pub const DEFAULT_MAX_STEPS_PER_TURN: u64 = 200;

/// Loop settings (settings section `dsh-agent-loop`, alias `[agent]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    /// Rolling pool size for parallel-safe tool calls (`maxParallelToolCalls`, default 10).
    pub max_parallel_tool_calls: usize,
    /// The most model steps one turn may take (default 200; `0` = no limit). Only the turn's own
    /// steps count: a step's retried requests, compaction and title requests do not. A turn that
    /// would start one more step ends with the reason `{"kind":"max-steps","limit":N}` instead
    /// (a dsh reason upstream does not have; `docs/upstream/agent-loop.md`, "Step limit"), and
    /// `dsh exec` exits 5. `--max-steps N` sets it for one run.
    pub max_steps_per_turn: u64,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_parallel_tool_calls: dsh_tools::scheduler::DEFAULT_MAX_PARALLEL,
            max_steps_per_turn: DEFAULT_MAX_STEPS_PER_TURN,
        }
    }
}

/// The `kind` of the turn-end reason a step limit gives: `max-steps`.
pub const MAX_STEPS_KIND: &str = "max-steps";

/// The turn-end reason of a turn stopped by the step limit `limit`:
/// `{"kind":"max-steps","limit":limit}` (carried as [`dsh_session::TurnEndReason::Other`], since
/// the upstream format has no such reason).
pub fn max_steps_reason(limit: u64) -> dsh_session::TurnEndReason {
    dsh_session::TurnEndReason::Other(serde_json::json!({"kind": MAX_STEPS_KIND, "limit": limit}))
}

/// The step limit of a turn-end reason made by [`max_steps_reason`], else `None`.
pub fn max_steps_limit(reason: &dsh_session::TurnEndReason) -> Option<u64> {
    match reason {
        dsh_session::TurnEndReason::Other(v)
            if v.get("kind").and_then(serde_json::Value::as_str) == Some(MAX_STEPS_KIND) =>
        {
            Some(
                v.get("limit")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
            )
        }
        _ => None,
    }
}
