//! The per-step tool-call scheduler the agent loop uses: parse arguments, classify each call
//! (exclusive vs parallel-safe), run a rolling pool, commit results strictly in model order, and
//! handle aborts with synthetic results for calls that never started.
//!
//! Behaviour notes: `docs/tools.md` ("Loop-side scheduling").
//!
//! # Callbacks ([`SchedulerHooks`])
//! The loop supplies two callbacks; both are awaited by the scheduler's own task, never
//! concurrently with each other:
//! - [`SchedulerHooks::call_started`] runs when a call is about to start, *before* its
//!   pre-policy: the loop appends `tool/call {turn, step, callId, name, arguments}` and may await
//!   durability. It also runs for every synthetic (never-started) call after an abort, right
//!   before its `result_committed`.
//! - [`SchedulerHooks::result_committed`] runs once per call, strictly in model order, after
//!   post-policy and `finalize_content`: the loop appends `tool/result` (surfaceOp `append`,
//!   `sourceEventSeqs: [tool/call seq]`, `error` = `result.error_info()`, `meta`) and queues
//!   `additional_contexts` for the next step.
//!
//! A callback error is an internal scheduler failure: nothing more is started, in-flight calls
//! are drained (awaited, not committed), and [`ToolsError::SchedulerFailed`] is returned — no
//! result is fabricated.
//!
//! # Order of work
//! Starting a call = `call_started` → [`ToolRegistry::prepare`] (pre-policy, approval, guards),
//! one call at a time; only dispatch/body overlaps (bodies run on spawned tasks). The next
//! unstarted call is classified with [`ToolRegistry::execution_mode`] once, when it becomes the
//! next candidate: an exclusive call waits until every earlier call has committed and then runs
//! alone; a parallel one joins the pool while fewer than `max_parallel` bodies run and no
//! exclusive call runs.

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_llm::CallId;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::caller::ToolCaller;
use crate::error::ToolsError;
use crate::pipeline::DispatchedCall;
use crate::registry::{ExecutionMode, ToolRegistry};
use crate::result::{ToolExecutionInput, ToolExecutionResult};

/// Default rolling pool size (`maxParallelToolCalls`).
pub const DEFAULT_MAX_PARALLEL: usize = 10;

/// One tool call as the model produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRequest {
    /// The provider's call id.
    pub call_id: CallId,
    /// The tool name.
    pub name: String,
    /// The raw argument text (possibly empty or invalid JSON).
    pub arguments: String,
}

impl ToolCallRequest {
    /// Builds a request.
    pub fn new(
        call_id: impl Into<CallId>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

/// Parses a model's argument text: empty (or whitespace) ⇒ `{}`; invalid JSON ⇒ the raw text as
/// a JSON string (the tool then reports `INVALID_ARGS`); otherwise the parsed value. A JSON
/// string literal (`"ls -la"`) also stays the raw text, quotes included, so the pipeline can
/// tell it from text that is not JSON at all and say "must be a JSON object, got a string".
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    match serde_json::from_str(raw) {
        Ok(Value::String(_)) | Err(_) => Value::String(raw.to_owned()),
        Ok(v) => v,
    }
}

/// Scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Rolling pool size for parallel-safe calls (`maxParallelToolCalls`; `1` = serial; `0` is
    /// treated as `1`). Default [`DEFAULT_MAX_PARALLEL`].
    pub max_parallel: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_parallel: DEFAULT_MAX_PARALLEL,
        }
    }
}

/// The loop's callbacks (see the module docs). `index` is the call's position in model order.
pub trait SchedulerHooks: Send + Sync {
    /// A call is starting (or a synthetic aborted call is being recorded when `synthetic`).
    ///
    /// # Errors
    /// Any error stops the batch (internal scheduler failure).
    fn call_started<'a>(
        &'a self,
        index: usize,
        call: &'a ToolCallRequest,
        synthetic: bool,
    ) -> BoxFuture<'a, Result<(), BoxError>>;

    /// A call's final result is committed (model order).
    ///
    /// # Errors
    /// Any error stops the batch (internal scheduler failure).
    fn result_committed<'a>(
        &'a self,
        index: usize,
        call: &'a ToolCallRequest,
        result: &'a Arc<ToolExecutionResult>,
    ) -> BoxFuture<'a, Result<(), BoxError>>;
}

/// Hooks that do nothing (tests, agentless batches).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl SchedulerHooks for NoHooks {
    fn call_started<'a>(
        &'a self,
        _index: usize,
        _call: &'a ToolCallRequest,
        _synthetic: bool,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn result_committed<'a>(
        &'a self,
        _index: usize,
        _call: &'a ToolCallRequest,
        _result: &'a Arc<ToolExecutionResult>,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// One committed call.
