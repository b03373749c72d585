//! Rendering a running session: streamed answer text on stdout, one compact line per tool
//! call on stderr (text mode), or every session event as a JSON line (`--json`); in both
//! formats one stderr line per model-request retry (cause, retry k/n, wait) and per provider
//! wait refused as too long (see [`retry_line`]), and `  ! <text>` per provider notice (invalid
//! UTF-8 from the provider).

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use dsh_kernel::{Context, ListenOptions, Registration};
use dsh_llm::{StreamChunk, TokenUsage};
use dsh_llm_deepseek::LlmProviderNotice;
use dsh_llm_retry::{LlmRetryNotice, RetryNotice, RetryNoticeKind};
use dsh_session::{EventData, SessionEvent, SessionEventEmitted, TurnEndReason};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Answer text on stdout, tool activity on stderr.
    Text,
    /// JSON Lines on stdout: every session event, then a `result` line.
    Json,
}

#[derive(Default)]
struct State {
    /// The last byte written to stdout was not a newline.
    mid_line: bool,
    /// Stdout is not a terminal: answer text is held per attempt and written when the attempt
    /// completes, so a script reading stdout never sees the partial text of a failed attempt.
    buffered: bool,
    /// Held answer text of the current attempt (only when `buffered`).
    pending: String,
}

impl State {
    fn write_out(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        self.mid_line = !text.ends_with('\n');
    }

    fn flush_pending(&mut self) {
        let text = std::mem::take(&mut self.pending);
        self.write_out(&text);
    }
}

/// A renderer's listeners (session events and retry notices); dropping it stops rendering.
pub struct Attached {
    _events: Registration,
    _retries: Registration,
    _provider: Registration,
}

/// Subscribes a renderer for session `id`; dropping the returned [`Attached`] stops it. The
/// flag is true while stdout is mid-line.
///
/// # Errors
/// The kernel refused the listener (root disposed).
pub fn attach(
    ctx: &Context,
    id: String,
    format: Format,
) -> Result<(Attached, Arc<Mutex<bool>>), dsh_kernel::KernelError> {
    let state = Arc::new(Mutex::new(State {
        buffered: !std::io::stdout().is_terminal(),
        ..State::default()
    }));
    let mid = Arc::new(Mutex::new(false));
    let mid_out = mid.clone();
    let retry_id = id.clone();
    let retries = ctx.on_emit_with::<LlmRetryNotice>(ListenOptions::global(), move |n| {
        if n.session_id == retry_id {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", retry_line(n));
        }
    })?;
    let notice_id = id.clone();
    let provider = ctx.on_emit_with::<LlmProviderNotice>(ListenOptions::global(), move |n| {
        if n.session_id.as_deref().is_none_or(|s| s == notice_id) {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "  ! {}", n.message);
        }
    })?;
    let reg = ctx.on_emit_with::<SessionEventEmitted>(ListenOptions::global(), move |n| {
        if n.session.id() != id {
            return;
        }
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        match format {
            Format::Json => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", n.event.to_json());
                let _ = out.flush();
            }
            Format::Text => render_text(&mut st, &n.event),
        }
        *mid_out.lock().unwrap_or_else(|e| e.into_inner()) = st.mid_line;
    })?;
    Ok((
        Attached {
            _events: reg,
            _retries: retries,
            _provider: provider,
        },
        mid,
    ))
}

/// The stderr line of a retry notice (no trailing newline):
/// `  ↻ <failure message> (<code>); retry k/n in <ms> ms` (`retry k` in always mode; `
/// (Retry-After)` appended when the wait is the provider's), or `  ✗ not retrying: the provider
/// asks to wait <ms> ms, more than [agent] max_retry_wait_ms = <ms> ms`.
pub(crate) fn retry_line(n: &RetryNotice) -> String {
    match &n.kind {
        RetryNoticeKind::Retrying {
            retry,
            of,
            delay_ms,
            from_provider,
        } => {
            let count = match of {
                Some(of) => format!("{retry}/{of}"),
                None => retry.to_string(),
            };
            let source = if *from_provider { " (Retry-After)" } else { "" };
            format!(
                "  ↻ {} ({}); retry {count} in {delay_ms:.0} ms{source}",
                n.failure.message, n.failure.code
            )
        }
        RetryNoticeKind::WaitTooLong {
            asked_ms,
            ceiling_ms,
        } => {
            // An overflowing Retry-After arrives saturated.
            let asked = if *asked_ms >= dsh_llm_deepseek::SATURATED_WAIT_MS {
                "longer than dsh can represent".to_owned()
            } else {
                format!("{asked_ms} ms")
            };
            format!(
                "  ✗ not retrying: the provider asks to wait {asked}, more than [agent] \
                 max_retry_wait_ms = {ceiling_ms} ms"
            )
        }
    }
}

