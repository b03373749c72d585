//! Rendering a running session: streamed answer text on stdout, and on stderr each tool call
//! and its finished result ([`crate::toolview`]: the bash `description`, exit status and output
//! tail, `todo_write` as a checklist) in text mode, or every session event as a JSON line
//! (`--json`); in both formats one stderr line per model-request retry (cause, retry k/n,
//! wait) and per provider wait refused as too long (see [`retry_line`]), and `  ! <text>` per
//! provider notice (invalid UTF-8 from the provider).
//!
//! On a terminal (stderr), text mode also shows the model's reasoning dimmed and a spinner
//! with the elapsed time while the model thinks ([`crate::spinner`]); on a pipe neither, and no
//! escape sequence is written. With [`attach_final_only`] (`dsh exec` when stdout is not a
//! terminal) no answer text is written to stdout at all: the text of a message that calls tools
//! (narration) goes to stderr, and the caller writes the final answer once the run ends.
//! See docs/tools.md, "What the terminal shows".

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use dsh_kernel::{Context, ListenOptions, Registration};
use dsh_llm::{StreamChunk, TokenUsage};
use dsh_llm_deepseek::LlmProviderNotice;
use dsh_llm_retry::{LlmRetryNotice, RetryNotice, RetryNoticeKind};
use dsh_session::{EventData, SessionEvent, SessionEventEmitted, TurnEndReason};

use crate::spinner::Spinner;
use crate::toolview;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Answer text on stdout, tool activity on stderr.
    Text,
    /// JSON Lines on stdout: every session event, then a `result` line.
    Json,
}

/// SGR "faint" (dimmed text), written before reasoning on a terminal.
const DIM: &str = "\x1b[2m";
/// SGR reset, written after it.
const RESET: &str = "\x1b[0m";

#[derive(Default)]
struct State {
    /// The last byte written to stdout was not a newline.
    mid_line: bool,
    /// Stdout is not a terminal: answer text is held per attempt and written when the attempt
    /// completes, so a script reading stdout never sees the partial text of a failed attempt.
    buffered: bool,
    /// Held answer text of the current attempt (only when `buffered`).
    pending: String,
    /// Answer text never goes to stdout: narration goes to stderr, the caller writes the final
    /// answer (implies `buffered`).
    final_only: bool,
    /// The text of the last message that called no tools (`final_only`): the answer, unless
    /// the turn goes on, when it becomes narration.
    held: Option<String>,
    /// Stderr is a terminal: reasoning is shown, dimmed.
    dim: bool,
    /// Dimmed reasoning was written and its line not yet ended.
    reasoning_open: bool,
    /// Name and raw arguments of each call seen, by call id (for its result line).
    calls: HashMap<String, (String, String)>,
    /// The thinking spinner (inert unless stderr is a terminal).
    spinner: Spinner,
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
        if self.final_only {
            return;
        }
        let text = std::mem::take(&mut self.pending);
        self.write_out(&text);
    }

    /// Ends open dimmed reasoning on stderr (attributes reset, line ended).
    fn close_reasoning(&mut self) {
        if self.reasoning_open {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(RESET.as_bytes());
            let _ = err.write_all(b"\n");
            let _ = err.flush();
            self.reasoning_open = false;
        }
    }

    /// Writes `lines` to stderr, one per line, with the spinner and reasoning out of the way.
    fn say(&mut self, lines: &[String]) {
        self.spinner.clear();
        self.close_reasoning();
        let mut err = std::io::stderr().lock();
        for l in lines {
            let _ = writeln!(err, "{l}");
        }
        let _ = err.flush();
    }

    /// Writes narration (answer text of a message that goes on with tools) to stderr.
    fn narrate(&mut self, text: &str) {
        let text = text.trim_end_matches('\n');
        if !text.trim().is_empty() {
            self.say(&[text.to_owned()]);
        }
    }
}

/// A renderer's listeners (session events and retry notices); dropping it stops rendering.
pub struct Attached {
    _events: Registration,
    _retries: Registration,
    _provider: Registration,
    spinner: Spinner,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.spinner.stop();
    }
}

/// Subscribes a renderer for session `id`; dropping the returned [`Attached`] stops it. The
/// flag is true while stdout is mid-line. Answer text streams to stdout (held per attempt when
/// stdout is not a terminal).
///
/// # Errors
/// The kernel refused the listener (root disposed).
pub fn attach(
    ctx: &Context,
    id: String,
    format: Format,
) -> Result<(Attached, Arc<Mutex<bool>>), dsh_kernel::KernelError> {
    attach_inner(ctx, id, format, false)
}

/// As [`attach`], but in text mode no answer text reaches stdout when stdout is not a
/// terminal: the text of each message that calls tools is written to stderr as narration, and
/// the caller writes the final answer ([`summarize_run`]'s `text`) when the run ends. On a
/// terminal this is [`attach`]. Used by `dsh exec`.
///
/// # Errors
/// The kernel refused the listener (root disposed).
pub fn attach_final_only(
    ctx: &Context,
    id: String,
    format: Format,
) -> Result<(Attached, Arc<Mutex<bool>>), dsh_kernel::KernelError> {
    attach_inner(ctx, id, format, true)
}

