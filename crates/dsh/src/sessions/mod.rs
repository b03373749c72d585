//! `dsh sessions …`: list, show, fork, verify and import stored sessions, without booting a
//! kernel (the storage seam comes from [`crate::app::storage`]).
//!
//! - `list [--json]`: headers only (`list_snapshots`), plus a cheap per-log scan (JSONL: one
//!   byte-level pass counting `turn/end` lines; only `user/message` lines are parsed, until the
//!   first one typed by a person). Newest first by last activity (JSONL: file mtime; other
//!   backends: time of the last event).
//! - `show ID [--json]`: a readable transcript, or every event as a JSON line (the `inspect`
//!   view: stored events plus the in-memory crash-repair closers a load would add).
//! - `fork ID [--at SEQ]`: a new stored session seeded with the prefix through `SEQ` (inclusive),
//!   header `{parentSession, seedLength, cwd, delegationDepth}` inherited, first write
//!   `session/end-seed {}`. A prefix ending inside an open turn is refused (exit 2).
//! - `verify PATH [--json]`: checks any plain JSONL session log file read-only: header, envelopes
//!   (records without `seq`/`time`, as in upstream's normalized snapshots, get them restored and
//!   a note says so), packed rows, known types, the live append rules (replay through
//!   `Session::from_restore` / `Session::append_event`), invariants, and the repair a load would
//!   make (torn last line, closers from [`dsh_persistence::interrupted_turn_closers`]). Exit 0
//!   only for a clean log, 1 otherwise.
//! - `import PATH`: stores such a file under its header id (refused if the id exists), applying
//!   the repair a load would make; then `dsh exec --resume ID` continues it.
//!
//! `verify` and `import` check event types against the registry a resume uses: the linked
//! plugins are booted (persistence off) for their declarations (payload validators, inside-turn
//! rules) and torn down afterwards.
//!
//! Spec: `../shared/spec/persistence.md` ("JSONL backend", "Crash recovery"),
//! `../shared/spec/session.md` ("Seeds, fork, end-seed"), `../shared/conformance/README.md`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, anyhow};
use clap::Subcommand;
use dsh_llm::{ContentBlock, MessageSource};
use dsh_persistence::{PersistenceError, SessionHeader, SessionPersistence};
use dsh_session::{
    CoreKind, EventData, EventType, EventTypeRegistry, Session, SessionEvent, check_invariants,
};
use serde_json::{Value, json};

