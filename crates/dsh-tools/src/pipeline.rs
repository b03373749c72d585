//! The guarded execution pipeline of [`ToolRegistry`]: `tools/pre-execute` → approval →
//! guards → `tools/execute` → body → `tools/post-execute` → `finalize_content` → `tools/result`.
//!
//! Behaviour notes: `docs/tools.md` ("Pipeline").
//!
//! # Phases
//! [`ToolRegistry::execute`] runs the whole pipeline. The scheduler runs it in three phases so
//! that policy runs one call at a time, bodies overlap and results commit in model order:
//! [`ToolRegistry::prepare`] (materialise, entry abort check, `tools/pre-execute`, approval,
//! guards) → [`PreparedCall::dispatch`] (abort check, `tools/execute` around the body, abort
//! normalisation) → [`DispatchedCall::complete`] (`tools/post-execute`, deferred contexts,
//! `finalize_content`, freeze, `tools/result`).
//!
//! # Cancellation
//! - signal already cancelled when [`ToolRegistry::prepare`] starts ⇒ final
//!   `ABORTED_BEFORE_DISPATCH` result; policy and post-execute are skipped (nothing was asked);
//! - cancelled after policy but before the body starts ⇒ `ABORTED_BEFORE_DISPATCH`, which still
//!   passes post-execute;
//! - a body that started is always awaited; a *success* that finishes after the abort becomes
//!   `ABORTED` (`Error: tool call aborted`, info `{name: AbortError, code: ABORTED}`); a failure
//!   is kept as is.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_llm::ContentBlock;
use futures::FutureExt;

use crate::definition::{RunState, ToolDefinition, ToolRunContext};
use crate::error::ToolsError;
use crate::events::{
    ToolDispatchExecution, ToolResultEvent, ToolsExecute, ToolsPostExecute, ToolsPreExecute,
    ToolsResult,
};
use crate::registry::ToolRegistry;
use crate::result::{
    PostToolDecision, PreToolDecision, ToolExecution, ToolExecutionInput, ToolExecutionResult,
    ToolExecutionSuccess,
};
use crate::schema;
use tracing::Instrument as _;

impl ToolRegistry {
    /// Runs the whole pipeline for one call and returns its frozen result.
    pub async fn execute(&self, input: ToolExecutionInput) -> Arc<ToolExecutionResult> {
        self.prepare(input).await.dispatch().await.complete().await
    }

    /// Phase 1: materialise the call, check the entry abort, run `tools/pre-execute`, approval
    /// (for `ask`) and guards. Never fails: every outcome is carried in the [`PreparedCall`].
    ///
    /// The call runs in a `tool_call` tracing span (`call_id`, `tool`) that the later phases
    /// re-enter, so `DSH_LOG=debug` follows one call through all three.
    pub async fn prepare(&self, input: ToolExecutionInput) -> PreparedCall {
        let span = tracing::debug_span!("tool_call", call_id = %input.call_id, tool = %input.name);
        let mut call = self.prepare_in_span(input).instrument(span.clone()).await;
        tracing::debug!(parent: &span, allowed = matches!(call.stage, Stage::Proceed), "tool call prepared");
        call.span = span;
        call
    }

