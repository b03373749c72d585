//! [`ToolDefinition`] (what every registered tool is), the [`ToolRunContext`] a body receives,
//! and the closure DSL [`define_tool`] (the Rust `defineTool`; most tools implement
//! [`crate::Tool`] instead).
//!
//! Behaviour notes: `docs/tools.md` ("ToolDefinition").

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_llm::{ContentBlock, Message, ToolSchema};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::effects::ToolEffects;
use crate::error::{ToolFailure, ToolsError};
use crate::result::{ToolExecution, ToolExecutionResult};
use crate::schema;

/// What a body hands back: the canonical JSON `value`, plus optionally content it already
/// rendered (else the pipeline calls [`ToolDefinition::render`]) and presentation `meta`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The canonical value (validated against [`ToolDefinition::output_schema`]).
    pub value: Value,
    /// Pre-rendered content; `None` ⇒ `render(args, value)`.
    pub content: Option<Vec<ContentBlock>>,
    /// Lossless JSON side data recorded as the result's `meta`.
    pub meta: Option<Value>,
}

impl ToolOutput {
    /// A value to be rendered by the definition.
    pub fn value(value: Value) -> Self {
        Self {
            value,
            content: None,
            meta: None,
        }
    }
}

/// Per-call state shared between the pipeline and the body.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    pub(crate) deferred: Mutex<Vec<Message>>,
    pub(crate) concluded: AtomicBool,
}

/// What a tool body receives besides its arguments (upstream `ToolRunContext`).
#[derive(Clone, Debug)]
pub struct ToolRunContext {
    /// The materialised call (name, ids, arguments, caller).
    pub exec: Arc<ToolExecution>,
    /// Cancellation for the body: fires when the caller aborts (or a `tools/execute` wrapper's
    /// replacement signal fires). Bodies must honour it and return promptly.
    pub signal: CancellationToken,
    pub(crate) state: Arc<RunState>,
}

impl ToolRunContext {
    /// Queues a user message; it is prepended to the result's `additional_contexts` (delivered
    /// on the next step, after the results).
    pub fn defer_context(&self, message: Message) {
        self.state
            .deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }

    /// Marks the turn to end after this step (effective only if the call succeeds).
    pub fn conclude_turn(&self) {
        self.state.concluded.store(true, Ordering::Relaxed);
    }
}

/// What every registered tool is: a model-facing [`ToolSchema`] plus an output contract, an
/// async body, declared [`ToolEffects`] and optional hooks. Implement it by hand for dynamic
/// tools (e.g. MCP); most tools implement [`crate::Tool`] (or use [`define_tool`]).
///
/// Only [`ToolDefinition::schema`] (name, description, parameters) is ever sent to the model.
pub trait ToolDefinition: Send + Sync + 'static {
    /// Name, description and JSON-Schema parameters (checked against the enforced subset at
    /// registration; see [`crate::schema`]).
    fn schema(&self) -> &ToolSchema;

    /// JSON-Schema of the canonical output value (default: any value, `{}`).
    fn output_schema(&self) -> &Value {
        static ANY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        ANY.get_or_init(|| Value::Object(serde_json::Map::new()))
    }

    /// What the tool touches (default [`ToolEffects::UNDECLARED`]: not read-only, no target).
    /// Policy plugins read it through [`crate::ToolRegistry::effects`].
    fn effects(&self) -> ToolEffects {
        ToolEffects::UNDECLARED
    }

    /// Renders a value to content blocks (used when the body did not pre-render, and when a
    /// post-execute policy replaces the value).
    ///
    /// # Errors
    /// A [`ToolFailure`] (usually `INVALID_TOOL_OUTPUT`) if the value cannot be rendered.
    fn render(&self, args: &Value, value: &Value) -> Result<Vec<ContentBlock>, ToolFailure> {
        let _ = args;
        Ok(vec![default_render(value)])
    }

    /// Runs the tool. The returned future must honour `cx.signal` (return soon after it fires);
    /// it is always awaited to completion (drained, never dropped mid-way).
    ///
    /// # Errors
    /// A [`ToolFailure`]; `INVALID_ARGS` for argument mismatches.
    fn execute(
        &self,
        args: &Value,
        cx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolFailure>>;

    /// Replaces the final content; called exactly once per normalised outcome (including
    /// denials and pipeline failures) of a call whose definition was resolved at call start.
    fn finalize_content(
        &self,
        exec: &ToolExecution,
        result: &ToolExecutionResult,
    ) -> Option<Vec<ContentBlock>> {
        let _ = (exec, result);
        None
    }

    /// Body timeout (ms precision; enforced by a `tools/execute` wrapper plugin, never sent to
    /// the model). Default none.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// True only if this call may run in parallel with other parallel-safe calls. Default
    /// false (exclusive).
    fn is_concurrency_safe(&self, args: &Value) -> bool {
        let _ = args;
        false
    }

    /// UI render intent for the call (pure; opaque JSON). Default none.
    fn present_call(&self, args: &Value) -> Option<Value> {
        let _ = args;
        None
    }

    /// UI render intent for the result (pure; opaque JSON). Default none.
    fn present_result(&self, args: &Value, result: &ToolExecutionResult) -> Option<Value> {
        let _ = (args, result);
        None
    }
}