use crate::app::{self, UsageError};
use crate::settings::Config;

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List stored sessions, newest first.
    List {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a stored session's transcript.
    Show {
        /// Session id.
        id: String,
        /// The session's events as JSON lines instead.
        #[arg(long)]
        json: bool,
    },
    /// Fork a stored session into a new one seeded with a prefix of its log.
    Fork {
        /// Session id.
        id: String,
        /// Last seq of the prefix (inclusive; default: the last event).
        #[arg(long, value_name = "SEQ")]
        at: Option<u64>,
    },
    /// Check a session log file (read-only); exit 0 only when it loads cleanly.
    Verify {
        /// Path of a `session.jsonl` file.
        path: PathBuf,
        /// A JSON report object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Copy a session log file into the store (repairing it like a load would).
    Import {
        /// Path of a `session.jsonl` file.
        path: PathBuf,
    },
}

/// Runs a session subcommand; returns the process exit code (0 ok, 1 failure/not clean,
/// 2 usage: unknown id, bad fork boundary).
///
/// # Errors
/// Storage errors (opening the store, corrupt or unsupported logs) and usage errors
/// ([`UsageError`]).
pub async fn run(config: Config, cmd: SessionsCommand) -> Result<i32> {
    match cmd {
        SessionsCommand::List { json } => {
            let storage = app::storage(&config)?;
            let rows = list_rows(storage.as_ref())?;
            emit(&render_list(&rows, json));
            Ok(0)
        }
        SessionsCommand::Show { id, json } => {
            let storage = app::storage(&config)?;
            let loaded = storage.inspect(&id).map_err(|e| storage_error(&id, e))?;
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
        SessionsCommand::Fork { id, at } => {
            let storage = app::storage(&config)?;
            let child = fork(storage.as_ref(), &id, at)?;
            emit(&format!("{child}\n"));
            Ok(0)
        }
        SessionsCommand::Verify { path, json } => {
            let (kernel, registry) = kernel_registry(&config).await;
            let report = verify_file(&path, &registry);
            shutdown(kernel).await;
            let ok = report.ok();
            if json {
                emit(&format!("{}\n", report.to_json()));
            } else {
                emit(&report.to_text());
            }
            Ok(if ok { 0 } else { 1 })
        }
        SessionsCommand::Import { path } => {
            let (kernel, registry) = kernel_registry(&config).await;
            let imported = app::storage(&config)
                .and_then(|storage| import(storage.as_ref(), &path, &registry));
            shutdown(kernel).await;
            match imported? {
                Ok(id) => {
                    emit(&format!("{id}\n"));
                    Ok(0)
                }
                Err(report) => {
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(report.to_text().as_bytes());
                    let _ = writeln!(err, "error: not imported: the log has errors");
                    Ok(1)
                }
            }
        }
    }
}

/// The event-type registry a resume would use: every linked plugin's declarations (payload
/// validators, inside-turn rules) over the upstream catalog. Boots the plugins without
/// persistence; the declarations live as long as the returned [`app::App`] (shut it down after
/// use: disposal unregisters them). Falls back to the bare upstream catalog if boot fails.
async fn kernel_registry(config: &Config) -> (Option<app::App>, Arc<EventTypeRegistry>) {
    let mut config = config.clone();
    config.persist = false;
    match app::App::boot(config).await {
        Ok(app) => {
            let registry = app
                .kernel
                .root()
                .get::<EventTypeRegistry>()
                .unwrap_or_else(EventTypeRegistry::shared_default);
            (Some(app), registry)
        }
        Err(e) => {
            tracing::warn!(error = %e, "plugins failed to start; checking against the upstream catalog only");
            (None, EventTypeRegistry::shared_default())
        }
    }
}

async fn shutdown(app: Option<app::App>) {
    if let Some(app) = app {
        app.shutdown().await;
    }
}

fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn storage_error(id: &str, e: PersistenceError) -> anyhow::Error {
    match e {
        PersistenceError::NotFound { .. } => UsageError(format!("no stored session `{id}`")).into(),
        other => anyhow!("session `{id}`: {other} ({})", other.code()),
    }
}

// ---------------------------------------------------------------------------------------------
// list

/// One row of `dsh sessions list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRow {
    /// The stored header.
    pub header: SessionHeader,
    /// First line of the first prompt typed by a person (empty when none).
    pub title: String,
    /// Number of `turn/end` events.
    pub turns: u64,
    /// Last activity, epoch ms (JSONL: log mtime; else last event time; else `createdAt`).
    pub last_activity: u64,
}

fn list_rows(storage: &dyn SessionPersistence) -> Result<Vec<ListRow>> {
    let snapshots = storage
        .list_snapshots()
        .map_err(|e| anyhow!("listing sessions: {e}"))?;
    let mut rows = Vec::with_capacity(snapshots.len());
    for snap in snapshots {
        let header = snap.header;
        let scanned = match storage.locate(&header) {
            Some(loc) if loc.kind == "jsonl" => scan_jsonl_summary(&loc.path),
            _ => None,
        };
        let (title, turns, last) = match scanned {
            Some(s) => s,
            None => match storage.read_from(&header.id, 0) {
                Ok(events) => summarize_events(&events),
                Err(e) => {
                    tracing::warn!(session = %header.id, error = %e, "cannot read session");
                    (String::new(), 0, None)
                }
            },
        };
        let last_activity = last.unwrap_or(header.created_at).max(header.created_at);
        rows.push(ListRow {
            header,
            title,
            turns,
            last_activity,
        });
    }
    rows.sort_by(|a, b| {
        b.last_activity
            .cmp(&a.last_activity)
            .then(b.header.created_at.cmp(&a.header.created_at))
            .then(a.header.id.cmp(&b.header.id))
    });
    Ok(rows)
}

/// The first-prompt title of a `user/message` payload typed by a person.
fn user_prompt_title(data: &EventData) -> Option<String> {
    match data {
        EventData::UserMessage(m) if matches!(m.source, MessageSource::User) => Some(
            m.text()
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        _ => None,
    }
}

fn summarize_events(events: &[SessionEvent]) -> (String, u64, Option<u64>) {
    let title = events
        .iter()
        .find_map(|e| user_prompt_title(&e.data))
        .unwrap_or_default();
    let turns = events
        .iter()
        .filter(|e| e.kind.core() == Some(CoreKind::TurnEnd))
        .count() as u64;
    (title, turns, events.last().map(|e| e.time))
}

/// One pass over a JSONL log: counts `turn/end` records byte-wise and parses only `user/message`
/// records until the first one typed by a person. `None` when the file cannot be read.
fn scan_jsonl_summary(path: &Path) -> Option<(String, u64, Option<u64>)> {
    const USER: &[u8] = br#"{"type":"user/message""#;
    const TURN_END: &[u8] = br#"{"type":"turn/end""#;
    let file = std::fs::File::open(path).ok()?;
    let mtime = file
        .metadata()
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::with_capacity(4096);
    let mut title: Option<String> = None;
    let mut turns = 0u64;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.starts_with(TURN_END) {
            turns += 1;
        } else if title.is_none() && buf.starts_with(USER) {
            let parsed = serde_json::from_slice::<Value>(&buf)
                .ok()
                .and_then(|v| v.get("data").cloned())
                .and_then(|d| {
                    EventData::from_value(&EventType::from_static("user/message"), d, None).ok()
                });
            if let Some(t) = parsed.as_ref().and_then(user_prompt_title) {
                title = Some(t);
            }
        }
    }
    Some((title.unwrap_or_default(), turns, mtime))
}

/// `YYYY-MM-DD HH:MM` (UTC) of an epoch-ms timestamp.
fn fmt_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        let cut: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    } else {
        s.to_owned()
    }
}

