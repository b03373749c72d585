//! SQLite backend: schema identity and pragmas, seam semantics (lazy create, first-seq check,
//! listing), the shared crash repair and large payloads. (JSONL ⇄ SQLite copies are tested in
//! `crates/dsh-persistence/tests/backends.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
#[path = "../../../crates/dsh-persistence/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{Script, to_plain};
use dsh_persistence::{PersistenceError, SessionHeader, SessionPersistence};
use dsh_persistence_sqlite::{APPLICATION_ID, SqliteConfig, open_persistence};
use dsh_session::{SessionEvent, check_invariants};
use serde_json::json;

fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1_700_000_000_000);
    h.cwd = Some("/work/proj".into());
    h.agent_preset = Some("coder".into());
    h
}

fn db(dir: &std::path::Path) -> Arc<dsh_persistence_sqlite::SqlitePersistence> {
    open_persistence(SqliteConfig {
        path: dir.join("s.sqlite"),
        pack_chunks: true,
    })
    .unwrap()
}

#[test]
fn schema_identity_and_pragmas() {
    let dir = tempfile::tempdir().unwrap();
    drop(db(dir.path()));
    let conn = rusqlite::Connection::open(dir.path().join("s.sqlite")).unwrap();
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    let ver: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!((app, ver, mode.as_str()), (APPLICATION_ID, 17, "wal"));
    assert_eq!(APPLICATION_ID, 0x44534850);
    let strict: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type='table' AND sql LIKE '%STRICT'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(strict, 3);
    drop(conn);
    // Re-open is fine; a foreign database is refused.
    drop(db(dir.path()));
    let foreign = dir.path().join("f.sqlite");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    c.execute_batch("CREATE TABLE t(x)").unwrap();
    drop(c);
    let e = open_persistence(SqliteConfig {
        path: foreign,
        pack_chunks: true,
    })
    .err()
    .unwrap();
    assert_eq!(e.code(), "SESSION_PERSISTENCE_BACKEND");
}

#[test]
fn round_trip_seq_check_list_and_repair() {
    let dir = tempfile::tempdir().unwrap();
    let p = db(dir.path());
    let mut s = Script::default();
    s.full_turn(1);
    s.full_turn(2);
    p.create(header("a")).unwrap();
    assert_eq!(p.list().unwrap(), vec![]);
    p.append("a", &s.events[..7]).unwrap();
    let e = p.append("a", &s.events[8..9]).unwrap_err();
    assert!(
        matches!(
            e,
            PersistenceError::SeqMismatch {
                expected: 7,
                got: 8,
                ..
            }
        ),
        "{e:?}"
    );
    p.append("a", &s.events[7..]).unwrap();
    let loaded = p.load("a").unwrap();
    assert_eq!(loaded.events, to_plain(&s.events));
    assert_eq!(loaded.header.agent_preset.as_deref(), Some("coder"));
    assert_eq!(p.read_from("a", 30).unwrap(), to_plain(&s.events[30..]));
    // Packed rows are stored as one physical row with ignorable = 0.
    let conn = rusqlite::Connection::open(dir.path().join("s.sqlite")).unwrap();
    let packed: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE ignorable = 0 AND type = 'text-chunks'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(packed, 2);
    let sources: Vec<u8> = conn
        .query_row(
            "SELECT source_event_seqs FROM events WHERE type = 'tool/result' ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sources, vec![8]); // varint of the tool/call seq 8

    // Crash repair: an open turn with a logged call gets the same closers as JSONL.
    let mut t = Script::default();
    t.full_turn(1);
    t.turn_start(2);
    t.user("go");
    t.step_start(2, 1);
    t.assistant(2, 1, "x", &["c1"]);
    let call_seq = t.tool_call(2, 1, "c1");
    p.create(header("b")).unwrap();
    p.append("b", &t.events).unwrap();
    p.release("b");
    let fresh = db(dir.path());
    let repaired = fresh.load("b").unwrap();
    assert_eq!(repaired.repair.closers, 3);
    let closers: Vec<serde_json::Value> = repaired.events[t.events.len()..]
        .iter()
        .map(SessionEvent::to_value)
        .collect();
    assert_eq!(
        closers[0]["data"]["error"],
        json!({"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"})
    );
    assert_eq!(closers[0]["sourceEventSeqs"], json!([call_seq]));
    assert_eq!(closers[2]["data"]["reason"], json!({"kind":"interrupted"}));
    // `fresh` is the writer of "b" now: another store (process) is refused until it releases
    let locked = db(dir.path()).load("b").unwrap_err();
    assert_eq!(locked.code(), "SESSION_LOCKED", "{locked}");
    fresh.release("b");
    let again = db(dir.path()).load("b").unwrap();
    assert_eq!(again.events, repaired.events);
    assert_eq!(again.repair, Default::default());
    let arcs: Vec<Arc<SessionEvent>> = again.events.into_iter().map(Arc::new).collect();
    assert_eq!(check_invariants(&arcs, None), vec![]);
    let ids: Vec<String> = fresh.list().unwrap().into_iter().map(|h| h.id).collect();
    assert_eq!(ids, vec!["a", "b"]);
}

#[test]
fn large_payloads_are_zstd_blobs_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = db(dir.path());
    let mut s = Script::default();
    s.turn_start(1);
    s.user(&"big text ".repeat(2_000));
    s.user("small");
    s.turn_end(1);
    p.create(header("big")).unwrap();
    p.append("big", &s.events).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("s.sqlite")).unwrap();
    let kinds: Vec<String> = conn
        .prepare("SELECT typeof(data) FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(kinds, vec!["text", "blob", "text", "text"]);
    assert_eq!(
        db(dir.path()).inspect("big").unwrap().events,
        to_plain(&s.events)
    );
}

#[test]
fn delete_takes_the_lock_and_removes_rows_and_the_session_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = db(dir.path());
    let mut s = Script::default();
    s.full_turn(1);
    p.create(header("a")).unwrap();
    p.append("a", &s.events).unwrap();
    let folder = dir.path().join("s.sqlite.d/a");
    assert_eq!(p.session_dir(&header("a")), Some(folder.clone()));
    std::fs::write(folder.join("spill.txt"), "x").unwrap();
    // the writer (this store) and another store are both refused while it holds the lock
    assert_eq!(p.delete("a").unwrap_err().code(), "SESSION_LOCKED");
    let other = db(dir.path());
    assert_eq!(other.delete("a").unwrap_err().code(), "SESSION_LOCKED");
    p.release("a");
    other.delete("a").unwrap();
    assert!(!folder.exists());
    assert_eq!(other.list().unwrap(), vec![]);
    assert_eq!(other.delete("a").unwrap_err().code(), "SESSION_NOT_FOUND");
    let conn = rusqlite::Connection::open(dir.path().join("s.sqlite")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}