#[derive(Debug, Clone)]
pub struct CommittedCall {
    /// The call.
    pub call: ToolCallRequest,
    /// Its frozen result.
    pub result: Arc<ToolExecutionResult>,
    /// False for synthetic results of calls that never started (abort).
    pub started: bool,
}

/// What a batch produced, in model order.
#[derive(Debug, Clone)]
pub struct BatchOutcome {
    /// Every call's result, in model order.
    pub results: Vec<CommittedCall>,
    /// Some committed success asked to conclude the turn.
    pub concludes_turn: bool,
    /// The signal fired during the batch.
    pub aborted: bool,
}

enum Slot {
    Pending,
    Running,
    Done(Box<DispatchedCall>),
    Committed,
}

/// Runs one assistant step's tool calls. See the module docs. Must run inside a tokio runtime
/// (bodies are spawned with `tokio::spawn`).
///
/// # Errors
/// [`ToolsError::SchedulerFailed`] when a callback fails or an internal task is lost (after
/// in-flight calls were drained; results already committed stay committed).
pub async fn run_tool_calls(
    registry: &ToolRegistry,
    caller: Option<ToolCaller>,
    calls: Vec<ToolCallRequest>,
    signal: CancellationToken,
    hooks: &dyn SchedulerHooks,
    config: SchedulerConfig,
) -> Result<BatchOutcome, ToolsError> {
    let n = calls.len();
    let max_parallel = config.max_parallel.max(1);
    let key = caller.as_ref().map(|c| c.key.clone());
    let mut slots: Vec<Slot> = (0..n).map(|_| Slot::Pending).collect();
    let mut in_flight = FuturesUnordered::new();
    let mut exclusive_running = false;
    let mut next_start = 0usize;
    let mut next_commit = 0usize;
    let mut next_mode: Option<(Value, ExecutionMode)> = None;
    let mut out = BatchOutcome {
        results: Vec::with_capacity(n),
        concludes_turn: false,
        aborted: false,
    };
    let fail = |e: String| ToolsError::SchedulerFailed { message: e };
    let mut failure: Option<ToolsError> = None;

    'main: loop {
        // 1. Commit every finished call whose predecessors are committed.
        while next_commit < n {
            if !matches!(slots[next_commit], Slot::Done(_)) {
                break;
            }
            let Slot::Done(d) = std::mem::replace(&mut slots[next_commit], Slot::Committed) else {
                break;
            };
            let result = d.complete().await;
            let call = &calls[next_commit];
            if let Err(e) = hooks.result_committed(next_commit, call, &result).await {
                failure = Some(fail(e.to_string()));
                break 'main;
            }
            out.concludes_turn |= result.concludes_turn();
            out.results.push(CommittedCall {
                call: call.clone(),
                result,
                started: true,
            });
            next_commit += 1;
        }
        // 2. Start the next call if allowed.
        if next_start < n && !signal.is_cancelled() {
            let call = &calls[next_start];
            let (args, mode) = next_mode.take().unwrap_or_else(|| {
                let args = parse_arguments(&call.arguments);
                let mode = registry.execution_mode(&call.name, &args, key.as_ref());
                (args, mode)
            });
            let can_start = match mode {
                ExecutionMode::Exclusive => in_flight.is_empty() && next_commit == next_start,
                ExecutionMode::Parallel => !exclusive_running && in_flight.len() < max_parallel,
            };
            if can_start {
                if let Err(e) = hooks.call_started(next_start, call, false).await {
                    failure = Some(fail(e.to_string()));
                    break 'main;
                }
                let input = ToolExecutionInput {
                    call_id: call.call_id.clone(),
                    root_call_id: None,
                    name: call.name.clone(),
                    arguments: args,
                    caller: caller.clone(),
                    signal: signal.clone(),
                };
                let prepared = registry.prepare(input).await;
                let index = next_start;
                let handle = tokio::spawn(prepared.dispatch());
                in_flight.push(async move { (index, mode, handle.await) });
                slots[index] = Slot::Running;
                exclusive_running = mode == ExecutionMode::Exclusive;
                next_start += 1;
                continue;
            }
            next_mode = Some((args, mode));
        }
        // 3. Wait for a body, or finish.
        match in_flight.next().await {
            Some((index, mode, joined)) => {
                if mode == ExecutionMode::Exclusive {
                    exclusive_running = false;
                }
                match joined {
                    Ok(d) => slots[index] = Slot::Done(Box::new(d)),
                    Err(e) => {
                        failure = Some(fail(format!("tool task lost: {e}")));
                        break 'main;
                    }
                }
            }
            None => {
                if next_commit == next_start && (next_start == n || signal.is_cancelled()) {
                    break 'main;
                }
            }
        }
    }

    if let Some(f) = failure {
        // Drain, never abandon.
        while in_flight.next().await.is_some() {}
        return Err(f);
    }
    out.aborted = signal.is_cancelled();
    // Synthetic results for calls that never started.
    for (index, call) in calls.iter().enumerate().skip(next_start) {
        hooks
            .call_started(index, call, true)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let input = ToolExecutionInput {
            call_id: call.call_id.clone(),
            root_call_id: None,
            name: call.name.clone(),
            arguments: parse_arguments(&call.arguments),
            caller: caller.clone(),
            signal: signal.clone(),
        };
        let result = registry.execute(input).await;
        hooks
            .result_committed(index, call, &result)
            .await
            .map_err(|e| fail(e.to_string()))?;
        out.results.push(CommittedCall {
            call: call.clone(),
            result,
            started: false,
        });
    }
    Ok(out)
}