fn render_list(rows: &[ListRow], json: bool) -> String {
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
        let title = if r.title.is_empty() {
            "(no prompt)".to_owned()
        } else {
            clip(&r.title, 60)
        };
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

// ---------------------------------------------------------------------------------------------
// show

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

// ---------------------------------------------------------------------------------------------
// fork

fn fork(storage: &dyn SessionPersistence, id: &str, at: Option<u64>) -> Result<String> {
    let loaded = storage.inspect(id).map_err(|e| storage_error(id, e))?;
    let len = loaded.events.len() as u64;
    let end = match at {
        Some(seq) if seq >= len => {
            return Err(UsageError(format!(
                "--at {seq} is past the end of session `{id}` ({len} events, last seq {})",
                len.saturating_sub(1)
            ))
            .into());
        }
        Some(seq) => seq + 1,
        None => len,
    };
    let prefix: Vec<SessionEvent> = loaded
        .events
        .into_iter()
        .take(usize::try_from(end).unwrap_or(usize::MAX))
        .collect();
    // The prefix must replay cleanly and must not end inside an open turn.
    let probe = Session::from_restore(id, prefix.clone(), Some(loaded.header.clone()))
        .map_err(|e| anyhow!("session `{id}` does not replay: {e} ({})", e.code()))?;
    if let Some((turn, _)) = probe.open_turn() {
        return Err(UsageError(format!(
            "cannot fork `{id}` at seq {}: the prefix ends inside open turn {turn} \
             (pick a seq at or after its turn/end, or before its turn/start)",
            end.saturating_sub(1)
        ))
        .into());
    }
    let child_id = dsh_llm::SessionId::fresh().to_string();
    let mut header = SessionHeader::new(child_id.clone(), dsh_session::now_ms());
    header.cwd = loaded.header.cwd.clone();
    header.parent_session = Some(id.to_owned());
    header.seed_length = Some(prefix.len() as u64);
    header.delegation_depth = Some(loaded.header.depth());
    let mut events = prefix;
    let ends_with_seed = events
        .last()
        .is_some_and(|e| e.kind.core() == Some(CoreKind::EndSeed));
    if !ends_with_seed {
        let time = events
            .last()
            .map_or(header.created_at, |e| e.time)
            .max(header.created_at);
        events.push(SessionEvent {
            kind: EventType::END_SEED,
            seq: events.len() as u64,
            time,
            data: EventData::EndSeed,
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
        });
    }
    Session::from_restore(child_id.clone(), events.clone(), Some(header.clone()))
        .map_err(|e| anyhow!("the forked log does not validate: {e} ({})", e.code()))?;
    let shared: Vec<Arc<SessionEvent>> = events.into_iter().map(Arc::new).collect();
    storage
        .create(header)
        .map_err(|e| anyhow!("creating the fork: {e} ({})", e.code()))?;
    let written = storage.append(&child_id, &shared);
    storage.release(&child_id);
    written.map_err(|e| anyhow!("writing the fork: {e} ({})", e.code()))?;
    Ok(child_id)
}

// ---------------------------------------------------------------------------------------------
// verify

/// One problem found by `verify`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// Stable code (a `PersistenceError`, `SessionError` or invariant code).
    pub code: String,
    /// Human description.
    pub message: String,
    /// 1-based physical line of the file, when known.
    pub line: Option<u64>,
}

