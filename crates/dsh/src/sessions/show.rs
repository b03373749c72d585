//! `dsh sessions show ID [--json] [--seq]`: a readable transcript of the seam's `inspect` view
//! (stored events plus the in-memory crash-repair closers a load would add), or every event as a
//! JSON line. With `--seq`, every transcript line starts with the seq of the event it shows
//! (`#12  > prompt`), the number `sessions fork --at SEQ` takes.

use std::fmt::Write as _;

use anyhow::Result;
use dsh_llm::{ContentBlock, MessageSource};
use dsh_persistence::SessionHeader;
use dsh_session::{EventData, SessionEvent};

use super::fmt::{clip, fmt_utc};
use super::{emit, storage_error};
use crate::app::Storage;

/// Runs `show`.
pub(super) fn run(storage: &Storage, id: &str, json: bool, seq: bool) -> Result<i32> {
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
        emit(&transcript(&loaded.header, &loaded.events, seq, &usage));
    }
    Ok(0)
}

/// The transcript; with `seq`, each non-empty line of an event starts with `#<seq>` padded to
/// the widest seq; each turn end is followed by its usage line from `usage`.
fn transcript(
    header: &SessionHeader,
    events: &[SessionEvent],
    seq: bool,
    usage: &[dsh_usage::TurnUsage],
) -> String {
    let mut head = String::new();
    let _ = writeln!(
        head,
        "session {}  created {} UTC  cwd {}",
        header.id,
        fmt_utc(header.created_at),
        header.cwd.as_deref().unwrap_or("-")
    );
    if let Some(p) = &header.parent_session {
        let _ = writeln!(
            head,
            "forked from {p} (seed: {} events)",
            header.seed_length.unwrap_or(0)
        );
    }
    let width = events.last().map_or(1, |e| e.seq.to_string().len()) + 1;
    let mut all = head;
    for e in events {
        let mut out = String::new();
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
        // the turn's usage and cost
        if let EventData::TurnEnd(t) = &e.data
            && let Some(line) = crate::usage::turn_line(usage, t.turn)
        {
            let _ = writeln!(out, "{line}");
        }
        if seq {
            for line in out.split_inclusive('\n') {
                if line.trim().is_empty() {
                    all.push_str(line);
                } else {
                    let _ = write!(all, "{:<width$}  {line}", format!("#{}", e.seq));
                }
            }
        } else {
            all.push_str(&out);
        }
    }
    all
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