/// The default renderer: a string value becomes one text block of that string; anything else
/// one text block of its compact JSON.
pub fn default_render(value: &Value) -> ContentBlock {
    match value {
        Value::String(s) => ContentBlock::text(s.clone()),
        other => ContentBlock::text(other.to_string()),
    }
}

/// Deserialises typed arguments, mapping every mismatch to [`ToolsError::InvalidArgs`] with a
/// message naming the field:
/// - invalid JSON from the model (the scheduler passes the raw text as a string):
///   ``the arguments are not valid JSON (<serde message>)``;
/// - missing field: ``missing field `path` `` (nested: ``at `options`: missing field `depth` ``);
/// - wrong type: ``at `count`: invalid type: string "x", expected u32``;
/// - unknown field (types with `#[serde(deny_unknown_fields)]`):
///   ``unknown field `extra`, expected one of `path`, `count` ``;
/// - a JSON array (which serde would read as positional fields):
///   ``the arguments must be a JSON object, got an array``.
///
/// # Errors
/// [`ToolsError::InvalidArgs`] as above.
pub fn parse_args<A: DeserializeOwned>(tool: &str, args: &Value) -> Result<A, ToolsError> {
    if let Value::String(raw) = args
        && let Err(e) = serde_json::from_str::<Value>(raw)
    {
        return Err(ToolsError::InvalidArgs {
            tool: tool.to_owned(),
            message: format!("the arguments are not valid JSON ({e})"),
        });
    }
    // serde reads a JSON array as a struct's fields in order: a positional call must not run.
    if args.is_array() {
        return Err(ToolsError::InvalidArgs {
            tool: tool.to_owned(),
            message: "the arguments must be a JSON object, got an array".to_owned(),
        });
    }
    serde_path_to_error::deserialize::<_, A>(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let message = if path == "." || path.is_empty() {
            inner
        } else {
            format!("at `{path}`: {inner}")
        };
        ToolsError::InvalidArgs {
            tool: tool.to_owned(),
            message,
        }
    })
}

type RenderFn<A, O> = dyn Fn(&A, &O) -> Vec<ContentBlock> + Send + Sync;
type SafeFn<A> = dyn Fn(&A) -> bool + Send + Sync;
type FinalizeFn =
    dyn Fn(&ToolExecution, &ToolExecutionResult) -> Option<Vec<ContentBlock>> + Send + Sync;
type MetaFn<A, O> = dyn Fn(&A, &O) -> Option<Value> + Send + Sync;
type PresentCallFn<A> = dyn Fn(&A) -> Option<Value> + Send + Sync;
type PresentResultFn = dyn Fn(&Value, &ToolExecutionResult) -> Option<Value> + Send + Sync;