    async fn prepare_in_span(&self, input: ToolExecutionInput) -> PreparedCall {
        let ToolExecutionInput {
            call_id,
            root_call_id,
            name,
            arguments,
            caller,
            signal,
        } = input;
        let key = caller.as_ref().map(|c| c.key.clone());
        // The definition is captured at call start (for finalize_content and dispatch).
        let def = self.get(&name, key.as_ref());
        let exec = Arc::new(ToolExecution {
            root_call_id: root_call_id.unwrap_or_else(|| call_id.clone()),
            call_id,
            name,
            arguments,
            caller,
            signal,
        });
        let mut call = PreparedCall {
            reg: self.clone(),
            exec: exec.clone(),
            def,
            run: Arc::new(RunState::default()),
            stage: Stage::Proceed,
            span: tracing::Span::none(),
        };
        if exec.signal.is_cancelled() {
            call.stage = Stage::Final(ToolExecutionResult::from_error(
                &ToolsError::AbortedBeforeDispatch,
            ));
            return call;
        }
        // Arguments are a JSON object (a tool's parameters schema is one): an array (serde
        // would read it as positional fields) or a scalar is an argument error for the model,
        // and nothing is asked or run. A raw string (the model's text was not JSON) is left to
        // the body's parse, which says so. `docs/tools.md` ("Pipeline").
        if call.def.is_some()
            && let Some(got) = not_an_object(&exec.arguments)
        {
            call.stage = Stage::Final(ToolExecutionResult::from_error(&ToolsError::InvalidArgs {
                tool: exec.name.clone(),
                message: format!("the arguments must be a JSON object, got {got}"),
            }));
            return call;
        }
        let decision = self
            .inner
            .ctx
            .dispatch_to(key.as_ref())
            .waterfall::<ToolsPreExecute, _, _>(exec.clone(), |_| async {
                Ok(PreToolDecision::Allow)
            })
            .await;
        let decision = match decision {
            Ok(d) => d,
            Err(e) => {
                call.stage = Stage::Final(policy_failure("tools/pre-execute", &e.to_string()));
                return call;
            }
        };
        let decision = match decision {
            PreToolDecision::Ask { reason } => match self.ask(&exec, reason).await {
                Ok(d) => d,
                Err(msg) => {
                    call.stage = Stage::Final(policy_failure("approval", &msg));
                    return call;
                }
            },
            other => other,
        };
        match decision {
            PreToolDecision::Allow => {}
            PreToolDecision::Deny { reason } => {
                call.stage = Stage::Denied(denial(reason));
                return call;
            }
            PreToolDecision::Ask { reason } => {
                // An ask can only come back from `ask` as allow/deny; keep fail-closed anyway.
                call.stage = Stage::Denied(denial(reason.unwrap_or_else(|| {
                    format!(
                        "tool \"{}\" requires approval (not yet supported)",
                        exec.name
                    )
                })));
                return call;
            }
        }
        for g in self.guards_for(key.as_ref()) {
            match std::panic::catch_unwind(AssertUnwindSafe(|| g(&exec))) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    call.stage = Stage::Denied(denial(reason));
                    return call;
                }
                Err(_) => {
                    call.stage = Stage::Final(policy_failure("guard", "guard panicked"));
                    return call;
                }
            }
        }
        call
    }

    /// Resolves an `ask` through the approval service. `Err` = the service threw.
    async fn ask(
        &self,
        exec: &Arc<ToolExecution>,
        reason: Option<String>,
    ) -> Result<PreToolDecision, String> {
        let name = &exec.name;
        let service = match &exec.caller {
            Some(c) => c.ctx.get::<dsh_approval::ApprovalService>(),
            None => self.inner.ctx.get::<dsh_approval::ApprovalService>(),
        };
        let Some(service) = service else {
            return Ok(PreToolDecision::Deny {
                reason: reason.unwrap_or_else(|| {
                    format!("tool \"{name}\" requires approval (not yet supported)")
                }),
            });
        };
        let Some(caller) = &exec.caller else {
            return Ok(PreToolDecision::Deny {
                reason: format!(
                    "tool \"{name}\" requires approval, but the call has no agent to route it through"
                ),
            });
        };
        let outcome = service
            .request(dsh_approval::ApprovalRequest {
                caller: caller.approval_caller(),
                tool_name: name.clone(),
                call_id: Some(exec.call_id.clone()),
                reason,
                signal: exec.signal.clone(),
            })
            .await
            .map_err(|e| e.to_string())?;
        use dsh_approval::ApprovalOutcome as O;
        Ok(match outcome {
            O::AllowedOnce => PreToolDecision::Allow,
            O::Rejected => PreToolDecision::Deny {
                reason: match service.take_rejection_reason(&caller.session_id, &exec.call_id) {
                    Some(why) => format!("the user rejected tool \"{name}\": {why}"),
                    None => format!("the user rejected tool \"{name}\""),
                },
            },
            O::Cancelled => PreToolDecision::Deny {
                reason: format!("approval for tool \"{name}\" was cancelled"),
            },
            O::Unavailable => PreToolDecision::Deny {
                reason: format!(
                    "tool \"{name}\" requires approval, but no approval channel is available"
                ),
            },
        })
    }
}

