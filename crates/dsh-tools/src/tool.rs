//! The [`Tool`] trait (typed tool authoring with the tool's state on `self`), the erased
//! [`ToolDefinition`] it becomes ([`into_definition`]) and the one-line registration helper
//! [`register`].
//!
//! Behaviour notes and a worked example: `docs/tools.md` ("Authoring a tool").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::Context;
use dsh_llm::{ContentBlock, ToolSchema};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::definition::parse_args;
use crate::definition::{ToolDefinition, ToolOutput, ToolRunContext, check_name, default_render};
use crate::effects::ToolEffects;
use crate::error::{ToolFailure, ToolsError};
use crate::registry::ToolRegistry;
use crate::schema;

/// A typed tool: its name, description, typed arguments and output, declared effects and an
/// async body with the tool's state on `self`.
///
/// - `Args` is deserialised from the model's JSON arguments with [`parse_args`] (a mismatch
///   fails the call with `INVALID_ARGS` naming the field path); its JSON Schema (schemars,
///   restricted to the subset of [`crate::schema`]) is the model-facing `parameters`.
/// - `Output` is the canonical value (serialised into the result's `value`; its schema is the
///   output schema). It is deserialised again only when a `tools/post-execute` policy replaces
///   the value and the content is re-rendered.
/// - [`Tool::render`] produces the model-facing content (default: [`default_render`] of the
///   serialised output: a string as is, anything else as compact JSON).
///
/// Turn one into a registered tool with [`register`] (`dsh_tools::register(ctx, MyTool)?`) or
/// [`ToolRegistry::register_tool`].
///
/// ```
/// use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// The text to shout.
///     text: String,
/// }
///
/// struct Shout {
///     suffix: String,
/// }
///
/// impl Tool for Shout {
///     const NAME: &'static str = "shout";
///     type Args = Args;
///     type Output = String;
///     fn description(&self) -> String {
///         "Upper-cases a text.".into()
///     }
///     fn effects(&self) -> ToolEffects {
///         ToolEffects::READ_ONLY.parallel_safe()
///     }
///     async fn call(&self, args: Args, _cx: ToolRunContext) -> Result<String, ToolFailure> {
///         Ok(format!("{}{}", args.text.to_uppercase(), self.suffix))
///     }
/// }
///
/// let def = dsh_tools::into_definition(Shout { suffix: "!".into() }).unwrap();
/// assert_eq!(def.schema().name, "shout");
/// assert!(def.effects().is_read_only());
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The model-facing name (`[A-Za-z0-9_-]{1,64}`, not `run_code`).
    const NAME: &'static str;
    /// The typed arguments.
    type Args: DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static;
    /// The typed canonical output value.
    type Output: Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static;

    /// The model-facing description (read once, when the definition is built).
    fn description(&self) -> String;

    /// What the tool touches (read once, when the definition is built); permission presets
    /// decide from it.
    fn effects(&self) -> ToolEffects;

    /// Runs one call. Must honour `cx.signal` (return soon after it fires); it is always
    /// awaited to completion.
    ///
    /// # Errors
    /// A [`ToolFailure`]: the model sees `Error: <message>`.
    fn call(
        &self,
        args: Self::Args,
        cx: ToolRunContext,
    ) -> impl Future<Output = Result<Self::Output, ToolFailure>> + Send;

    /// The model-facing content of a successful call (default: [`default_render`] of the
    /// serialised output).
    fn render(&self, args: &Self::Args, output: &Self::Output) -> Vec<ContentBlock> {
        let _ = args;
        vec![default_render(
            &serde_json::to_value(output).unwrap_or_default(),
        )]
    }

    /// Whether this call may run in parallel with other parallel-safe calls (default:
    /// [`ToolEffects::is_parallel_safe`] of [`Tool::effects`]).
    fn concurrency_safe(&self, args: &Self::Args) -> bool {
        let _ = args;
        self.effects().is_parallel_safe()
    }

    /// Presentation meta recorded as the result's `meta` (lossless JSON; default none).
    fn meta(&self, args: &Self::Args, output: &Self::Output) -> Option<Value> {
        let _ = (args, output);
        None
    }

    /// UI render intent for the call (opaque JSON; default none).
    fn present_call(&self, args: &Self::Args) -> Option<Value> {
        let _ = args;
        None
    }

    /// Body timeout, enforced by a `tools/execute` wrapper (default none).
    fn timeout(&self) -> Option<Duration> {
        None
    }
}