/// The result of checking one log file.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// The checked path.
    pub path: PathBuf,
    /// The header, when line 1 parsed as one.
    pub header: Option<SessionHeader>,
    /// Decoded events (committed prefix; seq/time restored where absent), without closers.
    pub events: Vec<SessionEvent>,
    /// Everything wrong.
    pub errors: Vec<VerifyError>,
    /// An unterminated final line that a load would drop.
    pub torn_tail: bool,
    /// Closers a load would append (only computed for a log without errors).
    pub closers: Vec<SessionEvent>,
    /// Informational notes (e.g. restored envelopes).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// True when the log loads cleanly: no errors, no repair.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && !self.torn_tail && self.closers.is_empty()
    }

    fn error(&mut self, code: &str, message: impl Into<String>, line: Option<u64>) {
        self.errors.push(VerifyError {
            code: code.to_owned(),
            message: message.into(),
            line,
        });
    }

    /// `{path, ok, events, errors:[{code,message,line?}], repair:{tornTail, closers:[types]},
    /// notes:[…]}`.
    pub fn to_json(&self) -> Value {
        let errors: Vec<Value> = self
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
            "path": self.path.display().to_string(),
            "ok": self.ok(),
            "events": self.events.len(),
            "errors": errors,
            "repair": {
                "tornTail": self.torn_tail,
                "closers": self.closers.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            },
            "notes": self.notes,
        })
    }

    /// The human report (one line per finding, then a verdict line).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for e in &self.errors {
            match e.line {
                Some(l) => {
                    let _ = writeln!(out, "error {} (line {l}): {}", e.code, e.message);
                }
                None => {
                    let _ = writeln!(out, "error {}: {}", e.code, e.message);
                }
            }
        }
        if self.torn_tail {
            let _ = writeln!(
                out,
                "repair: the last line is torn (unterminated); a load drops it"
            );
        }
        if !self.closers.is_empty() {
            let kinds: Vec<&str> = self.closers.iter().map(|e| e.kind.as_str()).collect();
            let _ = writeln!(
                out,
                "repair: the last turn is open; a load closes it with {}",
                kinds.join(", ")
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        let verdict = if self.ok() {
            "ok"
        } else if self.errors.is_empty() {
            "loads only after repair"
        } else {
            "errors"
        };
        let _ = writeln!(
            out,
            "{}: {verdict} ({} events)",
            self.path.display(),
            self.events.len()
        );
        out
    }
}

/// Inserts `seq`/`time` (events) or `seq0`/`time0` (packed rows) when absent; returns whether it
/// changed the record.
fn restore_envelope(record: &mut Value, next_seq: u64, clock: u64) -> bool {
    let Value::Object(obj) = record else {
        return false;
    };
    let packed = obj
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(dsh_session::packed::is_packed_row_type);
    let (sk, tk) = if packed {
        ("seq0", "time0")
    } else {
        ("seq", "time")
    };
    let mut changed = false;
    if !obj.contains_key(sk) {
        obj.insert(sk.to_owned(), json!(next_seq));
        changed = true;
    }
    if !obj.contains_key(tk) {
        obj.insert(tk.to_owned(), json!(clock));
        changed = true;
    }
    changed
}

