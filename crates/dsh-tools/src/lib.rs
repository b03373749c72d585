//! dsh-tools defines what a tool is and runs tool calls: authoring ([`Tool`], [`register`]),
//! declared effects ([`ToolEffects`]), the registry service ([`ToolRegistry`]), the guarded
//! pipeline ([`pipeline`]) and the per-step scheduler ([`scheduler`]).
//!
//! - [`Tool`] is how a tool is written: typed `Args`/`Output` (schemas generated with schemars
//!   and restricted to the JSON-Schema subset of [`schema`]), [`ToolEffects`], and
//!   `async fn call(&self, …)` with the tool's state on `self`. [`register`] is the one line a
//!   tool plugin's `apply` needs. [`ToolDefinition`] is the erased form every registered tool
//!   has (implement it by hand for dynamic tools); [`define_tool`] is the older closure DSL.
//! - [`ToolRegistry`] (provided by this crate's plugin) holds layers, restrictions, guards and
//!   exposes each tool's declared effects ([`ToolRegistry::effects`]) to policy plugins.
//! - [`pipeline`]: `tools/pre-execute` → approval → guards → `tools/execute` → body →
//!   `tools/post-execute` → `finalize_content` → `tools/result`.
//!
//! Behaviour notes and their upstream sources: `docs/tools.md`. The authoring guide
//! (`docs/plugin-authoring.md`) is included as [`guide`] so its examples compile as doctests.

mod caller;
mod definition;
mod effects;
mod error;
mod events;
pub mod pipeline;
mod registry;
mod result;
pub mod scheduler;
pub mod schema;
mod timeout;
mod tool;

pub use caller::ToolCaller;
pub use definition::{
    ToolBuilder, ToolDefinition, ToolOutput, ToolRunContext, check_name, default_render,
    define_tool, parse_args,
};
pub use effects::ToolEffects;
pub use error::{ErrorInfo, ToolFailure, ToolsError};
pub use events::{
    ToolDispatchExecution, ToolResultEvent, ToolsChange, ToolsChanged, ToolsExecute,
    ToolsPostExecute, ToolsPreExecute, ToolsResult,
};
pub use pipeline::{DispatchedCall, PreparedCall};
pub use registry::{ExecutionMode, GuardFn, RESERVED_NAMES, ToolRegistry, ToolRestriction};
pub use result::{
    FrozenResult, OUTPUT_FILE_FIELD, OutputFolders, PostToolDecision, PreToolDecision,
    ToolErrorPayload, ToolExecution, ToolExecutionFailure, ToolExecutionInput, ToolExecutionResult,
    ToolExecutionSuccess, declared_output_files,
};
pub use timeout::install_timeout_wrapper;
pub use tool::{Tool, into_definition, register};

#[doc(hidden)]
pub mod __private {
    pub use dsh_kernel;
}

/// Declares the calling crate's plugin (`pub static PLUGIN`, see `dsh_kernel::plugin!`) as one
/// that registers the given [`Tool`] values globally when it starts (after `dsh-tools`).
///
/// ```
/// # use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};
/// # #[derive(serde::Deserialize, schemars::JsonSchema)] pub struct Args {}
/// pub struct Pong;
/// impl Tool for Pong {
///     const NAME: &'static str = "pong";
///     type Args = Args;
///     type Output = String;
///     fn description(&self) -> String { "Answer pong.".into() }
///     fn effects(&self) -> ToolEffects { ToolEffects::READ_ONLY }
///     async fn call(&self, _: Args, _: ToolRunContext) -> Result<String, ToolFailure> {
///         Ok("pong".into())
///     }
/// }
/// dsh_tools::tool_plugin!(Pong);
/// assert_eq!(PLUGIN.after[0].id, "dsh-tools");
/// ```
#[macro_export]
macro_rules! tool_plugin {
    ($($tool:expr),+ $(,)?) => {
        fn __dsh_tool_plugin_start(
            ctx: &$crate::__private::dsh_kernel::Context,
        ) -> ::std::result::Result<(), $crate::__private::dsh_kernel::BoxError> {
            $($crate::register(ctx, $tool)?;)+
            Ok(())
        }
        $crate::__private::dsh_kernel::plugin! {
            after = [$crate::PLUGIN],
            start = __dsh_tool_plugin_start,
        }
    };
}

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
