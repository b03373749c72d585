//! Tools for dsh: what a tool is ([`ToolDefinition`]), the typed DSL that builds one from a Rust
//! argument type ([`define_tool`], schemas generated with schemars and restricted to the spec's
//! JSON-Schema subset, see [`schema`]), the registry service ([`ToolRegistry`], provided by this
//! crate's plugin), the guarded execution pipeline (`tools/pre-execute` → approval → guards →
//! `tools/execute` → body → `tools/post-execute` → `finalize_content` → `tools/result`) and the
//! per-step scheduler the agent loop uses ([`scheduler`]).
//!
//! Spec: `../shared/spec/tools.md`; approval: `../shared/spec/approval-sandbox.md`; seeds
//! `000_*.txt` ("ToolDefinition"). The authoring guide (`docs/plugin-authoring.md`) is included
//! as [`guide`] so its examples compile as doctests.

mod caller;
mod definition;
mod error;
mod events;
mod registry;
mod result;
pub mod scheduler;
pub mod schema;
mod timeout;

pub use caller::ToolCaller;
pub use definition::{
    ToolBuilder, ToolDefinition, ToolOutput, ToolRunContext, check_name, default_render,
    define_tool, parse_args,
};
pub use error::{ErrorInfo, ToolFailure, ToolsError};
pub use events::{
    ToolDispatchExecution, ToolResultEvent, ToolsChange, ToolsChanged, ToolsExecute,
    ToolsPostExecute, ToolsPreExecute, ToolsResult,
};
pub use registry::{
    DispatchedCall, ExecutionMode, GuardFn, PreparedCall, RESERVED_NAMES, ToolRegistry,
    ToolRestriction,
};
pub use result::{
    FrozenResult, PostToolDecision, PreToolDecision, ToolErrorPayload, ToolExecution,
    ToolExecutionFailure, ToolExecutionInput, ToolExecutionResult, ToolExecutionSuccess,
};
pub use timeout::install_timeout_wrapper;

/// The plugin-authoring guide (`docs/plugin-authoring.md`); its code blocks are doctests.
#[doc = include_str!("../../../docs/plugin-authoring.md")]
pub mod guide {}

/// The plugin id (= package name).
pub const PLUGIN_ID: &str = "dsh-tools";

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(std::sync::Arc::new(ToolRegistry::new(ctx.clone())))?
        .detach();
    install_timeout_wrapper(ctx)?.detach();
    Ok(())
}

dsh_kernel::plugin! { after = [dsh_approval::PLUGIN], register = apply }
