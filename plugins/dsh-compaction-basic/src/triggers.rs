//! The automatic triggers, as listeners on the agent seam's events (no loop code).
//!
//! See docs/upstream/compaction.md (Basic engine policy, triggers):
//! - `agent/pre-step`: before each step, [`BasicCompaction`] compacts if the next request would
//!   be at or over the threshold; the step waits for it. A failure (a summary not smaller than
//!   its source, a failed call, …) is logged as a warning and the turn goes on uncompacted;
//!   the engine also emits it as a `compaction/notice` the CLI prints, and every committed
//!   compaction as `compaction/completed` ([`BasicCompaction::with_events`]).
//!   The events land between the previous `step/end` (or `turn/start`) and the next
//!   `step/start`, owned by the open turn.
//! - `agent/request-error` with a context-window failure: compact (threshold bypassed), then
//!   ask the loop to retry when [`OverflowRetries`] allows it (the surface changed, no retry
//!   spent since the last assistant message); otherwise the failure goes on down the chain.
//! - `session/event`: an `assistant/message` or a `turn/end` resets that session's overflow
//!   counter; `session/disposed` drops the session's meter and counter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentPreStep, AgentRequestError, RetryDecision};
use dsh_compaction::{CompactionService, CompactionTarget, Trigger};
use dsh_kernel::{Context, Registration};
use dsh_session::{CoreKind, SessionDisposed, SessionEventEmitted};

use crate::engine::BasicCompaction;
use crate::overflow::{OverflowRetries, is_context_overflow, stated_context_limit};

/// Installs the listeners through `ctx`; `max_overflow_retries` bounds the retries per
/// agent between two assistant messages.
///
/// # Errors
/// The kernel's error when `ctx` is no longer active.
pub fn install(
    ctx: &Context,
    engine: Arc<BasicCompaction>,
    max_overflow_retries: u32,
) -> Result<Vec<Registration>, dsh_kernel::KernelError> {
    let counters: Arc<Mutex<HashMap<String, OverflowRetries>>> = Arc::default();
    let mut regs = Vec::new();

    let e = engine.clone();
    regs.push(ctx.on_waterfall::<AgentPreStep, _, _>(move |p, next| {
        let engine = e.clone();
        async move {
            let mut target = CompactionTarget::new(p.session.clone(), Some(p.turn));
            target.key.clone_from(&p.scope);
            match engine
                .compact_if_needed(&target, Trigger::Pressure, p.cancellation.clone())
                .await
            {
                Ok(Some(r)) => tracing::info!(
                    target: "dsh_compaction_basic", session = %p.session.id(),
                    shadowed_tokens = r.shadowed_token_count, message_tokens = r.message_tokens,
                    "compacted {} history items", r.shadowed_seqs.len()
                ),
                Ok(None) => {}
                Err(err) => tracing::warn!(
                    target: "dsh_compaction_basic", session = %p.session.id(), code = err.kind(),
                    "automatic compaction failed; the turn goes on uncompacted: {err}"
                ),
            }
            next.run(p).await
        }
    })?);

    let e = engine.clone();
    let c = counters.clone();
    regs.push(ctx.on_waterfall::<AgentRequestError, _, _>(move |p, next| {
        let engine = e.clone();
        let counters = c.clone();
        async move {
            if !is_context_overflow(&p.failure) {
                return next.run(p).await;
            }
            if let (Some(limit), Some(h)) = (
                stated_context_limit(&p.failure.message),
                p.session.request_header(),
            ) {
                engine.learn_window((&h.config.provider, &h.config.model), limit);
            }
            let before = p.session.replace_generation();
            let mut target = CompactionTarget::new(p.session.clone(), Some(p.turn));
            target.key.clone_from(&p.scope);
            if let Err(err) = engine
                .compact_if_needed(&target, Trigger::ContextOverflow, p.cancellation.clone())
                .await
            {
                tracing::warn!(
                    target: "dsh_compaction_basic", session = %p.session.id(), code = err.kind(),
                    "compaction after a context-window error failed: {err}"
                );
            }
            let after = p.session.replace_generation();
            let retry = counters
                .lock()
                .unwrap_or_else(|x| x.into_inner())
                .entry(p.session.id().to_owned())
                .or_insert_with(|| OverflowRetries::new(max_overflow_retries))
                .should_retry(before, after);
            if retry {
                Some(RetryDecision::Retry)
            } else {
                next.run(p).await
            }
        }
    })?);

    let c = counters.clone();
    regs.push(ctx.on_emit::<SessionDisposed>(move |n| {
        engine.forget(n.session.id());
        c.lock()
            .unwrap_or_else(|x| x.into_inner())
            .remove(n.session.id());
    })?);

    let c = counters;
    regs.push(ctx.on_emit::<SessionEventEmitted>(move |n| {
        if matches!(
            n.event.kind.core(),
            Some(CoreKind::AssistantMessage | CoreKind::TurnEnd)
        ) && let Some(r) = c
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .get_mut(n.session.id())
        {
            r.reset();
        }
    })?);
    Ok(regs)
}
