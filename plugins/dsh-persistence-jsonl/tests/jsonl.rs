//! JSONL backend through the seam: round trips, byte stability, bad input (BC-25), crash repair
//! closers (BC-24), locking, listing and read_from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../../../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Script, ev, to_plain};
use dsh_persistence::{PersistenceError, SessionHeader, SessionPersistence, UnsupportedReason};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::{SessionEvent, check_invariants};
use serde_json::{Value, json};

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1_700_000_000_000);
    h.cwd = Some("/work/proj".into());
    h
}

fn store(root: &Path) -> Arc<dsh_persistence_jsonl::JsonlPersistence> {
    jsonl_persistence(JsonlConfig {
        root: root.to_path_buf(),
        pack_chunks: true,
        compression: Default::default(),
    })
}

fn log_file(root: &Path, id: &str) -> std::path::PathBuf {
    dsh_persistence_jsonl::log_path(root, Some("/work/proj"), id).unwrap()
}

fn two_turns() -> Script {
    let mut s = Script::default();
    s.full_turn(1);
    s.full_turn(2);
    s
}

#[test]
fn create_append_load_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    let s = two_turns();
    p.create(header("s1")).unwrap();
    // Lazy create: nothing on disk, not listed.
    assert!(!log_file(dir.path(), "s1").exists());
    assert_eq!(p.list().unwrap(), vec![]);
    p.append("s1", &s.events[..2]).unwrap();
    p.append("s1", &s.events[2..12]).unwrap();
    p.append("s1", &s.events[12..]).unwrap();
    let loaded = p.load("s1").unwrap();
    assert_eq!(loaded.events, to_plain(&s.events));
    assert_eq!(loaded.header.id, "s1");
    assert_eq!(loaded.repair, Default::default());
    let text = std::fs::read_to_string(log_file(dir.path(), "s1")).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        r#"{"type":"session","version":0,"id":"s1","createdAt":1700000000000,"cwd":"/work/proj","delegationDepth":0}"#
    );
    // The 4 text deltas of each turn are packed into one row.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(r#"{"type":"text-chunks""#))
            .count(),
        2
    );
    assert_eq!(text.lines().count(), 1 + s.events.len() - 2 * 3);
    // Fresh instance (another process) reads the same.
    let p2 = store(dir.path());
    assert_eq!(p2.inspect("s1").unwrap().events, to_plain(&s.events));
    assert!(check_invariants(&s.events, None).is_empty());
}

#[test]
fn log_written_by_dsh_is_byte_stable_on_rewrite() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let s = two_turns();
    let pa = store(a.path());
    pa.create(header("s")).unwrap();
    pa.append("s", &s.events).unwrap();
    let loaded = pa.inspect("s").unwrap();
    let pb = store(b.path());
    pb.create(loaded.header.clone()).unwrap();
    let evs: Vec<Arc<SessionEvent>> = loaded.events.into_iter().map(Arc::new).collect();
    pb.append("s", &evs).unwrap();
    assert_eq!(
        std::fs::read(log_file(a.path(), "s")).unwrap(),
        std::fs::read(log_file(b.path(), "s")).unwrap()
    );
}