/// The JSON type of `args` when it is neither an object nor a raw string: `an array`, `a
/// number`, `a boolean` or `null`.
fn not_an_object(args: &serde_json::Value) -> Option<&'static str> {
    use serde_json::Value;
    match args {
        Value::Object(_) => None,
        // Raw argument text: JSON that is not an object (a string literal) is refused here;
        // text that is not JSON at all is left to the body's parse, which says so.
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(_)) | Err(_) => None,
            Ok(Value::String(_)) => Some("a string"),
            Ok(other) => not_an_object(&other),
        },
        Value::Array(_) => Some("an array"),
        Value::Number(_) => Some("a number"),
        Value::Bool(_) => Some("a boolean"),
        Value::Null => Some("null"),
    }
}

fn denial(reason: String) -> ToolExecutionResult {
    ToolExecutionResult::failure(reason, None)
}

fn policy_failure(stage: &'static str, message: &str) -> ToolExecutionResult {
    ToolExecutionResult::from_error(&ToolsError::PolicyFailed {
        stage,
        message: message.to_owned(),
    })
}

enum Stage {
    /// Policy allowed: the body may run.
    Proceed,
    /// Denied by policy/guards: skips the body, still passes post-execute.
    Denied(ToolExecutionResult),
    /// A final result that skips the body AND post-execute (entry abort, policy throw).
    Final(ToolExecutionResult),
}

/// A call after policy (phase 1 of 3). Call [`PreparedCall::dispatch`] next.
pub struct PreparedCall {
    reg: ToolRegistry,
    exec: Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
    stage: Stage,
    span: tracing::Span,
}

impl std::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("exec", &self.exec)
            .field("allowed", &matches!(self.stage, Stage::Proceed))
            .finish()
    }
}

impl PreparedCall {
    /// The materialised call.
    pub fn exec(&self) -> &Arc<ToolExecution> {
        &self.exec
    }

    /// True if policy allowed the call (its body will be dispatched unless aborted first).
    pub fn is_allowed(&self) -> bool {
        matches!(self.stage, Stage::Proceed)
    }

    /// Phase 2: if allowed and not aborted, runs `tools/execute` around the body and awaits it
    /// to completion (never abandoned). Safe to spawn (`'static`).
    pub async fn dispatch(self) -> DispatchedCall {
        let span = self.span.clone();
        self.dispatch_in_span().instrument(span).await
    }

    async fn dispatch_in_span(self) -> DispatchedCall {
        let PreparedCall {
            reg,
            exec,
            def,
            run,
            stage,
            span,
        } = self;
        let (result, skip_post) = match stage {
            Stage::Final(r) => (r, true),
            Stage::Denied(r) => (r, false),
            Stage::Proceed => {
                if exec.signal.is_cancelled() {
                    (
                        ToolExecutionResult::from_error(&ToolsError::AbortedBeforeDispatch),
                        false,
                    )
                } else {
                    match run_execute(&reg, &exec, def.clone(), run.clone()).await {
                        Ok(r) => (r, false),
                        Err(r) => (r, true),
                    }
                }
            }
        };
        DispatchedCall {
            reg,
            exec,
            def,
            run,
            result,
            skip_post,
            span,
        }
    }
}

/// Runs the `tools/execute` waterfall. `Err(result)` = a wrapper threw (final, skips post).
async fn run_execute(
    reg: &ToolRegistry,
    exec: &Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
) -> Result<ToolExecutionResult, ToolExecutionResult> {
    let payload = ToolDispatchExecution {
        exec: exec.clone(),
        def,
        signal: exec.signal.clone(),
    };
    let key = exec.key().cloned();
    let out = reg
        .inner
        .ctx
        .dispatch_to(key.as_ref())
        .waterfall::<ToolsExecute, _, _>(payload, move |d| run_body(d, run))
        .await;
    match out {
        Ok(mut result) => {
            if exec.signal.is_cancelled() && !result.is_error() {
                let ctx = std::mem::take(result.additional_contexts_mut());
                result = ToolExecutionResult::from_error(&ToolsError::Aborted);
                *result.additional_contexts_mut() = ctx;
            }
            Ok(result)
        }
        Err(e) => Err(policy_failure("tools/execute", &e.to_string())),
    }
}

