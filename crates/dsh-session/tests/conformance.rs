//! Conformance against the upstream session-log corpus (read at run time from
//! `shared/conformance/upstream-sessions/` beside the repository; `docs/formats.md`):
//! every recorded log is expanded, template-filled, restored/replayed through the live append
//! rules, derived, and written back (re-packed) to records equal as JSON values to the input.
//!
//! Procedure per file (see `docs/formats.md`, "Conformance corpus"):
//! 1. Substitute `{{…}}` templates: `{{tools}}` → an array of two tool schemas, `{{system}}` → a
//!    fixed string, `{{cwd}}` → an absolute path, any other `{{name}}` (ids, prefixes) → a fixed
//!    string `name-value` (substrings too).
//! 2. Restore the stripped envelope: `seq` = logical position (a packed row of N members covers N
//!    seqs via `seq0`), `time` = a running non-decreasing clock (`time0` + `dt` for rows).
//! 3. Decode with `packed::unpack`, then replay: the prefix through the last `session/end-seed`
//!    is restored with `Session::from_restore` (full validation incl. invariants); every later
//!    event goes through `Session::append_event` (the live rules).
//! 4. `derive_messages()` must equal a naive fold of `derive_event_message` over
//!    `fold_surface(events)`, and `check_invariants` must report nothing.
//! 5. Re-encode with `packed::pack` (re-packing rows) and compare every record with the filled
//!    input record as JSON values (`json_equiv`); the header likewise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_session::{
    EventType, Session, SessionEvent, SessionHeader, check_invariants, derive_event_message,
    fold_surface, json_equiv, packed,
};
use serde_json::{Value, json};

/// The corpus folder; panics (a failure, not a pass) when missing — these tests are
/// `#[ignore]`d at build time when the corpus is absent and `CI` is unset (see
/// `dsh-shared-corpus`).
fn corpus_dir() -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
}

