//! The spill policy: a prepended `tools/post-execute` listener that, after the rest of the
//! chain decided, replaces an accepted plain-text result larger than `max_inline_bytes` with a
//! head/tail preview plus the spill locator (upstream `@deepseek-ai/dsh-spill-policy`).
//!
//! Replacement text (never larger than the cap):
//!
//! ```text
//! <head>
//! [... <omitted> bytes omitted ...]
//! <tail>
//!
//! (Omitted <omitted> bytes. Full formatted result stored at: <locator>. Use read with offset/limit, or grep this path to search within it.)
//! ```
//!
//! When the tool already bounded its own output without storing it (its value reports
//! `omittedBytes`, see [`tool_omitted_bytes`], but declares no output file — e.g. `bash` when
//! its output file could not be created), the notice counts every byte the model does not see,
//! the tool's and this preview's, so the number is exact:
//!
//! ```text
//! (Omitted <all> bytes: <tool's> by the tool's own output cap and <preview's> in this preview. The result as the tool kept it is stored at: <locator>. <hint>)
//! ```
//!
//! Skipped (original kept): `read` results (no read → spill → read loop), results whose value
//! declares an output file the tool stored itself ([`dsh_tools::declared_output_files`]: the
//! tool already cut its output once and its notice names that file), non-text content,
//! calls without a session, blocks and value replacements, a save failure, or a cap too small
//! for the notice itself.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, ListenOptions, Registration};
use dsh_llm::ContentBlock;
use dsh_tools::{PostToolDecision, ToolsPostExecute, declared_output_files};

use crate::store::{LocalSpillStore, SaveTextSpill, SpillSource};