/// The argument fields a one-line summary of a tool call shows, first present wins: whatever
/// the tool, its command, file path, pattern, path, URL or query says most about the call.
const SUMMARY_FIELDS: &[&str] = &["command", "file_path", "pattern", "path", "url", "query"];

/// One line (at most 120 characters) summarizing a tool call's JSON arguments: the first string
/// field of [`SUMMARY_FIELDS`], else the raw arguments; newlines shown as ` ⏎ `.
pub(crate) fn summarize_args(args: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(args).unwrap_or(serde_json::Value::Null);
    let s = SUMMARY_FIELDS
        .iter()
        .find_map(|k| v.get(*k).and_then(|x| x.as_str()))
        .unwrap_or(args);
    let one_line: String = s.replace('\n', " ⏎ ");
    if one_line.chars().count() > 120 {
        let cut: String = one_line.chars().take(117).collect();
        format!("{cut}...")
    } else {
        one_line
    }
}

fn render_text(st: &mut State, event: &SessionEvent) {
    match &event.data {
        EventData::AssistantChunk(c) => match &c.chunk {
            StreamChunk::TextDelta { text, .. } if !text.is_empty() => {
                if st.buffered {
                    st.pending.push_str(text);
                } else {
                    st.write_out(text);
                }
            }
            StreamChunk::Finish { reason, .. } => {
                let failure = reason.failure();
                if let Some(failure) = &failure
                    && !st.pending.is_empty()
                {
                    // A failed attempt's partial text never reaches a piped stdout.
                    st.pending.clear();
                    let mut err = std::io::stderr().lock();
                    let _ = writeln!(
                        err,
                        "  ✗ a partial answer was discarded: {} ({})",
                        failure.message, failure.code
                    );
                } else {
                    st.flush_pending();
                }
                if let Some(failure) = failure
                    && st.mid_line
                {
                    // A failed attempt after partial text: end that text so a retried answer
                    // starts on a line of its own, and say on stderr that it was cut off.
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(b"\n");
                    let _ = out.flush();
                    st.mid_line = false;
                    let mut err = std::io::stderr().lock();
                    let _ = writeln!(
                        err,
                        "  ✗ the answer above was cut off: {} ({})",
                        failure.message, failure.code
                    );
                }
            }
            _ => {}
        },
        EventData::ToolCall(c) => {
            st.flush_pending();
            if st.mid_line {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(b"\n");
                let _ = out.flush();
                st.mid_line = false;
            }
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "• {} {}", c.name, summarize_args(&c.arguments));
        }
        EventData::ToolResult(r)
            if r.message.content.iter().any(|b| {
                matches!(
                    b,
                    dsh_llm::ContentBlock::ToolResult {
                        is_error: Some(true),
                        ..
                    }
                )
            }) =>
        {
            let text = r
                .message
                .content
                .iter()
                .find_map(|b| match b {
                    dsh_llm::ContentBlock::ToolResult { content, .. } => {
                        content.iter().find_map(|c| c.as_text().map(str::to_owned))
                    }
                    _ => None,
                })
                .unwrap_or_default();
            let first = text.lines().next().unwrap_or_default();
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "  ✗ {first}");
        }
        EventData::TurnEnd(_) | EventData::AssistantMessage(_) => st.flush_pending(),
        _ => {}
    }
}

/// What the last turn of a run produced.
#[derive(Debug, Clone, Default)]
pub struct TurnSummary {
    /// The turn's end reason (`None` when no turn ran).
    pub reason: Option<TurnEndReason>,
    /// The final answer: text of the turn's last assistant message.
    pub text: String,
    /// Token usage summed over the turn's assistant messages.
    pub usage: TokenUsage,
}

/// Summarizes the turns of `events` from `from_seq` on (the run's turns).
pub fn summarize_run(events: &[Arc<SessionEvent>], from_seq: u64) -> TurnSummary {
    let mut s = TurnSummary::default();
    for e in events.iter().filter(|e| e.seq >= from_seq) {
        match &e.data {
            EventData::AssistantMessage(m) => {
                if let Some(u) = &m.usage {
                    s.usage.add(u);
                }
                let t = m.message.text();
                if !t.is_empty() || m.message.tool_calls().next().is_none() {
                    s.text = t;
                }
            }
            EventData::TurnEnd(t) => s.reason = Some(t.reason.clone()),
            _ => {}
        }
    }
    s
}
