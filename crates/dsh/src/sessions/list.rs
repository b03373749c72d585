//! `dsh sessions list [--json]`: the seam's session summaries (first prompt and turn count from
//! the parsed events), newest first by last activity, then creation time, then id
//! (`dsh_persistence::sort_by_activity`, the order `/sessions` uses too). A fork is marked
//! `fork of <parent id>` in the table and carries `parentSession` in the JSON.

use dsh_kernel::ErrorCode;
use std::fmt::Write as _;

use anyhow::{Result, anyhow};
use dsh_persistence::SessionSummary;
use serde_json::{Value, json};

use super::emit;
use super::fmt::{clip, fmt_utc};
use crate::app::Storage;

/// Runs `list`.
pub(super) fn run(storage: &Storage, json: bool) -> Result<i32> {
    let mut rows = storage
        .store()?
        .summaries()
        .map_err(|e| anyhow!("listing sessions: {e} ({})", e.code()))?;
    dsh_persistence::sort_by_activity(&mut rows);
    emit(&render(&rows, json));
    Ok(0)
}

/// The JSON array (`[{id, title, turns, lastActivity, createdAt, cwd, parentSession?}]`) or the
/// table.
fn render(rows: &[SessionSummary], json: bool) -> String {
    if json {
        let arr: Vec<Value> = rows
            .iter()
            .map(|r| {
                let mut o = json!({
                    "id": r.header.id,
                    "title": r.title,
                    "turns": r.turns,
                    "lastActivity": r.last_activity,
                    "createdAt": r.header.created_at,
                    "cwd": r.header.cwd,
                });
                if let Some(p) = &r.header.parent_session {
                    o["parentSession"] = json!(p);
                }
                o
            })
            .collect();
        return format!("{}\n", Value::Array(arr));
    }
    if rows.is_empty() {
        return "no stored sessions\n".to_owned();
    }
    let id_w = rows
        .iter()
        .map(|r| r.header.id.chars().count())
        .max()
        .unwrap_or(2)
        .max(2);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<id_w$}  {:<16}  {:>5}  TITLE / CWD",
        "ID", "LAST ACTIVITY", "TURNS"
    );
    for r in rows {
        let mut title = if r.title.is_empty() {
            "(no prompt)".to_owned()
        } else {
            clip(&r.title, 60)
        };
        if let Some(parent) = &r.header.parent_session {
            title = format!("{title}  [fork of {parent}]");
        }
        let _ = writeln!(
            out,
            "{:<id_w$}  {:<16}  {:>5}  {}  ({})",
            r.header.id,
            fmt_utc(r.last_activity),
            r.turns,
            title,
            r.header.cwd.as_deref().unwrap_or("-")
        );
    }
    out
}