/// Largest index `<= i` on a char boundary of `s`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Smallest index `>= i` on a char boundary of `s`.
fn ceil_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Keeps the first `ceil(budget/2)` and last `floor(budget/2)` bytes of `text` (each cut moved
/// inward to a UTF-8 boundary); returns `(head, tail, omitted bytes)`. When `text` fits,
/// `(text, "", 0)`.
pub fn head_tail(text: &str, budget: usize) -> (&str, &str, usize) {
    if text.len() <= budget {
        return (text, "", 0);
    }
    let head_end = floor_boundary(text, budget.div_ceil(2));
    let tail_start = ceil_boundary(text, text.len() - budget / 2);
    (
        &text[..head_end],
        &text[tail_start..],
        tail_start - head_end,
    )
}

fn notice(omitted: usize, by_tool: u64, locator: &str, hint: &str) -> String {
    if by_tool == 0 {
        return format!(
            "(Omitted {omitted} bytes. Full formatted result stored at: {locator}. {hint})"
        );
    }
    let all = by_tool.saturating_add(omitted as u64);
    format!(
        "(Omitted {all} bytes: {by_tool} by the tool's own output cap and {omitted} in this preview. The result as the tool kept it is stored at: {locator}. {hint})"
    )
}

/// Bytes a tool itself left out of its result (its own bounded capture): the sum of the
/// `omittedBytes` numbers at the top level of its value and in the objects directly under it
/// (`bash` reports one per stream, `stdout.omittedBytes` and `stderr.omittedBytes`); 0 when
/// there are none.
pub fn tool_omitted_bytes(value: Option<&serde_json::Value>) -> u64 {
    let Some(obj) = value.and_then(serde_json::Value::as_object) else {
        return 0;
    };
    let own = |o: &serde_json::Map<String, serde_json::Value>| {
        o.get("omittedBytes")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    obj.values()
        .filter_map(serde_json::Value::as_object)
        .map(own)
        .fold(own(obj), u64::saturating_add)
}

fn gap(omitted: usize) -> String {
    format!("\n[... {omitted} bytes omitted ...]\n")
}

/// Builds the bounded replacement of `text` (see the module docs), or `None` when even the
/// notice does not fit in `cap` bytes. `by_tool`: bytes the tool itself already left out
/// ([`tool_omitted_bytes`]), counted into the notice.
pub fn replacement(
    text: &str,
    cap: usize,
    locator: &str,
    hint: &str,
    by_tool: u64,
) -> Option<String> {
    let total = text.len();
    // Reserve the notice and gap priced at the worst-case omission (all bytes): their digit
    // count bounds the real one, so the result never exceeds `cap`.
    let reserve = notice(total, by_tool, locator, hint).len() + 2 + gap(total).len();
    let budget = cap.checked_sub(reserve)?;
    let (head, tail, omitted) = head_tail(text, budget);
    let out = format!(
        "{head}{}{tail}\n\n{}",
        gap(omitted),
        notice(omitted, by_tool, locator, hint)
    );
    (out.len() <= cap).then_some(out)
}

/// All-text content flattened, or `None` if any block is not text.
fn flatten(content: &[ContentBlock]) -> Option<String> {
    let mut s = String::new();
    for b in content {
        s.push_str(b.as_text()?);
    }
    Some(s)
}

/// Registers the policy listener on `ctx` (prepended, so it bounds whatever the rest of the
/// chain accepted).
///
/// # Errors
/// Kernel registration errors (inactive scope).
pub fn install(
    ctx: &Context,
    store: Arc<LocalSpillStore>,
    max_inline_bytes: usize,
) -> Result<Registration, BoxError> {
    let reg = ctx.on_waterfall_with::<ToolsPostExecute, _, _>(
        ListenOptions::prepend(),
        move |ev, next| {
            let store = store.clone();
            let exec = ev.exec.clone();
            let result = ev.result.clone();
            async move {
                let decision = next.run(ev).await?;
                // `read`: no read → spill → read loop; a result whose tool stored its whole
                // output itself is already cut once, with its own notice
                if exec.name == "read" || !declared_output_files(result.value()).is_empty() {
                    return Ok(decision);
                }
                let (content, contexts) = match &decision {
                    PostToolDecision::Accept {
                        additional_contexts,
                    } => (result.content().to_vec(), additional_contexts.clone()),
                    PostToolDecision::ReplaceContent {
                        content,
                        additional_contexts,
                    } => (content.clone(), additional_contexts.clone()),
                    _ => return Ok(decision),
                };
                let Some(text) = flatten(&content) else {
                    return Ok(decision);
                };
                if text.len() <= max_inline_bytes {
                    return Ok(decision);
                }
                let Some(caller) = exec.caller.as_ref() else {
                    tracing::warn!(target: "dsh_spill", "no session owner for {}; keeping the inline content", exec.name);
                    return Ok(decision);
                };
                let req = SaveTextSpill {
                    session_id: caller.session_id.as_str().to_owned(),
                    header: Some(caller.session.header().clone()),
                    source: SpillSource {
                        tool_name: exec.name.clone(),
                        call_id: exec.call_id.as_str().to_owned(),
                        label: "result".to_owned(),
                    },
                    suggested_name: format!("{}.txt", exec.name),
                    content: text,
                };
                let saved = tokio::task::spawn_blocking(move || {
                    let r = store.save_text(&req);
                    (r, req.content)
                })
                .await;
                let (saved, text) = match saved {
                    Ok((Ok(r), text)) => (r, text),
                    Ok((Err(e), _)) => {
                        tracing::warn!(target: "dsh_spill", "saving {} failed: {e}; keeping the inline content", exec.name);
                        return Ok(decision);
                    }
                    Err(e) => {
                        tracing::warn!(target: "dsh_spill", "spill task failed: {e}; keeping the inline content");
                        return Ok(decision);
                    }
                };
                let by_tool = tool_omitted_bytes(result.value());
                match replacement(
                    &text,
                    max_inline_bytes,
                    &saved.locator,
                    &saved.retrieval_hint,
                    by_tool,
                ) {
                    Some(t) => Ok(PostToolDecision::ReplaceContent {
                        content: vec![ContentBlock::text(t)],
                        additional_contexts: contexts,
                    }),
                    None => {
                        tracing::warn!(target: "dsh_spill", "spill notice for {} exceeds max_inline_bytes; keeping the inline content", exec.name);
                        Ok(decision)
                    }
                }
            }
        },
    )?;
    Ok(reg)
}