/// The terminal of `tools/execute`: the body itself (or `UNKNOWN_TOOL`).
async fn run_body(
    d: ToolDispatchExecution,
    run: Arc<RunState>,
) -> Result<ToolExecutionResult, dsh_kernel::BoxError> {
    let ToolDispatchExecution { exec, def, signal } = d;
    let Some(def) = def else {
        return Ok(ToolExecutionResult::from_error(&ToolsError::UnknownTool {
            name: exec.name.clone(),
        }));
    };
    let cx = ToolRunContext {
        exec: exec.clone(),
        signal: signal.clone(),
        state: run.clone(),
    };
    let body = std::panic::catch_unwind(AssertUnwindSafe(|| def.execute(&exec.arguments, cx)));
    let body = match body {
        Ok(f) => f,
        Err(p) => return Ok(panicked(&exec.name, p.as_ref())),
    };
    let mut body = AssertUnwindSafe(body).catch_unwind();
    // Re-fuse the caller's signal: if the caller aborts, the body's (possibly replaced) signal
    // is cancelled too; the body is still awaited to completion.
    let outcome = tokio::select! {
        biased;
        r = &mut body => r,
        () = exec.signal.cancelled() => {
            signal.cancel();
            body.await
        }
    };
    let output = match outcome {
        Err(p) => return Ok(panicked(&exec.name, p.as_ref())),
        Ok(Err(f)) => return Ok(ToolExecutionResult::failure(f.message, f.info)),
        Ok(Ok(o)) => o,
    };
    if let Err(msg) = schema::validate(def.output_schema(), &output.value) {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: msg,
            },
        ));
    }
    if let Err(e) = dsh_session::check_lossless(&output.value) {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: format!("the value is not lossless JSON: {e}"),
            },
        ));
    }
    if let Some(meta) = &output.meta
        && let Err(e) = dsh_session::check_lossless(meta)
    {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: format!("meta is not lossless JSON: {e}"),
            },
        ));
    }
    let content = match output.content {
        Some(c) => c,
        None => match def.render(&exec.arguments, &output.value) {
            Ok(c) => c,
            Err(f) => return Ok(ToolExecutionResult::failure(f.message, f.info)),
        },
    };
    Ok(ToolExecutionResult::Success(ToolExecutionSuccess {
        value: output.value,
        content,
        meta: output.meta,
        additional_contexts: Vec::new(),
        concludes_turn: run.concluded.load(Ordering::Relaxed),
    }))
}

fn panicked(tool: &str, p: &(dyn std::any::Any + Send)) -> ToolExecutionResult {
    let message = if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    ToolExecutionResult::from_error(&ToolsError::ToolPanicked {
        tool: tool.to_owned(),
        message,
    })
}

/// A call whose body (if any) has finished (phase 2 of 3). Call [`DispatchedCall::complete`]
/// when it is this call's turn to commit (model order).
pub struct DispatchedCall {
    reg: ToolRegistry,
    exec: Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
    result: ToolExecutionResult,
    skip_post: bool,
    span: tracing::Span,
}

impl std::fmt::Debug for DispatchedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchedCall")
            .field("exec", &self.exec)
            .field("result", &self.result)
            .finish()
    }
}

impl DispatchedCall {
    /// The materialised call.
    pub fn exec(&self) -> &Arc<ToolExecution> {
        &self.exec
    }

    /// Phase 3: `tools/post-execute` (unless the outcome is final), deferred contexts,
    /// `finalize_content` (exactly once), freeze, `tools/result` emit.
    pub async fn complete(self) -> Arc<ToolExecutionResult> {
        let span = self.span.clone();
        self.complete_in_span().instrument(span).await
    }