#[test]
fn first_seq_must_match_and_batches_must_be_contiguous() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    let s = two_turns();
    p.create(header("s")).unwrap();
    let e = p.append("s", &s.events[3..5]).unwrap_err();
    assert!(
        matches!(
            e,
            PersistenceError::SeqMismatch {
                expected: 0,
                got: 3,
                ..
            }
        ),
        "{e:?}"
    );
    p.append("s", &s.events[..3]).unwrap();
    let e = p
        .append("s", &[s.events[3].clone(), s.events[5].clone()])
        .unwrap_err();
    assert_eq!(e.code(), "SESSION_SEQ_MISMATCH");
    let e = p.append("s", &s.events[1..4]).unwrap_err();
    assert!(
        matches!(
            e,
            PersistenceError::SeqMismatch {
                expected: 3,
                got: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        p.append("nobody", &s.events[..1]).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    let text = std::fs::read_to_string(log_file(dir.path(), "s")).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
    assert_eq!(p.read_from("s", 0).unwrap().len(), 3);
}

#[test]
fn create_rejects_duplicates_and_invalid_headers() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    p.create(header("s")).unwrap();
    assert_eq!(
        p.create(header("s")).unwrap_err().code(),
        "SESSION_ALREADY_EXISTS"
    );
    let s = two_turns();
    p.append("s", &s.events[..2]).unwrap();
    let other = store(dir.path());
    assert_eq!(
        other.create(header("s")).unwrap_err().code(),
        "SESSION_ALREADY_EXISTS"
    );
    let mut bad = header("t");
    bad.cwd = Some("relative".into());
    assert_eq!(p.create(bad).unwrap_err().code(), "SESSION_INVALID_HEADER");
    let mut newer = header("u");
    newer.version = 3;
    assert_eq!(
        p.create(newer).unwrap_err().code(),
        "SESSION_FORMAT_UNSUPPORTED"
    );
}

#[test]
fn list_reads_headers_only_and_skips_unappended() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    let s = two_turns();
    for id in ["b", "a", "../evil", "c"] {
        p.create(header(id)).unwrap();
    }
    for id in ["b", "a", "../evil"] {
        p.append(id, &s.events[..3]).unwrap();
    }
    let ids: Vec<String> = p.list().unwrap().into_iter().map(|h| h.id).collect();
    assert_eq!(ids, vec!["../evil", "a", "b"]);
    // The hostile id stayed inside its own encoded directory.
    assert!(
        dir.path()
            .join("--work-proj--/..~002Fevil/session.jsonl")
            .is_file()
    );
    let snaps = p.list_snapshots().unwrap();
    let before = snaps
        .iter()
        .find(|s| s.header.id == "a")
        .unwrap()
        .revision
        .clone();
    p.append("a", &s.events[3..4]).unwrap();
    let after = p
        .list_snapshots()
        .unwrap()
        .into_iter()
        .find(|s| s.header.id == "a")
        .unwrap()
        .revision;
    assert_ne!(before, after);
}

#[test]
fn read_from_returns_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    let s = two_turns();
    p.create(header("s")).unwrap();
    p.append("s", &s.events).unwrap();
    assert_eq!(p.read_from("s", 20).unwrap(), to_plain(&s.events[20..]));
    assert_eq!(p.read_from("s", 0).unwrap().len(), s.events.len());
    assert_eq!(p.read_from("s", 10_000).unwrap(), vec![]);
}

fn write_log(root: &Path, id: &str, events: &[Arc<SessionEvent>]) -> std::path::PathBuf {
    let p = store(root);
    p.create(header(id)).unwrap();
    p.append(id, events).unwrap();
    p.release(id);
    log_file(root, id)
}

#[test]
fn truncated_last_line_is_repaired_and_next_append_starts_on_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = two_turns();
    let path = write_log(dir.path(), "s", &s.events);
    let good = std::fs::read(&path).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(
        br#"{"type":"assistant/message","seq":36,"time":1,"data":{"turn":3,"text":"hel"#,
    );
    std::fs::write(&path, &torn).unwrap();
    let p = store(dir.path());
    let loaded = p.load("s").unwrap();
    assert_eq!(loaded.events, to_plain(&s.events));
    assert!(loaded.repair.torn_tail_dropped);
    assert_eq!(loaded.repair.closers, 0);
    assert_eq!(std::fs::read(&path).unwrap(), good);
    // Continue: the next append is a clean new line.
    let mut more = Script {
        events: s.events.clone(),
    };
    more.full_turn(3);
    p.append("s", &more.events[s.events.len()..]).unwrap();
    let reloaded = store(dir.path()).inspect("s").unwrap();
    assert_eq!(reloaded.events, to_plain(&more.events));
}