fn attach_inner(
    ctx: &Context,
    id: String,
    format: Format,
    final_only: bool,
) -> Result<(Attached, Arc<Mutex<bool>>), dsh_kernel::KernelError> {
    let buffered = !std::io::stdout().is_terminal();
    let spinner = if format == Format::Text {
        Spinner::for_stderr()
    } else {
        Spinner::inert()
    };
    let state = Arc::new(Mutex::new(State {
        buffered,
        final_only: final_only && buffered,
        dim: format == Format::Text && std::io::stderr().is_terminal(),
        spinner: spinner.clone(),
        ..State::default()
    }));
    let mid = Arc::new(Mutex::new(false));
    let mid_out = mid.clone();
    let retry_id = id.clone();
    let retry_spinner = spinner.clone();
    let retries = ctx.on_emit_with::<LlmRetryNotice>(ListenOptions::global(), move |n| {
        if n.session_id == retry_id {
            retry_spinner.quiet(|| {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "{}", retry_line(n));
            });
        }
    })?;
    let notice_id = id.clone();
    let notice_spinner = spinner.clone();
    let provider = ctx.on_emit_with::<LlmProviderNotice>(ListenOptions::global(), move |n| {
        if n.session_id.as_deref().is_none_or(|s| s == notice_id) {
            notice_spinner.quiet(|| {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "  ! {}", n.message);
            });
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
            spinner,
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

/// The text and error flag of a tool result message (its text parts joined).
fn result_text(r: &dsh_session::ToolResultData) -> (String, bool) {
    let mut text = String::new();
    let mut is_error = false;
    for b in &r.message.content {
        if let dsh_llm::ContentBlock::ToolResult {
            content,
            is_error: err,
            ..
        } = b
        {
            is_error |= *err == Some(true);
            for c in content {
                if let Some(t) = c.as_text() {
                    text.push_str(t);
                }
            }
        }
    }
    (text, is_error)
}

fn render_text(st: &mut State, event: &SessionEvent) {
    match &event.data {
        EventData::StepStart(_) => st.spinner.start(),
        EventData::AssistantChunk(c) => {
            st.spinner.clear();
            match &c.chunk {
                StreamChunk::ReasoningDelta { text, .. } if !text.is_empty() && st.dim => {
                    if st.mid_line {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(b"\n");
                        let _ = out.flush();
                        st.mid_line = false;
                    }
                    let mut err = std::io::stderr().lock();
                    if !st.reasoning_open {
                        let _ = err.write_all(DIM.as_bytes());
                    }
                    let _ = err.write_all(text.as_bytes());
                    let _ = err.flush();
                    st.reasoning_open = true;
                }
                StreamChunk::TextDelta { text, .. } if !text.is_empty() => {
                    st.close_reasoning();
                    if st.buffered {
                        st.pending.push_str(text);
                    } else {
                        st.write_out(text);
                    }
                }
                StreamChunk::Finish { reason, .. } => {
                    st.close_reasoning();
                    let failure = reason.failure();
                    if let Some(failure) = &failure
                        && !st.pending.is_empty()
                    {
                        // A failed attempt's partial text never reaches a piped stdout.
                        st.pending.clear();
                        st.say(&[format!(
                            "  ✗ a partial answer was discarded: {} ({})",
                            failure.message, failure.code
                        )]);
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
                        st.say(&[format!(
                            "  ✗ the answer above was cut off: {} ({})",
                            failure.message, failure.code
                        )]);
                    }
                }
                _ => {}
            }
        }
        EventData::AssistantMessage(m) if st.final_only => {
            st.pending.clear();
            if let Some(earlier) = st.held.take() {
                // The turn went on after a message without tool calls: it was narration.
                st.narrate(&earlier);
            }
            let text = m.message.text();
            if m.message.tool_calls().next().is_some() {
                st.narrate(&text);
            } else {
                st.held = Some(text);
            }
        }
        EventData::ToolCall(c) => {
            st.spinner.clear();
            st.close_reasoning();
            st.flush_pending();
            if st.mid_line {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(b"\n");
                let _ = out.flush();
                st.mid_line = false;
            }
            st.calls.insert(
                c.call_id.as_str().to_owned(),
                (c.name.clone(), c.arguments.clone()),
            );
            let lines = toolview::call_lines(&c.name, &c.arguments);
            st.say(&lines);
        }
        EventData::ToolResult(r) => {
            let (text, is_error) = result_text(r);
            let (name, args) = r
                .call_id()
                .and_then(|id| st.calls.remove(id.as_str()))
                .unwrap_or_default();
            let lines = toolview::result_lines(&name, &args, &text, is_error);
            st.say(&lines);
        }
        EventData::TodoWrite(t) => {
            let lines = toolview::checklist(&t.todos);
            st.say(&lines);
        }
        EventData::TurnEnd(_) => {
            st.spinner.clear();
            st.close_reasoning();
            st.flush_pending();
        }
        EventData::AssistantMessage(_) => st.flush_pending(),
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