fn tools_value() -> Value {
    json!([
        {"name": "bash", "description": "Run a shell command.", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
        {"name": "read", "description": "Read a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    ])
}

fn fill_str(s: &str) -> Value {
    match s {
        "{{tools}}" => return tools_value(),
        "{{system}}" => return json!("You are dsh, a coding agent. (conformance system prompt)"),
        "{{cwd}}" => return json!("/tmp/dsh-conformance/workspace"),
        _ => {}
    }
    if !s.contains("{{") {
        return Value::String(s.to_owned());
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        match rest[i..].find("}}") {
            Some(j) => {
                let name = &rest[i + 2..i + j];
                if name == "cwd" {
                    out.push_str("/tmp/dsh-conformance/workspace");
                } else {
                    out.push_str(name);
                    out.push_str("-value");
                }
                rest = &rest[i + j + 2..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    Value::String(out)
}

fn fill(v: &mut Value) {
    match v {
        Value::String(s) => *v = fill_str(s),
        Value::Array(a) => a.iter_mut().for_each(fill),
        Value::Object(o) => o.values_mut().for_each(fill),
        _ => {}
    }
}

/// Restores `seq`/`time` (events) or `seq0`/`time0` (rows); returns the filled records.
fn restore_envelopes(records: Vec<Value>) -> Result<Vec<Value>, String> {
    let mut seq = 0u64;
    let mut time = 1_700_000_000_000u64;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let Value::Object(obj) = r else {
            return Err("record is not an object".into());
        };
        let t = obj
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let mut filled = serde_json::Map::new();
        filled.insert("type".into(), json!(t));
        if packed::is_packed_row_type(&t) {
            filled.insert("seq0".into(), json!(seq));
            filled.insert("time0".into(), json!(time));
            let data = obj.get("data").cloned().unwrap_or(Value::Null);
            let members = data
                .get("texts")
                .or_else(|| data.get("args"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len) as u64;
            let span: i64 = data
                .get("dt")
                .and_then(Value::as_array)
                .map_or(0, |a| a.iter().filter_map(Value::as_i64).sum());
            seq += members;
            time = time
                .checked_add_signed(span)
                .expect("time stays positive")
                .max(time)
                + 1;
        } else {
            filled.insert("seq".into(), json!(seq));
            filled.insert("time".into(), json!(time));
            seq += 1;
            time += 1;
        }
        for (k, v) in obj {
            if k != "type" {
                filled.insert(k, v);
            }
        }
        out.push(Value::Object(filled));
    }
    Ok(out)
}

struct Outcome {
    events: usize,
    records: usize,
    messages: usize,
}

fn check_file(path: &Path) -> Result<Outcome, String> {
    check_file_with(path, |_| {})
}

/// Adds keys dsh does not model at several depths of the core payloads of `records` (a
/// message's `source`, its first content part, the message, usage on chunks and messages, a
/// block-end's block, the `tool/call` payload); returns how many it added.
fn inject_unmodeled(records: &mut [Value]) -> usize {
    let mut n = 0;
    let mut put = |v: Option<&mut Value>, key: &str, x: Value| {
        if let Some(Value::Object(o)) = v {
            o.insert(key.to_owned(), x);
            n += 1;
        }
    };
    for r in records.iter_mut() {
        let t = r["type"].as_str().unwrap_or("").to_owned();
        let data = &mut r["data"];
        match t.as_str() {
            "user/message" => {
                put(data.get_mut("source"), "clientTag", json!({"v": 1}));
                put(
                    data.pointer_mut("/content/0"),
                    "cacheControl",
                    json!("ephemeral"),
                );
                put(Some(data), "pinned", json!(false));
            }
            "assistant/message" | "tool/result" => {
                put(
                    data.pointer_mut("/message/source"),
                    "requestId",
                    json!("req-1"),
                );
                put(
                    data.pointer_mut("/message/content/0"),
                    "partTag",
                    json!([1, 2]),
                );
                put(data.get_mut("usage"), "costMicros", json!(3));
                put(Some(data), "latencyMs", json!(12.5));
            }
            "assistant/chunk" => {
                put(
                    data.pointer_mut("/chunk/usage"),
                    "cacheMissTokens",
                    json!(7),
                );
                put(data.pointer_mut("/chunk/block"), "blockTag", json!(null));
            }
            "tool/call" => put(Some(data), "approval", json!({"decision": "allowed-once"})),
            _ => {}
        }
    }
    n
}

fn check_file_with(path: &Path, edit: impl Fn(&mut [Value])) -> Result<Outcome, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read: {e}"))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut header_v: Value = serde_json::from_str(lines.next().ok_or("empty file")?)
        .map_err(|e| format!("header: {e}"))?;
    fill(&mut header_v);
    let header: SessionHeader =
        serde_json::from_value(header_v.clone()).map_err(|e| format!("header parse: {e}"))?;
    header
        .validate()
        .map_err(|e| format!("header invalid: {e}"))?;
    let back = serde_json::to_value(&header).map_err(|e| e.to_string())?;
    if !json_equiv(&back, &header_v) {
        return Err(format!("header does not round-trip: {back} vs {header_v}"));
    }

    let mut raw = Vec::new();
    for (i, l) in lines.enumerate() {
        let mut v: Value = serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 2))?;
        fill(&mut v);
        raw.push(v);
    }
    let mut records = restore_envelopes(raw)?;
    edit(&mut records);
    let events =
        packed::unpack(records.clone()).map_err(|e| format!("decode: {} {e}", e.code()))?;

    // Replay: seed prefix (through the last end-seed) restored, the rest appended live.
    let split = events
        .iter()
        .rposition(|e| e.kind == EventType::END_SEED)
        .map_or(0, |i| i + 1);
    let mut iter = events.into_iter();
    let seed: Vec<SessionEvent> = iter.by_ref().take(split).collect();
    let session = Session::from_restore(header.id.clone(), seed, Some(header.clone()))
        .map_err(|e| format!("restore seed: {} {e}", e.code()))?;
    for e in iter {
        let seq = e.seq;
        let kind = e.kind.clone();
        session
            .append_event(e)
            .map_err(|err| format!("append seq {seq} ({kind}): {} {err}", err.code()))?;
    }
    let logged = session.events();

    // Whole-log restore agrees, and the invariants hold.
    let replayed: Vec<SessionEvent> = logged.iter().map(|e| (**e).clone()).collect();
    Session::from_restore(header.id.clone(), replayed, Some(header.clone()))
        .map_err(|e| format!("full restore: {} {e}", e.code()))?;
    let violations = check_invariants(&logged, None);
    if !violations.is_empty() {
        return Err(format!("invariant violations: {violations:?}"));
    }

    // Derived history equals the naive fold.
    let fold = fold_surface(&logged).map_err(|e| format!("fold: {e}"))?;
    let naive: Vec<Arc<dsh_llm::Message>> = fold
        .nodes
        .iter()
        .filter_map(|s| derive_event_message(&logged[*s as usize]))
        .collect();
    let derived = session.derive_messages();
    if derived != naive {
        return Err("derive_messages differs from the naive fold".into());
    }

    // Write back: re-pack and compare records as JSON values.
    let written = packed::pack(&logged);
    if written.len() != records.len() {
        let first = written
            .iter()
            .zip(&records)
            .position(|(a, b)| !json_equiv(a, b))
            .unwrap_or(written.len().min(records.len()));
        return Err(format!(
            "record count {} != {} (first difference at record {first}: wrote {} expected {})",
            written.len(),
            records.len(),
            written
                .get(first)
                .map(|v| v.to_string())
                .unwrap_or_default(),
            records
                .get(first)
                .map(|v| v.to_string())
                .unwrap_or_default()
        ));
    }
    for (i, (w, r)) in written.iter().zip(&records).enumerate() {
        if !json_equiv(w, r) {
            return Err(format!("record {i} differs:\n wrote    {w}\n expected {r}"));
        }
    }
    // A log dsh wrote re-serializes byte for byte.
    let reparsed = packed::unpack(written.clone()).map_err(|e| format!("re-decode: {e}"))?;
    let again: Vec<Arc<SessionEvent>> = reparsed.into_iter().map(Arc::new).collect();
    let bytes1: Vec<String> = written.iter().map(Value::to_string).collect();
    let bytes2: Vec<String> = packed::pack(&again).iter().map(Value::to_string).collect();
    if bytes1 != bytes2 {
        return Err("dsh-written records do not re-serialize byte for byte".into());
    }
    Ok(Outcome {
        events: logged.len(),
        records: records.len(),
        messages: derived.len(),
    })
}

#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn conformance_upstream_sessions_round_trip() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus directory is empty");
    let mut failures = Vec::new();
    let (mut events, mut records, mut messages) = (0, 0, 0);
    for f in &files {
        match check_file(f) {
            Ok(o) => {
                events += o.events;
                records += o.records;
                messages += o.messages;
            }
            Err(e) => failures.push(format!(
                "{}: {e}",
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )),
        }
    }
    eprintln!(
        "conformance: {} files, {events} events, {records} records, {messages} derived messages, {} failures",
        files.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing files:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Corrupting a corpus log gives typed errors: a dropped event is a seq gap, a renamed type is
/// unknown, a broken surface op is refused.
#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn conformance_corrupted_logs_are_refused_with_typed_errors() {
    let dir = corpus_dir();
    let path = dir.join("examples__acp-agent__snapshots__bash-tool-turn__session.jsonl");
    assert!(path.is_file(), "corpus log {} is missing", path.display());
    let text = std::fs::read_to_string(&path).expect("read");
    let mut raw: Vec<Value> = text
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    raw.iter_mut().for_each(fill);
    let load = |records: Vec<Value>| -> Result<(), String> {
        let events = packed::unpack(records).map_err(|e| e.code().to_owned())?;
        Session::from_restore("x", events, None)
            .map(|_| ())
            .map_err(|e| e.code().to_owned())
    };
    let good = restore_envelopes(raw.clone()).expect("fill");
    assert_eq!(load(good.clone()), Ok(()));

    let mut gap = good.clone();
    gap.remove(2);
    assert_eq!(load(gap), Err("SEQ_GAP".to_owned()));

    let mut unknown = good.clone();
    unknown[0]["type"] = json!("agent/inbox/mystery");
    assert_eq!(load(unknown), Err("UNKNOWN_EVENT_TYPE".to_owned()));

    let mut ignorable = good.clone();
    ignorable[0]["type"] = json!("agent/inbox/mystery");
    ignorable[0]["ignorable"] = json!(true);
    assert_eq!(load(ignorable), Ok(()));

    let i = good
        .iter()
        .position(|r| r["type"] == "user/message")
        .expect("user message");
    let mut no_op = good.clone();
    no_op[i].as_object_mut().expect("obj").remove("surfaceOp");
    assert_eq!(load(no_op), Err("MISSING_SURFACE_INTENT".to_owned()));

    let mut bad_replace = good.clone();
    bad_replace[i]["surfaceOp"] = json!({"op": "replace", "start": 0, "end": 0});
    bad_replace[i]["sourceEventSeqs"] = json!([0]);
    assert_eq!(load(bad_replace), Err("BAD_SURFACE_OP".to_owned()));

    let mut bad_row = good.clone();
    let r = good
        .iter()
        .position(|r| r["type"] == "reasoning-chunks")
        .expect("row");
    bad_row[r]["data"]["dt"] = json!([]);
    assert_eq!(load(bad_row), Err("MALFORMED_PACKED_ROW".to_owned()));
}

/// Every corpus log with keys dsh does not model injected at several depths of its core
/// payloads still decodes, restores, replays through the live rules, derives the same messages
/// as the plain log, and re-writes to records equal to the injected input.
#[test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
fn conformance_logs_with_unmodeled_fields_round_trip() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus directory is empty");
    let injected = std::sync::atomic::AtomicUsize::new(0);
    let mut failures = Vec::new();
    for f in &files {
        let plain = check_file(f).map(|o| o.messages);
        let extra = check_file_with(f, |r| {
            injected.fetch_add(inject_unmodeled(r), std::sync::atomic::Ordering::Relaxed);
        })
        .map(|o| o.messages);
        if plain != extra {
            failures.push(format!(
                "{}: plain {plain:?}, injected {extra:?}",
                f.display()
            ));
        }
    }
    let injected = injected.into_inner();
    eprintln!(
        "injected {injected} unmodeled keys into {} logs",
        files.len()
    );
    assert!(injected > 1000, "only {injected} keys injected");
    assert!(
        failures.is_empty(),
        "{} failing files:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