#[test]
fn torn_tail_inside_open_turn_gets_closers() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Script::default();
    s.full_turn(1);
    s.turn_start(2);
    s.user("hello");
    let path = write_log(dir.path(), "s", &s.events);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"step/sta");
    std::fs::write(&path, &bytes).unwrap();
    let loaded = store(dir.path()).load("s").unwrap();
    assert!(loaded.repair.torn_tail_dropped);
    assert_eq!(loaded.repair.closers, 1);
    let last = loaded.events.last().unwrap();
    assert_eq!(
        last.to_value(),
        json!({"type":"turn/end","seq":s.events.len(),"time":1_700_000_000_000u64 + s.events.len() as u64 - 1,"data":{"turn":2,"reason":{"kind":"interrupted"}}})
    );
}

#[test]
fn garbage_line_in_the_middle_is_corruption_and_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let s = two_turns();
    let path = write_log(dir.path(), "s", &s.events);
    let text = std::fs::read(&path).unwrap();
    // After line 4 (header + 3 events), insert a line of 400 NUL bytes.
    let mut cut = 0;
    for _ in 0..4 {
        cut += text[cut..].iter().position(|b| *b == b'\n').unwrap() + 1;
    }
    let mut bad = text[..cut].to_vec();
    bad.extend(std::iter::repeat_n(0u8, 400));
    bad.push(b'\n');
    bad.extend_from_slice(&text[cut..]);
    std::fs::write(&path, &bad).unwrap();
    let p = store(dir.path());
    let e = p.load("s").unwrap_err();
    assert!(
        matches!(e, PersistenceError::Corruption { line: Some(5), .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("line 5"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), bad);
    assert_eq!(
        p.inspect("s").unwrap_err().code(),
        "SESSION_PERSISTENCE_CORRUPTION"
    );
    assert_eq!(
        p.read_from("s", 0).unwrap_err().code(),
        "SESSION_PERSISTENCE_CORRUPTION"
    );
}

fn raw_log(root: &Path, id: &str, header_line: &str, lines: &[String]) -> std::path::PathBuf {
    let path = log_file(root, id);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = format!("{header_line}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn header_line(id: &str) -> String {
    dsh_persistence::header_to_line(&header(id))
}

#[test]
fn seq_gap_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let s = two_turns();
    let mut lines: Vec<String> = s.events[..6].iter().map(|e| e.to_json()).collect();
    lines.remove(2);
    raw_log(dir.path(), "s", &header_line("s"), &lines);
    let e = store(dir.path()).load("s").unwrap_err();
    // Line 1 is the header; seq 0 and 1 are lines 2-3; the gap shows at line 4.
    assert!(
        matches!(e, PersistenceError::Corruption { line: Some(4), .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("expected 2, got 3"), "{e}");
}

#[test]
fn unknown_non_ignorable_type_is_format_unsupported_and_ignorable_loads() {
    let dir = tempfile::tempdir().unwrap();
    let lines = vec![
        json!({"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}).to_string(),
        json!({"type":"future/thing","seq":1,"time":1,"data":{"x":1}}).to_string(),
        json!({"type":"turn/end","seq":2,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}})
            .to_string(),
    ];
    raw_log(dir.path(), "s", &header_line("s"), &lines);
    let e = store(dir.path()).load("s").unwrap_err();
    match &e {
        PersistenceError::FormatUnsupported {
            reason: UnsupportedReason::UnknownEventType { event_type, seq },
            location,
            ..
        } => {
            assert_eq!(event_type, "future/thing");
            assert_eq!(*seq, 1);
            assert_eq!(
                location.as_deref(),
                Some(log_file(dir.path(), "s").as_path())
            );
        }
        other => panic!("{other:?}"),
    }
    let lines = vec![
        json!({"type":"future/thing","seq":0,"time":1,"data":{"x":1},"ignorable":true}).to_string(),
    ];
    raw_log(dir.path(), "t", &header_line("t"), &lines);
    assert_eq!(store(dir.path()).load("t").unwrap().events.len(), 1);
}

#[test]
fn newer_header_version_is_format_unsupported_newer() {
    let dir = tempfile::tempdir().unwrap();
    raw_log(
        dir.path(),
        "s",
        r#"{"type":"session","version":1,"id":"s","createdAt":1,"cwd":"/work/proj","delegationDepth":0,"newField":{}}"#,
        &["{\"whatever\":true}".to_owned()],
    );
    let e = store(dir.path()).load("s").unwrap_err();
    assert!(
        matches!(
            e,
            PersistenceError::FormatUnsupported {
                reason: UnsupportedReason::NewerVersion { version: 1 },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("newer harness"), "{e}");
}

#[test]
fn bad_packed_row_and_missing_header_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let lines = vec![
        json!({"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}).to_string(),
        json!({"type":"text-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":"nope"}}).to_string(),
        json!({"type":"turn/end","seq":2,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}).to_string(),
    ];
    raw_log(dir.path(), "s", &header_line("s"), &lines);
    let e = store(dir.path()).load("s").unwrap_err();
    assert!(
        matches!(e, PersistenceError::Corruption { line: Some(3), .. }),
        "{e:?}"
    );
    let path = log_file(dir.path(), "h");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"{\"type\":\"sess").unwrap();
    assert_eq!(
        store(dir.path()).load("h").unwrap_err().code(),
        "SESSION_PERSISTENCE_CORRUPTION"
    );
}

// ---- crash repair (BC-24) ----

fn open_turn_prefix() -> Script {
    let mut s = Script::default();
    s.full_turn(1);
    s.turn_start(2);
    s.user("list files");
    s.step_start(2, 1);
    s
}

fn load_repaired(events: &[Arc<SessionEvent>]) -> (Vec<SessionEvent>, Vec<SessionEvent>) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), "s", events);
    let p = store(dir.path());
    let loaded = p.load("s").unwrap();
    let closers = loaded.events[events.len()..].to_vec();
    assert_eq!(loaded.events[..events.len()], to_plain(events)[..]);
    // Repair is durable and idempotent.
    p.release("s");
    let again = store(dir.path()).load("s").unwrap();
    assert_eq!(again.events, loaded.events);
    assert_eq!(again.repair, Default::default());
    let arcs: Vec<Arc<SessionEvent>> = loaded.events.iter().cloned().map(Arc::new).collect();
    assert_eq!(check_invariants(&arcs, None), vec![]);
    assert!(path.is_file());
    (loaded.events, closers)
}

fn values(events: &[SessionEvent]) -> Vec<Value> {
    events.iter().map(SessionEvent::to_value).collect()
}

#[test]
fn repair_pending_logged_call_outcome_unknown() {
    let mut s = open_turn_prefix();
    s.assistant(2, 1, "running", &["toolu_1"]);
    let call_seq = s.tool_call(2, 1, "toolu_1");
    let n = s.events.len() as u64;
    let t = 1_700_000_000_000u64 + n - 1;
    let (_, closers) = load_repaired(&s.events);
    assert_eq!(
        values(&closers),
        vec![
            json!({"type":"tool/result","seq":n,"time":t,"data":{"turn":2,"step":1,"message":{"id":format!("interrupted-tool-result-toolu_1-{n}"),"role":"user","content":[{"type":"tool-result","toolCallId":"toolu_1","content":[{"type":"text","text":dsh_persistence::OUTCOME_UNKNOWN_TEXT}],"isError":true}],"source":{"kind":"tool","callId":"toolu_1"}},"error":{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}},"sourceEventSeqs":[call_seq],"surfaceOp":"append"}),
            json!({"type":"step/end","seq":n+1,"time":t,"data":{"turn":2,"step":1}}),
            json!({"type":"turn/end","seq":n+2,"time":t,"data":{"turn":2,"reason":{"kind":"interrupted"}}}),
        ]
    );
    assert!(
        dsh_persistence::OUTCOME_UNKNOWN_TEXT
            .starts_with("The tool call was interrupted after it was recorded")
    );
}

#[test]
fn repair_pending_unlogged_call_not_started_and_parallel_partial() {
    let mut s = open_turn_prefix();
    s.assistant(2, 1, "two calls", &["c_a", "c_b", "c_c"]);
    let a = s.tool_call(2, 1, "c_a");
    s.tool_result(2, 1, "c_a", a);
    let b = s.tool_call(2, 1, "c_b");
    let n = s.events.len() as u64;
    let t = 1_700_000_000_000u64 + n - 1;
    let (_, closers) = load_repaired(&s.events);
    let v = values(&closers);
    assert_eq!(v.len(), 4);
    assert_eq!(
        v[0]["data"]["error"],
        json!({"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"})
    );
    assert_eq!(v[0]["sourceEventSeqs"], json!([b]));
    assert_eq!(
        v[0]["data"]["message"]["id"],
        json!(format!("interrupted-tool-result-c_b-{n}"))
    );
    assert_eq!(
        v[1],
        json!({"type":"tool/result","seq":n+1,"time":t,"data":{"turn":2,"step":1,"message":{"id":format!("interrupted-tool-result-c_c-{}", n+1),"role":"user","content":[{"type":"tool-result","toolCallId":"c_c","content":[{"type":"text","text":"The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."}],"isError":true}],"source":{"kind":"tool","callId":"c_c"}},"error":{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}},"surfaceOp":"append"})
    );
    assert_eq!(
        v[2],
        json!({"type":"step/end","seq":n+2,"time":t,"data":{"turn":2,"step":1}})
    );
    assert_eq!(
        v[3],
        json!({"type":"turn/end","seq":n+3,"time":t,"data":{"turn":2,"reason":{"kind":"interrupted"}}})
    );
}

#[test]
fn repair_open_step_and_open_turn() {
    let s = open_turn_prefix();
    let n = s.events.len() as u64;
    let t = 1_700_000_000_000u64 + n - 1;
    let (_, closers) = load_repaired(&s.events);
    assert_eq!(
        values(&closers),
        vec![
            json!({"type":"step/end","seq":n,"time":t,"data":{"turn":2,"step":1}}),
            json!({"type":"turn/end","seq":n+1,"time":t,"data":{"turn":2,"reason":{"kind":"interrupted"}}}),
        ]
    );
    let mut s = Script::default();
    s.full_turn(1);
    s.turn_start(2);
    let n = s.events.len() as u64;
    let (_, closers) = load_repaired(&s.events);
    assert_eq!(
        values(&closers),
        vec![
            json!({"type":"turn/end","seq":n,"time":1_700_000_000_000u64 + n - 1,"data":{"turn":2,"reason":{"kind":"interrupted"}}})
        ]
    );
    // A balanced log gets nothing; a committed turn is never truncated.
    let s = two_turns();
    let (events, closers) = load_repaired(&s.events);
    assert_eq!(closers, vec![]);
    assert_eq!(events, to_plain(&s.events));
}

#[test]
fn inspect_repairs_in_memory_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_turn_prefix();
    let path = write_log(dir.path(), "s", &s.events);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"torn");
    std::fs::write(&path, &bytes).unwrap();
    let p = store(dir.path());
    let view = p.inspect("s").unwrap();
    assert_eq!(view.events.len(), s.events.len() + 2);
    assert!(view.repair.torn_tail_dropped);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(p.read_from("s", 0).unwrap(), to_plain(&s.events));
}

#[test]
fn live_session_is_not_repaired_and_second_writer_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let p = store(dir.path());
    let s = open_turn_prefix();
    p.create(header("s")).unwrap();
    p.append("s", &s.events).unwrap();
    assert_eq!(p.load("s").unwrap_err().code(), "SESSION_LIVE_OPEN_TURN");
    let other = store(dir.path());
    let e = other.load("s").unwrap_err();
    assert_eq!(e.code(), "SESSION_LOCKED", "{e:?}");
    // Reading is never blocked by the writer lock.
    assert_eq!(other.inspect("s").unwrap().events.len(), s.events.len() + 2);
    p.release("s");
    assert_eq!(other.load("s").unwrap().repair.closers, 2);
}

#[test]
fn event_helpers_parse() {
    let e = ev(json!({"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}));
    assert_eq!(e.seq, 0);
}