/// Checks one session log file without changing it (see the module docs).
pub fn verify_file(path: &Path, registry: &Arc<EventTypeRegistry>) -> VerifyReport {
    let mut r = VerifyReport {
        path: path.to_path_buf(),
        ..VerifyReport::default()
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".zstd") || name.ends_with(".zst") {
        r.error(
            "SESSION_FORMAT_UNSUPPORTED",
            "zstd-framed session logs are not supported by this build (plain JSONL only)",
            None,
        );
        return r;
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            r.error("SESSION_PERSISTENCE_IO", format!("cannot open: {e}"), None);
            return r;
        }
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::with_capacity(4096);
    let hint = path.display().to_string();
    // Line 1: the header.
    match reader.read_until(b'\n', &mut buf) {
        Ok(0) => {
            r.error(
                "SESSION_PERSISTENCE_CORRUPTION",
                "the file is empty",
                Some(1),
            );
            return r;
        }
        Ok(_) => {}
        Err(e) => {
            r.error(
                "SESSION_PERSISTENCE_IO",
                format!("read failed: {e}"),
                Some(1),
            );
            return r;
        }
    }
    if buf.last() != Some(&b'\n') {
        r.error(
            "SESSION_PERSISTENCE_CORRUPTION",
            "the header line is unterminated (no events)",
            Some(1),
        );
    }
    let header_bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
    match dsh_persistence::parse_header_line(header_bytes, &hint, Some(path)) {
        Ok(h) => r.header = Some(h),
        Err(e) => r.error(e.code(), e.to_string(), Some(1)),
    }
    let id = r
        .header
        .as_ref()
        .map_or_else(|| hint.clone(), |h| h.id.clone());
    let mut clock = r.header.as_ref().map_or(0, |h| h.created_at);
    let mut next_seq = 0u64;
    let mut line_no = 1u64;
    let mut restored = 0u64;
    // Line of each event (index = position in `r.events`).
    let mut lines: Vec<u64> = Vec::new();
    loop {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(n) => n,
            Err(e) => {
                r.error(
                    "SESSION_PERSISTENCE_IO",
                    format!("read failed: {e}"),
                    Some(line_no + 1),
                );
                break;
            }
        };
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.last() != Some(&b'\n') {
            r.torn_tail = true;
            break;
        }
        let mut value: Value = match serde_json::from_slice(&buf[..n - 1]) {
            Ok(v) => v,
            Err(e) => {
                r.error(
                    "SESSION_PERSISTENCE_CORRUPTION",
                    format!("unparsable committed record: {e}"),
                    Some(line_no),
                );
                continue;
            }
        };
        if restore_envelope(&mut value, next_seq, clock) {
            restored += 1;
        }
        match dsh_persistence::codec::decode_record(&id, Some(line_no), value) {
            Ok(decoded) => {
                for e in decoded {
                    if e.seq != next_seq {
                        r.error(
                            "SESSION_PERSISTENCE_CORRUPTION",
                            format!("seq gap (expected {next_seq}, got {})", e.seq),
                            Some(line_no),
                        );
                    }
                    next_seq = e.seq + 1;
                    clock = clock.max(e.time);
                    lines.push(line_no);
                    r.events.push(e);
                }
            }
            Err(e) => r.error(e.code(), e.to_string(), Some(line_no)),
        }
    }
    if restored > 0 {
        r.notes.push(format!(
            "{restored} record(s) had no seq/time (an upstream normalized snapshot?); restored \
             them as seq = position, time = a running clock"
        ));
    }
    let line_of = |seq: Option<u64>| {
        seq.and_then(|s| usize::try_from(s).ok())
            .and_then(|i| lines.get(i).copied())
    };
    if !r.errors.is_empty() {
        return r;
    }
    if let Err(e) = dsh_persistence::codec::check_known_types(
        registry,
        &id,
        &r.events,
        Some(path.to_path_buf()),
    ) {
        let seq = match &e {
            PersistenceError::FormatUnsupported {
                reason: dsh_persistence::UnsupportedReason::UnknownEventType { seq, .. },
                ..
            } => Some(*seq),
            _ => None,
        };
        r.error(e.code(), e.to_string(), line_of(seq));
        return r;
    }
    // The live append rules: restore through the last end-seed, then append the rest.
    let split = r
        .events
        .iter()
        .rposition(|e| e.kind.core() == Some(CoreKind::EndSeed))
        .map_or(0, |i| i + 1);
    let header = r.header.clone();
    let invariants_checked = {
        let shared: Vec<Arc<SessionEvent>> = r.events.iter().cloned().map(Arc::new).collect();
        check_invariants(&shared, Some(registry))
    };
    let replay = Session::from_restore_with(
        id.clone(),
        r.events[..split].to_vec(),
        header,
        registry.clone(),
    );
    match replay {
        Err(e) => {
            if e.code() != "INVARIANT_VIOLATION" {
                let seq = error_seq(&e).or_else(|| {
                    first_failing(&id, &r.events[..split], r.header.as_ref(), registry)
                });
                let message = match seq {
                    Some(s) => format!("seq {s}: {e}"),
                    None => e.to_string(),
                };
                r.error(e.code(), message, line_of(seq));
            }
        }
        Ok(session) => {
            for ev in &r.events[split..] {
                if let Err(e) = session.append_event(ev.clone()) {
                    if e.code() != "INVARIANT_VIOLATION" {
                        r.error(
                            e.code(),
                            format!("seq {}: {e}", ev.seq),
                            line_of(Some(ev.seq)),
                        );
                    }
                    break;
                }
            }
        }
    }
    for v in invariants_checked {
        r.error(v.kind.code(), v.to_string(), line_of(Some(v.seq)));
    }
    if r.errors.is_empty() {
        r.closers = dsh_persistence::interrupted_turn_closers(&r.events);
    }
    r
}

