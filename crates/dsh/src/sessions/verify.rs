//! `dsh sessions verify PATH [--json]`: the seam's verification of a session file — read by the
//! registered backend that recognizes it (a JSONL log, plain or zstd-framed; a session database
//! yields one report per session) — or, when `PATH` is not a file but a stored session id, of
//! that stored session. Checks against the event types a resume would accept (every booted
//! plugin's declarations). Never writes.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use dsh_persistence::{PersistenceError, RawItem, RawLog, VerifyError, VerifyReport, verify_log};
use serde_json::{Value, json};

use super::emit;
use crate::app::{Storage, UsageError};

/// Runs `verify`: exit 0 only when every report is clean.
pub(super) fn run(storage: &Storage, path: &Path, json: bool) -> Result<i32> {
    let reports = reports(storage, path)?;
    let mut out = String::new();
    for r in &reports {
        if json {
            let _ = writeln!(out, "{}", to_json(r));
        } else {
            out.push_str(&to_text(r));
        }
    }
    emit(&out);
    Ok(if reports.iter().all(VerifyReport::ok) {
        0
    } else {
        1
    })
}

/// The reports of `path`: a file read by the backend that recognizes it, else a stored session
/// of that id, else one report holding the read failure.
pub(super) fn reports(storage: &Storage, path: &Path) -> Result<Vec<VerifyReport>> {
    // A bare name that is no file may be a stored id.
    if !path.exists()
        && path.components().count() == 1
        && let Some(id) = path.to_str()
        && let Ok(store) = storage.store()
        && store.list().is_ok_and(|l| l.iter().any(|h| h.id == id))
    {
        let report = store
            .verify_stored(id, storage.types())
            .map_err(|e| super::storage_error(id, e))?;
        return Ok(vec![report]);
    }
    if !path.exists() {
        return Err(UsageError(format!(
            "{}: no such file, and no stored session has that id (see `dsh sessions list`)",
            path.display()
        ))
        .into());
    }
    Ok(read(storage, path)?
        .into_iter()
        .map(|raw| verify_log(raw, storage.types()))
        .collect())
}

/// The raw logs of a file; a file no backend can read becomes one log holding the failure.
pub(super) fn read(storage: &Storage, path: &Path) -> Result<Vec<RawLog>> {
    Ok(match storage.backends()?.read_file(path) {
        Ok(logs) => logs,
        Err(e) => {
            let e = match e {
                PersistenceError::Io { source, .. } => VerifyError {
                    code: "SESSION_PERSISTENCE_IO".into(),
                    message: format!("cannot open: {source}"),
                    line: None,
                },
                other => VerifyError::from_error(&other, None),
            };
            vec![RawLog {
                path: path.to_path_buf(),
                items: vec![RawItem::Error(e)],
                ..RawLog::default()
            }]
        }
    })
}

/// `{path, ok, events, errors:[{code,message,line?}], repair:{tornTail, closers:[types]},
/// notes:[…]}`.
pub(super) fn to_json(r: &VerifyReport) -> Value {
    let errors: Vec<Value> = r
        .errors
        .iter()
        .map(|e| {
            let mut o = json!({"code": e.code, "message": e.message});
            if let Some(l) = e.line {
                o["line"] = json!(l);
            }
            o
        })
        .collect();
    json!({
        "path": r.path.display().to_string(),
        "ok": r.ok(),
        "events": r.events.len(),
        "errors": errors,
        "repair": {
            "tornTail": r.torn_tail,
            "closers": r.closers.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        },
        "notes": r.notes,
    })
}

/// The human report (one line per finding, then a verdict line).
pub(super) fn to_text(r: &VerifyReport) -> String {
    let mut out = String::new();
    for e in &r.errors {
        match e.line {
            Some(l) => {
                let _ = writeln!(out, "error {} (line {l}): {}", e.code, e.message);
            }
            None => {
                let _ = writeln!(out, "error {}: {}", e.code, e.message);
            }
        }
    }
    if r.torn_tail {
        let _ = writeln!(
            out,
            "repair: the last line is torn (unterminated); a load drops it"
        );
    }
    if !r.closers.is_empty() {
        let kinds: Vec<&str> = r.closers.iter().map(|e| e.kind.as_str()).collect();
        let _ = writeln!(
            out,
            "repair: the last turn is open; a load closes it with {}",
            kinds.join(", ")
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let verdict = if r.ok() {
        "ok"
    } else if r.errors.is_empty() {
        "loads only after repair"
    } else {
        "errors"
    };
    let _ = writeln!(
        out,
        "{}: {verdict} ({} events)",
        r.path.display(),
        r.events.len()
    );
    out
}