/// Builds the [`ToolDefinition`] of `tool`: checks the name and generates both schemas.
///
/// # Errors
/// [`ToolsError::InvalidToolName`] for a bad [`Tool::NAME`]; [`ToolsError::UnsupportedSchema`]
/// when `Args` or `Output` needs a JSON-Schema keyword outside the enforced subset.
pub fn into_definition<T: Tool>(tool: T) -> Result<Arc<dyn ToolDefinition>, ToolsError> {
    check_name(T::NAME)?;
    let parameters = schema::generate_schema::<T::Args>(T::NAME)?;
    let output = schema::generate_schema::<T::Output>(T::NAME)?;
    Ok(Arc::new(TraitTool {
        schema: ToolSchema {
            name: T::NAME.to_owned(),
            description: tool.description(),
            parameters,
        },
        output,
        effects: tool.effects(),
        timeout: tool.timeout(),
        tool: Arc::new(tool),
    }))
}

/// Registers `tool` with the [`ToolRegistry`] service through `ctx` (global when `ctx` is
/// untagged) for the lifetime of `ctx`'s scope — the whole glue of a tool plugin's `apply`.
///
/// # Errors
/// [`ToolsError::Kernel`] when no `ToolRegistry` is provided (the `dsh-tools` plugin is not
/// linked) or the scope is inactive; otherwise as [`ToolRegistry::register_tool`].
pub fn register<T: Tool>(ctx: &Context, tool: T) -> Result<(), ToolsError> {
    let registry = ctx.require::<ToolRegistry>()?;
    registry.register_tool(ctx, tool)?.detach();
    Ok(())
}

struct TraitTool<T> {
    schema: ToolSchema,
    output: Value,
    effects: ToolEffects,
    timeout: Option<Duration>,
    tool: Arc<T>,
}

fn output_error(tool: &str, message: impl Into<String>) -> ToolFailure {
    ToolsError::InvalidOutput {
        tool: tool.to_owned(),
        message: message.into(),
    }
    .into()
}

impl<T: Tool> ToolDefinition for TraitTool<T> {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> &Value {
        &self.output
    }

    fn effects(&self) -> ToolEffects {
        self.effects
    }

    fn render(&self, args: &Value, value: &Value) -> Result<Vec<ContentBlock>, ToolFailure> {
        let a: T::Args = parse_args(T::NAME, args)?;
        let o: T::Output = serde_json::from_value(value.clone())
            .map_err(|e| output_error(T::NAME, e.to_string()))?;
        Ok(self.tool.render(&a, &o))
    }

    fn execute(
        &self,
        args: &Value,
        cx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolFailure>> {
        // The body consumes its arguments; rendering and meta get a second parse.
        let parsed = parse_args::<T::Args>(T::NAME, args)
            .and_then(|a| Ok((a, parse_args::<T::Args>(T::NAME, args)?)));
        let tool = self.tool.clone();
        Box::pin(async move {
            let (body_args, args) = parsed?;
            let out = tool.call(body_args, cx).await?;
            let value =
                serde_json::to_value(&out).map_err(|e| output_error(T::NAME, e.to_string()))?;
            Ok(ToolOutput {
                value,
                content: Some(tool.render(&args, &out)),
                meta: tool.meta(&args, &out),
            })
        })
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn is_concurrency_safe(&self, args: &Value) -> bool {
        parse_args::<T::Args>(T::NAME, args).is_ok_and(|a| self.tool.concurrency_safe(&a))
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        let a: T::Args = parse_args(T::NAME, args).ok()?;
        self.tool.present_call(&a)
    }
}