/// The seq of the first event of `events` that `Session::from_restore` refuses (binary search
/// over prefixes; a refused prefix stays refused when extended). `None` when all restore.
fn first_failing(
    id: &str,
    events: &[SessionEvent],
    header: Option<&SessionHeader>,
    registry: &Arc<EventTypeRegistry>,
) -> Option<u64> {
    let restores = |k: usize| {
        Session::from_restore_with(id, events[..k].to_vec(), header.cloned(), registry.clone())
            .is_ok()
    };
    if restores(events.len()) {
        return None;
    }
    // Invariant: prefix `lo` restores, prefix `hi` does not.
    let (mut lo, mut hi) = (0usize, events.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if restores(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    events.get(hi - 1).map(|e| e.seq)
}

fn error_seq(e: &dsh_session::SessionError) -> Option<u64> {
    match e {
        dsh_session::SessionError::MalformedEvent { seq, .. } => *seq,
        dsh_session::SessionError::SeqGap { got, .. } => Some(*got),
        dsh_session::SessionError::Invariant(v) => Some(v.seq),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// import

/// Imports a log file: `Ok(Ok(id))` when stored, `Ok(Err(report))` when the file has errors.
fn import(
    storage: &dyn SessionPersistence,
    path: &Path,
    registry: &Arc<EventTypeRegistry>,
) -> Result<std::result::Result<String, VerifyReport>> {
    let report = verify_file(path, registry);
    if !report.errors.is_empty() {
        return Ok(Err(report));
    }
    let Some(header) = report.header.clone() else {
        return Ok(Err(report));
    };
    let id = header.id.clone();
    let mut events = report.events;
    events.extend(report.closers);
    if events.is_empty() {
        return Err(anyhow!(
            "{}: the log has no events; nothing to import",
            path.display()
        ));
    }
    storage.create(header).map_err(|e| match e {
        PersistenceError::AlreadyExists { .. } => anyhow::Error::from(UsageError(format!(
            "a session `{id}` already exists in the store; not imported"
        ))),
        other => anyhow!("importing `{id}`: {other} ({})", other.code()),
    })?;
    let shared: Vec<Arc<SessionEvent>> = events.into_iter().map(Arc::new).collect();
    let written = storage.append(&id, &shared);
    storage.release(&id);
    written.map_err(|e| anyhow!("importing `{id}`: {e} ({})", e.code()))?;
    Ok(Ok(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        assert_eq!(fmt_utc(0), "1970-01-01 00:00");
        assert_eq!(fmt_utc(1_796_020_861_946), "2026-11-30 06:41");
        assert_eq!(fmt_utc(951_782_400_000), "2000-02-29 00:00");
    }

    #[test]
    fn envelope_restoration() {
        let mut v = json!({"type": "turn/start", "data": {"turn": 1}});
        assert!(restore_envelope(&mut v, 4, 9));
        assert_eq!(
            v,
            json!({"type": "turn/start", "data": {"turn": 1}, "seq": 4, "time": 9})
        );
        let mut row = json!({"type": "text-chunks", "data": {}});
        assert!(restore_envelope(&mut row, 2, 3));
        assert_eq!(row["seq0"], json!(2));
        assert_eq!(row["time0"], json!(3));
        let mut full = json!({"type": "x", "seq": 1, "time": 2, "data": {}});
        assert!(!restore_envelope(&mut full, 0, 0));
    }

    #[test]
    fn args_summary() {
        assert_eq!(
            summarize_args("bash", r#"{"command":"ls\n-la"}"#),
            "ls ⏎ -la"
        );
        assert_eq!(summarize_args("other", r#"{"a":1}"#), r#"{"a":1}"#);
    }
}