/// Builder of a typed tool; start with [`define_tool`], finish with [`ToolBuilder::execute`].
///
/// `A` is the argument type (`Deserialize + JsonSchema`), `O` the output type
/// (`Serialize + DeserializeOwned + JsonSchema`; its schema is the output schema).
pub struct ToolBuilder<A, O> {
    name: String,
    description: String,
    render: Option<Box<RenderFn<A, O>>>,
    safe: Option<Box<SafeFn<A>>>,
    effects: ToolEffects,
    timeout: Option<Duration>,
    finalize: Option<Box<FinalizeFn>>,
    meta: Option<Box<MetaFn<A, O>>>,
    present_call: Option<Box<PresentCallFn<A>>>,
    present_result: Option<Box<PresentResultFn>>,
    _p: PhantomData<fn(A) -> O>,
}

/// Starts a typed tool named `name` (the Rust `defineTool`). See `docs/plugin-authoring.md`.
pub fn define_tool<A, O>(
    name: impl Into<String>,
    description: impl Into<String>,
) -> ToolBuilder<A, O>
where
    A: DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static,
{
    ToolBuilder {
        name: name.into(),
        description: description.into(),
        render: None,
        safe: None,
        effects: ToolEffects::UNDECLARED,
        timeout: None,
        finalize: None,
        meta: None,
        present_call: None,
        present_result: None,
        _p: PhantomData,
    }
}

impl<A, O> ToolBuilder<A, O>
where
    A: DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static,
{
    /// Custom renderer (default: [`default_render`] of the serialised output).
    pub fn render(
        mut self,
        f: impl Fn(&A, &O) -> Vec<ContentBlock> + Send + Sync + 'static,
    ) -> Self {
        self.render = Some(Box::new(f));
        self
    }

    /// Decides per call whether it may run in parallel (default: never).
    pub fn concurrency_safe(mut self, f: impl Fn(&A) -> bool + Send + Sync + 'static) -> Self {
        self.safe = Some(Box::new(f));
        self
    }

    /// Every call may run in parallel (read-only tools).
    pub fn always_concurrency_safe(self) -> Self {
        self.concurrency_safe(|_| true)
    }

    /// Declares what the tool touches (default [`ToolEffects::UNDECLARED`]). A parallel-safe
    /// declaration does not by itself make calls parallel here: use
    /// [`ToolBuilder::always_concurrency_safe`].
    pub fn effects(mut self, effects: ToolEffects) -> Self {
        self.effects = effects;
        self
    }

    /// Body timeout (enforced by a `tools/execute` wrapper plugin).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// `finalize_content` hook.
    pub fn finalize_content(
        mut self,
        f: impl Fn(&ToolExecution, &ToolExecutionResult) -> Option<Vec<ContentBlock>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.finalize = Some(Box::new(f));
        self
    }

    /// Presentation meta recorded as the result's `meta`.
    pub fn presentation_meta(
        mut self,
        f: impl Fn(&A, &O) -> Option<Value> + Send + Sync + 'static,
    ) -> Self {
        self.meta = Some(Box::new(f));
        self
    }

    /// UI render intent for the call.
    pub fn present_call(mut self, f: impl Fn(&A) -> Option<Value> + Send + Sync + 'static) -> Self {
        self.present_call = Some(Box::new(f));
        self
    }

    /// UI render intent for the result.
    pub fn present_result(
        mut self,
        f: impl Fn(&Value, &ToolExecutionResult) -> Option<Value> + Send + Sync + 'static,
    ) -> Self {
        self.present_result = Some(Box::new(f));
        self
    }

    /// Finishes the tool with its async body and generates both schemas.
    ///
    /// # Errors
    /// [`ToolsError::InvalidToolName`] for a bad name; [`ToolsError::UnsupportedSchema`] if `A`
    /// or `O` needs a keyword outside the enforced subset.
    pub fn execute<F, Fut>(self, body: F) -> Result<Arc<dyn ToolDefinition>, ToolsError>
    where
        F: Fn(A, ToolRunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolFailure>> + Send + 'static,
    {
        check_name(&self.name)?;
        let parameters = schema::generate_schema::<A>(&self.name)?;
        let output = schema::generate_schema::<O>(&self.name)?;
        Ok(Arc::new(TypedTool {
            schema: ToolSchema {
                name: self.name,
                description: self.description,
                parameters,
            },
            output,
            render: self.render.map(Arc::from),
            safe: self.safe,
            effects: self.effects,
            timeout: self.timeout,
            finalize: self.finalize,
            meta: self.meta.map(Arc::from),
            present_call: self.present_call,
            present_result: self.present_result,
            body: Arc::new(move |a, cx| Box::pin(body(a, cx))),
        }))
    }
}

/// Checks a model-facing tool name: `[A-Za-z0-9_-]{1,64}`.
///
/// # Errors
/// [`ToolsError::InvalidToolName`].
pub fn check_name(name: &str) -> Result<(), ToolsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ToolsError::InvalidToolName {
            name: name.to_owned(),
        })
    }
}

