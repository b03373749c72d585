//! Issue 13, "Sessions and logs", through the built `dsh` binary against the replay provider
//! (`dsh_test_support::ReplayServer` on 127.0.0.1):
//!
//! - a stored log whose core payloads carry fields dsh does not model verifies
//!   (`dsh sessions verify`), resumes (`dsh exec --resume`), keeps its stored records unchanged,
//!   and re-writes to equal JSON (`dsh sessions fork`);
//! - a resumed multi-megabyte session equals the saved one (events and derived history);
//! - the bytes a `write` and an answer cost in the log (copies of the content, and the size of
//!   the records that hold them).
//!
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox, code, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dsh_persistence::SessionPersistence;
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::{Session, json_equiv};
use serde_json::{Value, json};

const API_KEY: &str = "sk-faults-logs-0000";
/// "Did not hang" bound for one dsh run.
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` with this file's hang guard.
fn run(cmd: Command) -> Output {
    common::e2e::run(cmd, HANG_LIMIT)
}

/// The shared sandbox plus this file's helpers.
struct Env(Sandbox);

impl std::ops::Deref for Env {
    type Target = Sandbox;

    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

impl Env {
    fn new() -> Self {
        Self(Sandbox::new())
    }

    /// `dsh <args>` in the workspace with the hermetic environment and this file's key.
    fn dsh(&self, url: &str, args: &[&str]) -> Command {
        self.0.dsh(url, API_KEY, args)
    }

    fn log(&self, id: &str) -> PathBuf {
        dsh_persistence_jsonl::log_path(
            &self.home.join("sessions"),
            Some(self.repo.to_str().unwrap()),
            id,
        )
        .unwrap()
    }

    fn store(&self) -> std::sync::Arc<dsh_persistence_jsonl::JsonlPersistence> {
        jsonl_persistence(JsonlConfig {
            root: self.home.join("sessions"),
            ..JsonlConfig::default()
        })
    }

    /// `dsh exec --json TASK` against `replay`; returns the session id.
    fn exec_new(&self, replay: &Replay, task: &str) -> String {
        let out = run(self.dsh(&replay.url(), &["exec", "--json", task]));
        assert_eq!(code(out.status), 0, "{out:?}");
        text(&out.stdout)
            .lines()
            .last()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|v| v["sessionId"].as_str().map(str::to_owned))
            .unwrap()
    }

    fn verify(&self, log: &Path) -> Value {
        let out = run(self.dsh(
            "http://127.0.0.1:9",
            &["sessions", "verify", "--json", log.to_str().unwrap()],
        ));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"))
    }
}

/// The record lines of a JSONL log (header excluded), parsed.
fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Adds keys dsh does not model at several depths of the core payloads; returns how many.
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

#[test]
fn a_log_with_unmodeled_fields_verifies_resumes_and_rewrites_to_equal_json() {
    let env = Env::new();
    std::fs::write(env.repo.join("a.txt"), "hello\n").unwrap();
    let a = env.repo.join("a.txt").display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": a}]]},
        {"text": "It says hello."},
    ]));
    let id = env.exec_new(&replay, "read a.txt");
    let log = env.log(&id);

    // Inject, and store the log back (header line unchanged).
    let original = std::fs::read_to_string(&log).unwrap();
    let header = original.lines().next().unwrap().to_owned();
    let mut recs = records(&log);
    let injected = inject_unmodeled(&mut recs);
    // 18: dsh logs no redundant `block-end` chunk, so no `/chunk/block` is there to tag (the
    // corpus test `conformance_logs_with_unmodeled_fields_round_trip` tags upstream's).
    assert_eq!(injected, 18, "keys injected");
    let mut body = format!("{header}\n");
    for r in &recs {
        body.push_str(&r.to_string());
        body.push('\n');
    }
    std::fs::write(&log, &body).unwrap();

    // Verify: clean.
    let report = env.verify(&log);
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["errors"], json!([]));

    // Resume: the history is sent, the stored records are kept byte for byte.
    let replay = Replay::start(json!([{"text": "Again."}]));
    let out = run(env.dsh(&replay.url(), &["exec", "--resume", &id, "again"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    assert_eq!(text(&out.stdout), "Again.\n");
    let reqs = replay.chat_requests();
    assert_eq!(reqs.len(), 1);
    let roles: Vec<&str> = reqs[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ]
    );
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(after.starts_with(&body), "the stored records changed");
    let report = env.verify(&log);
    assert_eq!(report["ok"], true, "{report}");

    // Re-write: a fork copies every event through dsh's own serializer.
    let out = run(env.dsh("http://127.0.0.1:9", &["sessions", "fork", &id]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let child = text(&out.stdout).trim_end().to_owned();
    let parent_recs = records(&log);
    let child_recs = records(&env.log(&child));
    assert_eq!(child_recs.len(), parent_recs.len() + 1, "seed + end-seed");
    for (c, p) in child_recs.iter().zip(&parent_recs) {
        assert!(json_equiv(c, p), "\n child  {c}\n parent {p}");
    }
    assert_eq!(
        child_recs.last().unwrap()["type"],
        json!("session/end-seed")
    );
}

/// A resumed session of a few megabytes (many streamed turns) equals the saved one: the same
/// events and the same derived history, and the resume sends that history.
#[test]
fn a_resumed_large_session_equals_the_saved_one() {
    let env = Env::new();
    let content: String = (0..4_000).map(|i| format!("line {i}\n")).collect();
    let out_txt = env.repo.join("out.txt").display().to_string();
    let mut script = Vec::new();
    for _ in 0..3 {
        script.push(json!({"tool_calls": [["write", {"file_path": out_txt, "content": content}]]}));
        script.push(json!({"text": content}));
    }
    // One session, three turns of ≈ 40 KB of streamed tool arguments and answer each.
    let replay = Replay::start(json!(script));
    let id = env.exec_new(&replay, "write out.txt");
    for k in 1..3 {
        let out = run(env.dsh(
            &replay.url(),
            &["exec", "--resume", &id, &format!("again {k}")],
        ));
        assert_eq!(code(out.status), 0, "{out:?}");
    }
    let log = env.log(&id);
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size > 700_000, "log is {size} bytes");

    let store = env.store();
    let saved = store.inspect(&id).unwrap();
    assert_eq!(saved.repair.closers, 0);
    let saved_session =
        Session::from_restore(id.clone(), saved.events.clone(), Some(saved.header.clone()))
            .unwrap();
    let saved_history = saved_session.derive_messages();
    store.release(&id);

    // The resume sends exactly the saved history (plus the new prompt).
    let replay = Replay::start(json!([{"text": "ok"}]));
    let out = run(env.dsh(&replay.url(), &["exec", "--resume", &id, "last"]));
    assert_eq!(code(out.status), 0, "{out:?}");
    let reqs = replay.chat_requests();
    let sent = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(
        sent.len(),
        1 + saved_history.len() + 1,
        "system + history + prompt"
    );
    assert_eq!(sent.last().unwrap()["content"], json!("last"));

    // After the resume the stored log starts with the saved one, event for event.
    let store = env.store();
    let resumed = store.inspect(&id).unwrap();
    assert_eq!(
        resumed.events[..saved.events.len()],
        saved.events[..],
        "the resumed log's prefix differs from the saved log"
    );
    let resumed_session = Session::from_restore(
        id.clone(),
        resumed.events.clone(),
        Some(resumed.header.clone()),
    )
    .unwrap();
    let history = resumed_session.derive_messages();
    assert_eq!(history[..saved_history.len()], saved_history[..]);
}

/// A stored record line with its clock removed (`time`/`time0` = 0, every `dt` gap 0), so its
/// size does not depend on how fast the replay ran.
fn normalized(record: &Value) -> Value {
    let mut r = record.clone();
    for k in ["time", "time0"] {
        if r.get(k).is_some() {
            r[k] = json!(0);
        }
    }
    if let Some(dt) = r.pointer_mut("/data/dt").and_then(Value::as_array_mut) {
        dt.iter_mut().for_each(|d| *d = json!(0));
    }
    r
}

/// The records of `recs` that hold a copy of `text`, with their normalized line sizes in bytes
/// (newline included): a record with a string value containing it, and the streamed deltas of a
/// block whose pieces join to it (the unpacked `assistant/chunk` deltas and the packed rows of
/// that block, labelled `deltas`, counted as one copy).
fn copies_of(recs: &[Value], text: &str) -> Vec<(String, usize)> {
    let quoted = serde_json::to_string(text).unwrap();
    let inner = &quoted[1..quoted.len() - 1];
    let mut out = Vec::new();
    // (turn, step, index) -> (joined pieces, bytes)
    let mut deltas: Vec<((u64, u64, u64), String, usize)> = Vec::new();
    for r in recs {
        let line = normalized(r).to_string();
        let d = &r["data"];
        let piece = match r["type"].as_str().unwrap() {
            "text-chunks" | "reasoning-chunks" | "tool-call-chunks" => Some(
                d.get("texts")
                    .or_else(|| d.get("args"))
                    .and_then(Value::as_array)
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<String>(),
            ),
            "assistant/chunk" => {
                let c = &d["chunk"];
                c.get("argumentsDelta")
                    .or_else(|| c.get("text").filter(|_| c["type"] != "block-end"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }
            _ => None,
        };
        if let Some(piece) = piece {
            let idx = d.get("index").or_else(|| d["chunk"].get("index"));
            let key = (
                d["turn"].as_u64().unwrap(),
                d["step"].as_u64().unwrap(),
                idx.and_then(Value::as_u64).unwrap(),
            );
            match deltas.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, joined, bytes)) => {
                    joined.push_str(&piece);
                    *bytes += line.len() + 1;
                }
                None => deltas.push((key, piece, line.len() + 1)),
            }
            continue;
        }
        if line.contains(inner) {
            let label = match r["type"].as_str().unwrap() {
                "assistant/chunk" => {
                    format!("assistant/chunk:{}", d["chunk"]["type"].as_str().unwrap())
                }
                t => t.to_owned(),
            };
            out.push((label, line.len() + 1));
        }
    }
    for (_, joined, bytes) in deltas {
        if joined.contains(text) {
            out.insert(0, ("deltas".to_owned(), bytes));
        }
    }
    out
}

/// What one `write` and one answer cost in the log: which records hold a copy of the written
/// content / the answer text and their sizes. Every copy is one upstream writes too (see
/// docs/formats.md, "Copies of the content"): the streamed deltas (packed), the block-end
/// chunk, the assistant message, and for a call the `tool/call` event.
#[test]
fn bytes_per_write_and_per_answer() {
    let env = Env::new();
    let content: String = (0..1_000).map(|i| format!("row {i:04}\n")).collect();
    assert_eq!(content.len(), 9_000);
    let answer: String = (0..500).map(|i| format!("w{i:03} ")).collect();
    assert_eq!(answer.len(), 2_500);
    // A relative path keeps the record sizes independent of where the temporary project is.
    let args = json!({"file_path": "out.txt", "content": content});
    let replay = Replay::start(json!([
        {"tool_calls": [["write", args]]},
        {"text": answer},
    ]));
    let id = env.exec_new(&replay, "write out.txt");
    // The log as one batch with a stopped clock: how the rows fall depends on write batching and
    // the gaps on timing, so the sizes are measured on the whole log re-encoded at time 0 (every
    // delta run then packs into one row).
    let store = env.store();
    let events: Vec<std::sync::Arc<dsh_session::SessionEvent>> = store
        .inspect(&id)
        .unwrap()
        .events
        .into_iter()
        .map(|mut e| {
            e.time = 0;
            std::sync::Arc::new(e)
        })
        .collect();
    let recs = dsh_session::packed::pack(&events);
    let arguments = args.to_string();

    let write = copies_of(&recs, &arguments);
    let labels: Vec<&str> = write.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["deltas", "assistant/message", "tool/call"]);
    let per_write: usize = write.iter().map(|(_, n)| n).sum();
    let answer_copies = copies_of(&recs, &answer);
    let labels: Vec<&str> = answer_copies.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["deltas", "assistant/message"]);
    let per_answer: usize = answer_copies.iter().map(|(_, n)| n).sum();
    eprintln!(
        "write records {write:?} = {per_write} bytes; answer records {answer_copies:?} = {per_answer} bytes"
    );
    // 9,000 bytes of content (10,036 bytes of arguments text, 11,044 once escaped again inside
    // a record): 3 copies in 45,463 bytes (56,707 in 4 copies while dsh also logged the
    // redundant `block-end` chunk, 11,239 bytes). The assistant message also lists the ≈ 1,260
    // chunk seqs it was assembled from (`sourceEventSeqs`), as upstream does.
    let sizes: Vec<usize> = write.iter().map(|(_, n)| *n).collect();
    assert_eq!(sizes, [17_616, 16_678, 11_169]);
    assert_eq!(per_write, 45_463);
    // 2,500 bytes of answer: 2 copies in 8,615 bytes (11,267 in 3 copies before, the block-end
    // 2,647).
    let sizes: Vec<usize> = answer_copies.iter().map(|(_, n)| *n).collect();
    assert_eq!(sizes, [4_162, 4_453]);
    assert_eq!(per_answer, 8_615);

    // The logged chunks of each step still assemble to exactly its message: what a reader of
    // the raw stream (or a repair of a step cut before its message) rebuilds is unchanged.
    for (turn, step) in [(1, 1), (1, 2)] {
        let mut asm = dsh_llm::BlockAssembler::new();
        let mut message = None;
        for e in &events {
            match &e.data {
                dsh_session::EventData::AssistantChunk(c) if (c.turn, c.step) == (turn, step) => {
                    assert!(
                        !matches!(c.chunk, dsh_llm::StreamChunk::BlockEnd { .. }),
                        "a redundant block-end was logged at seq {}",
                        e.seq
                    );
                    asm.push(&c.chunk);
                }
                dsh_session::EventData::AssistantMessage(m) if (m.turn, m.step) == (turn, step) => {
                    message = Some(m.message.content.clone());
                }
                _ => {}
            }
        }
        let message = message.unwrap();
        assert_eq!(asm.blocks().unwrap(), message);
        let expected = if step == 1 {
            let dsh_llm::ContentBlock::ToolCall { id, .. } = &message[0] else {
                panic!("{message:?}")
            };
            vec![dsh_llm::ContentBlock::tool_call(
                id.clone(),
                "write",
                arguments.clone(),
            )]
        } else {
            vec![dsh_llm::ContentBlock::text(answer.clone())]
        };
        assert_eq!(message, expected);
    }
    // `dsh sessions verify` is green on the new log.
    let report = env.verify(&env.log(&id));
    assert_eq!(report["ok"], json!(true), "{report}");
}

#[test]
fn an_overwrite_of_a_9000_byte_file_stores_a_bounded_tool_result() {
    let env = Env::new();
    let old: String = (0..1_000).map(|i| format!("row {i:04}\n")).collect();
    std::fs::write(env.repo.join("out.txt"), &old).unwrap();
    let new: String = (0..1_000).map(|i| format!("ROW {i:04}\n")).collect();
    assert_eq!((old.len(), new.len()), (9_000, 9_000));
    let replay = Replay::start(json!([
        {"tool_calls": [["read", {"file_path": "out.txt"}]]},
        {"tool_calls": [["write", {"file_path": "out.txt", "content": new}]]},
        {"text": "Done."},
    ]));
    let id = env.exec_new(&replay, "rewrite out.txt");
    assert_eq!(
        std::fs::read_to_string(env.repo.join("out.txt")).unwrap(),
        new
    );
    let results: Vec<Value> = records(&env.log(&id))
        .into_iter()
        .filter(|r| r["type"] == "tool/result")
        .collect();
    assert_eq!(results.len(), 2);
    let write = normalized(&results[1]);
    let meta = &write["data"]["meta"];
    // The path is the absolute path of the temporary project: its length is taken out.
    let path_len = meta["path"].as_str().unwrap().len();
    // The diff: headers `--- a/<path>` and `+++ b/<path>`, one hunk header, 2,000 lines.
    assert_eq!(
        meta["diffStat"],
        json!({"addedLines": 1000, "removedLines": 1000, "diffBytes": 20_036 + 2 * path_len})
    );
    assert_eq!(meta.get("diff"), None);
    // The record: 536 bytes plus the path twice (meta and result text); 22,516 plus the path
    // four times while it held the whole diff (22,628 bytes with this 28-byte path).
    let size = write.to_string().len() + 1;
    eprintln!("write tool/result record: {size} bytes (path {path_len})");
    assert_eq!(size, 536 + 2 * path_len);
}