/// The `tool/call` payload for `call` in `turn`/`step` (raw argument text kept verbatim).
pub fn tool_call_data(turn: u64, step: u64, call: &ToolCallRequest) -> dsh_session::ToolCallData {
    dsh_session::ToolCallData {
        turn,
        step,
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        arguments: call.arguments.clone(),
    }
}

/// The `tool/result` payload for a committed result: message = tool-result message
/// (`callId`, content, `isError`), `error` = `result.error_info()` only when present, `meta`
/// when present.
pub fn tool_result_data(
    turn: u64,
    step: u64,
    call_id: &CallId,
    result: &ToolExecutionResult,
) -> dsh_session::ToolResultData {
    dsh_session::ToolResultData {
        turn,
        step,
        message: Arc::new(dsh_llm::Message::tool_result(
            call_id.clone(),
            result.content().to_vec(),
            result.is_error(),
        )),
        error: result.error_info().map(|i| dsh_session::ToolResultError {
            name: i.name.clone(),
            code: i.code.clone(),
        }),
        meta: result.meta().cloned(),
    }
}

/// Ready-made [`SchedulerHooks`] that write the batch into a session: `call_started` appends
/// `tool/call`; `result_committed` appends `tool/result` (surfaceOp `append`,
/// `sourceEventSeqs: [tool/call seq]`) and collects `additional_contexts` in order (take them
/// with [`SessionHooks::take_contexts`] and queue them for the next step). It does not wait for
/// durability; a loop that must, wraps these hooks.
#[derive(Debug)]
pub struct SessionHooks {
    session: Arc<dsh_session::Session>,
    turn: u64,
    step: u64,
    call_seqs: std::sync::Mutex<std::collections::HashMap<usize, u64>>,
    contexts: std::sync::Mutex<Vec<dsh_llm::Message>>,
}

impl SessionHooks {
    /// Hooks writing into `session` for `turn`/`step`.
    pub fn new(session: Arc<dsh_session::Session>, turn: u64, step: u64) -> Self {
        Self {
            session,
            turn,
            step,
            call_seqs: std::sync::Mutex::default(),
            contexts: std::sync::Mutex::default(),
        }
    }

    /// The additional contexts of every committed result so far, in commit order (drained).
    pub fn take_contexts(&self) -> Vec<dsh_llm::Message> {
        std::mem::take(&mut *self.contexts.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl SchedulerHooks for SessionHooks {
    fn call_started<'a>(
        &'a self,
        index: usize,
        call: &'a ToolCallRequest,
        _synthetic: bool,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let r = self
            .session
            .append(
                "tool/call",
                dsh_session::EventData::ToolCall(tool_call_data(self.turn, self.step, call)),
                None,
            )
            .map(|ev| {
                self.call_seqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(index, ev.seq);
            })
            .map_err(|e| Box::new(e) as BoxError);
        Box::pin(std::future::ready(r))
    }

    fn result_committed<'a>(
        &'a self,
        index: usize,
        call: &'a ToolCallRequest,
        result: &'a Arc<ToolExecutionResult>,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let seq = self
            .call_seqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&index)
            .copied();
        let intent = match seq {
            Some(s) => dsh_session::SurfaceIntent::append_from(vec![s]),
            None => dsh_session::SurfaceIntent::append(),
        };
        let r = self
            .session
            .append(
                "tool/result",
                dsh_session::EventData::ToolResult(tool_result_data(
                    self.turn,
                    self.step,
                    &call.call_id,
                    result,
                )),
                Some(intent),
            )
            .map(|_| {
                self.contexts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(result.additional_contexts().iter().cloned());
            })
            .map_err(|e| Box::new(e) as BoxError);
        Box::pin(std::future::ready(r))
    }
}