type BodyFn<A, O> =
    dyn Fn(A, ToolRunContext) -> BoxFuture<'static, Result<O, ToolFailure>> + Send + Sync;

struct TypedTool<A, O> {
    schema: ToolSchema,
    output: Value,
    render: Option<Arc<RenderFn<A, O>>>,
    safe: Option<Box<SafeFn<A>>>,
    effects: ToolEffects,
    timeout: Option<Duration>,
    finalize: Option<Box<FinalizeFn>>,
    meta: Option<Arc<MetaFn<A, O>>>,
    present_call: Option<Box<PresentCallFn<A>>>,
    present_result: Option<Box<PresentResultFn>>,
    body: Arc<BodyFn<A, O>>,
}

fn output_error(tool: &str, message: impl Into<String>) -> ToolFailure {
    ToolsError::InvalidOutput {
        tool: tool.to_owned(),
        message: message.into(),
    }
    .into()
}

impl<A, O> ToolDefinition for TypedTool<A, O>
where
    A: DeserializeOwned + Send + Sync + 'static,
    O: Serialize + DeserializeOwned + Send + Sync + 'static,
{
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
        match &self.render {
            None => Ok(vec![default_render(value)]),
            Some(r) => {
                let a: A = parse_args(&self.schema.name, args)?;
                let o: O = serde_json::from_value(value.clone())
                    .map_err(|e| output_error(&self.schema.name, e.to_string()))?;
                Ok(r(&a, &o))
            }
        }
    }

    fn execute(
        &self,
        args: &Value,
        cx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolFailure>> {
        let parsed: A = match parse_args(&self.schema.name, args) {
            Ok(a) => a,
            Err(e) => return Box::pin(std::future::ready(Err(e.into()))),
        };
        // The body consumes its arguments; a custom renderer / meta hook gets a second parse.
        let needs_args = self.render.is_some() || self.meta.is_some();
        let args_again: Option<A> = if needs_args {
            parse_args(&self.schema.name, args).ok()
        } else {
            None
        };
        let render = self.render.clone();
        let meta = self.meta.clone();
        let name = self.schema.name.clone();
        let fut = (self.body)(parsed, cx);
        Box::pin(async move {
            let out = fut.await?;
            let value =
                serde_json::to_value(&out).map_err(|e| output_error(&name, e.to_string()))?;
            let content = match (&render, &args_again) {
                (Some(r), Some(a)) => r(a, &out),
                _ => vec![default_render(&value)],
            };
            let meta = match (&meta, &args_again) {
                (Some(m), Some(a)) => m(a, &out),
                _ => None,
            };
            Ok(ToolOutput {
                value,
                content: Some(content),
                meta,
            })
        })
    }

    fn finalize_content(
        &self,
        exec: &ToolExecution,
        result: &ToolExecutionResult,
    ) -> Option<Vec<ContentBlock>> {
        self.finalize.as_ref().and_then(|f| f(exec, result))
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn is_concurrency_safe(&self, args: &Value) -> bool {
        match &self.safe {
            None => false,
            Some(f) => match parse_args::<A>(&self.schema.name, args) {
                Ok(a) => f(&a),
                Err(_) => false,
            },
        }
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        let f = self.present_call.as_ref()?;
        let a: A = parse_args(&self.schema.name, args).ok()?;
        f(&a)
    }

    fn present_result(&self, args: &Value, result: &ToolExecutionResult) -> Option<Value> {
        self.present_result.as_ref().and_then(|f| f(args, result))
    }
}