    async fn complete_in_span(self) -> Arc<ToolExecutionResult> {
        let DispatchedCall {
            reg,
            exec,
            def,
            run,
            mut result,
            skip_post,
            span: _,
        } = self;
        let key = exec.key().cloned();
        if !skip_post {
            result = post_execute(&reg, &exec, def.as_deref(), result).await;
        }
        let deferred = std::mem::take(&mut *run.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        if !deferred.is_empty() {
            let ctx = result.additional_contexts_mut();
            let rest = std::mem::take(ctx);
            ctx.extend(deferred);
            ctx.extend(rest);
        }
        if let Some(def) = &def {
            let fin =
                std::panic::catch_unwind(AssertUnwindSafe(|| def.finalize_content(&exec, &result)));
            match fin {
                Ok(Some(content)) => *result.content_mut() = content,
                Ok(None) => {}
                Err(_) => {
                    tracing::error!(target: "dsh_tools", tool = %exec.name, "finalize_content panicked; content kept");
                }
            }
        }
        let result = Arc::new(result);
        reg.inner
            .ctx
            .dispatch_to(key.as_ref())
            .emit::<ToolsResult>(&ToolResultEvent {
                exec,
                result: result.clone(),
            });
        tracing::debug!(
            error = result.error_message().is_some(),
            "tool call finished"
        );
        result
    }
}

async fn post_execute(
    reg: &ToolRegistry,
    exec: &Arc<ToolExecution>,
    def: Option<&dyn ToolDefinition>,
    result: ToolExecutionResult,
) -> ToolExecutionResult {
    let key = exec.key().cloned();
    let shared = Arc::new(result);
    let decision = reg
        .inner
        .ctx
        .dispatch_to(key.as_ref())
        .waterfall::<ToolsPostExecute, _, _>(
            ToolResultEvent {
                exec: exec.clone(),
                result: shared.clone(),
            },
            |_| async { Ok(PostToolDecision::accept()) },
        )
        .await;
    let mut result = Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
    let decision = match decision {
        Ok(d) => d,
        Err(e) => return policy_failure("tools/post-execute", &e.to_string()),
    };
    match decision {
        PostToolDecision::Accept {
            additional_contexts,
        } => {
            result.additional_contexts_mut().extend(additional_contexts);
            result
        }
        PostToolDecision::ReplaceContent {
            content,
            additional_contexts,
        } => {
            *result.content_mut() = content;
            result.additional_contexts_mut().extend(additional_contexts);
            result
        }
        PostToolDecision::ReplaceValue {
            value,
            additional_contexts,
        } => {
            let ToolExecutionResult::Success(mut s) = result else {
                return policy_failure("tools/post-execute", "replace-value on a failed call");
            };
            let Some(def) = def else {
                return policy_failure("tools/post-execute", "replace-value on an unknown tool");
            };
            if let Err(msg) = schema::validate(def.output_schema(), &value) {
                return ToolExecutionResult::from_error(&ToolsError::InvalidOutput {
                    tool: exec.name.clone(),
                    message: msg,
                });
            }
            match def.render(&exec.arguments, &value) {
                Ok(content) => s.content = content,
                Err(f) => return ToolExecutionResult::failure(f.message, f.info),
            }
            s.value = value;
            s.additional_contexts.extend(additional_contexts);
            ToolExecutionResult::Success(s)
        }
        PostToolDecision::Block {
            feedback,
            additional_contexts,
        } => {
            let text: String = feedback
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            let message = if text.is_empty() {
                "tool result blocked by post-execute policy".to_owned()
            } else {
                text
            };
            let mut ctx = std::mem::take(result.additional_contexts_mut());
            ctx.extend(additional_contexts);
            ToolExecutionResult::Failure(crate::result::ToolExecutionFailure {
                error: crate::result::ToolErrorPayload {
                    message,
                    info: None,
                },
                content: feedback,
                meta: result.meta().cloned(),
                additional_contexts: ctx,
            })
        }
    }
}
