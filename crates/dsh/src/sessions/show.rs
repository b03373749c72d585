//! `dsh sessions show ID [--json]`: a readable transcript of the seam's `inspect` view (stored
//! events plus the in-memory crash-repair closers a load would add), or every event as a JSON
//! line.

use std::fmt::Write as _;

use anyhow::Result;
use dsh_llm::{ContentBlock, MessageSource};
use dsh_persistence::SessionHeader;
use dsh_session::{EventData, SessionEvent};

use super::fmt::{clip, fmt_utc};
use super::{emit, storage_error};
use crate::app::Storage;

/// Runs `show`.
pub(super) fn run(storage: &Storage, id: &str, json: bool) -> Result<i32> {
    let loaded = storage
        .store()?
        .inspect(id)
        .map_err(|e| storage_error(id, e))?;
    if json {
        let mut out = String::new();
        for e in &loaded.events {
            out.push_str(&e.to_json());
            out.push('\n');
        }
        emit(&out);
    } else {
        let catalog = crate::usage::catalog(&storage.root());
        let usage = crate::usage::turns(&loaded.events, &catalog);
        emit(&transcript(&loaded.header, &loaded.events, &usage));
    }
    Ok(0)
}

fn transcript(
    header: &SessionHeader,
    events: &[SessionEvent],
    usage: &[dsh_usage::TurnUsage],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "session {}  created {} UTC  cwd {}",
        header.id,
        fmt_utc(header.created_at),
        header.cwd.as_deref().unwrap_or("-")
    );
    if let Some(p) = &header.parent_session {
        let _ = writeln!(
            out,
            "forked from {p} (seed: {} events)",
            header.seed_length.unwrap_or(0)
        );
    }
    for e in events {
        match &e.data {
            EventData::TurnStart(t) => {
                let _ = writeln!(out, "\n── turn {}", t.turn);
            }
            EventData::UserMessage(m) if matches!(m.source, MessageSource::User) => {
                for line in m.text().lines() {
                    let _ = writeln!(out, "> {line}");
                }
            }
            EventData::AssistantMessage(m) => {
                let text = m.message.text();
                if !text.is_empty() {
                    out.push_str(&text);
                    if !text.ends_with('\n') {
                        out.push('\n');
                    }
                }
            }
            EventData::ToolCall(c) => {
                let _ = writeln!(
                    out,
                    "• {} {}",
                    c.name,
                    crate::render::summarize_args(&c.arguments)
                );
            }
            EventData::ToolResult(r) => {
                let (text, is_error) = r
                    .message
                    .content
                    .iter()
                    .find_map(|b| match b {
                        ContentBlock::ToolResult {
                            content, is_error, ..
                        } => Some((
                            content
                                .iter()
                                .filter_map(ContentBlock::as_text)
                                .collect::<Vec<_>>()
                                .join("\n"),
                            *is_error == Some(true),
                        )),
                        _ => None,
                    })
                    .unwrap_or_default();
                let mut lines = text.lines();
                let first = clip(lines.next().unwrap_or_default(), 100);
                let more = lines.count();
                let mark = if is_error { "✗" } else { "→" };
                if more > 0 {
                    let _ = writeln!(out, "  {mark} {first} (+{more} lines)");
                } else {
                    let _ = writeln!(out, "  {mark} {first}");
                }
            }
            EventData::TurnEnd(t) => match &t.reason {
                dsh_session::TurnEndReason::Error { error } => {
                    let _ = writeln!(
                        out,
                        "── turn {} end: error: {} ({})",
                        t.turn, error.message, error.code
                    );
                }
                reason => {
                    let _ = writeln!(out, "── turn {} end: {}", t.turn, reason.kind());
                }
            },
            _ => {}
        }
        // the turn's usage and cost (issue 16)
        if let EventData::TurnEnd(t) = &e.data
            && let Some(line) = crate::usage::turn_line(usage, t.turn)
        {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn args_summary() {
        use crate::render::summarize_args;
        assert_eq!(summarize_args(r#"{"command":"ls\n-la"}"#), "ls ⏎ -la");
        assert_eq!(
            summarize_args(r#"{"path":"src","pattern":"fn main"}"#),
            "fn main"
        );
        assert_eq!(summarize_args(r#"{"a":1}"#), r#"{"a":1}"#);
    }
}
