//! The loop's settings section ([`LoopConfig`]).

use serde::Deserialize;

/// Loop settings (settings section `dsh-agent-loop`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    /// Rolling pool size for parallel-safe tool calls (`maxParallelToolCalls`, default 10).
    pub max_parallel_tool_calls: usize,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_parallel_tool_calls: dsh_tools::scheduler::DEFAULT_MAX_PARALLEL,
        }
    }
}
