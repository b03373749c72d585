//! `dsh sessions show ID [--json]`: a readable transcript of the seam's `inspect` view (stored
//! events plus the in-memory crash-repair closers a load would add), or every event as a JSON
//! line.

use std::fmt::Write as _;

use anyhow::Result;
use dsh_llm::{ContentBlock, MessageSource};
use dsh_persistence::SessionHeader;
use dsh_session::{EventData, SessionEvent};
use serde_json::Value;

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
        emit(&transcript(&loaded.header, &loaded.events));
    }
    Ok(0)
}

/// One-line summary of a tool call's arguments (the command, path or pattern when known).
fn summarize_args(name: &str, args: &str) -> String {
    let v: Value = serde_json::from_str(args).unwrap_or(Value::Null);
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let s = match name {
        "bash" => field("command"),
        "read" | "write" | "edit" => field("file_path"),
        "grep" | "glob" => field("pattern"),
        _ => None,
    }
    .unwrap_or_else(|| args.to_owned());
    clip(&s.replace('\n', " ⏎ "), 120)
}

fn transcript(header: &SessionHeader, events: &[SessionEvent]) -> String {
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
                    summarize_args(&c.name, &c.arguments)
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
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_summary() {
        assert_eq!(
            summarize_args("bash", r#"{"command":"ls\n-la"}"#),
            "ls ⏎ -la"
        );
        assert_eq!(summarize_args("other", r#"{"a":1}"#), r#"{"a":1}"#);
    }
}
