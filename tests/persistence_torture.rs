//! kill -9 torture of the JSONL persistence write path (BC-24/BC-25): a child process (this test
//! binary re-invoked with `--exact torture_child`) runs a scripted multi-turn session through the
//! `WriteCoordinator` (5 ms batching window, explicit flushes after each `tool/call`, `step/end`
//! and `turn/end`) and prints `ACK <n>` after every flush that made the first `n` events durable.
//! The parent SIGKILLs it at a pseudo-random point, then loads the session and checks: the log
//! loads (torn tail dropped, open turn closed), the stored prefix equals the script exactly, it
//! holds every acknowledged event, the session invariants checker finds nothing, every tool call
//! has a result, and a second load adds nothing.
//!
//! Even iterations write plain `session.jsonl`, odd ones the zstd-framed layout.
//! Iterations: 50 by default, `DSH_TORTURE_ITERATIONS` overrides (e.g. 1000). Runs serially
//! (nextest test group `serial-torture`). This is the persistence-layer version; the full
//! agent-loop + replay-provider version comes later with the loop crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use dsh_kernel::ErrorCode;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_persistence::{SessionHeader, SessionPersistence, WriteCoordinator};
use dsh_persistence_jsonl::{Compression, JsonlConfig, jsonl_persistence};
use dsh_session::{EventData, SessionEvent, check_invariants};
use serde_json::{Value, json};

const ROOT_ENV: &str = "DSH_TORTURE_CHILD_ROOT";
const ZSTD_ENV: &str = "DSH_TORTURE_CHILD_ZSTD";

fn config(root: &std::path::Path, zstd: bool) -> JsonlConfig {
    JsonlConfig {
        root: root.to_path_buf(),
        pack_chunks: true,
        compression: if zstd {
            Compression::Zstd
        } else {
            Compression::None
        },
    }
}
const SESSION: &str = "torture";
const TURNS: u64 = 40;

fn header() -> SessionHeader {
    let mut h = SessionHeader::new(SESSION, 1_700_000_000_000);
    h.cwd = Some("/torture/proj".into());
    h
}

/// The deterministic script: `TURNS` turns of user → step 1 (text deltas, assistant message with
/// two tool calls, both `tool/call`s, both results) → step 2 (text) → end.
fn script() -> Vec<Arc<SessionEvent>> {
    let mut out: Vec<Arc<SessionEvent>> = Vec::new();
    let mut push = |kind: &str, data: Value, surface: bool, sources: Option<Vec<u64>>| {
        let seq = out.len() as u64;
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), json!(kind));
        obj.insert("seq".into(), json!(seq));
        obj.insert("time".into(), json!(1_700_000_000_000u64 + seq));
        obj.insert("data".into(), data);
        if let Some(s) = sources {
            obj.insert("sourceEventSeqs".into(), json!(s));
        }
        if surface {
            obj.insert("surfaceOp".into(), json!("append"));
        }
        out.push(Arc::new(
            SessionEvent::from_value(Value::Object(obj)).unwrap(),
        ));
        seq
    };
    for turn in 1..=TURNS {
        push("turn/start", json!({"turn": turn}), false, None);
        push(
            "user/message",
            json!({"id": format!("u{turn}"), "role": "user", "content": [{"type": "text", "text": format!("task {turn}")}], "source": {"kind": "user"}}),
            true,
            None,
        );
        push("step/start", json!({"turn": turn, "step": 1}), false, None);
        for part in ["Let", " me", " look", "."] {
            push(
                "assistant/chunk",
                json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": part}}),
                false,
                None,
            );
        }
        let calls = [format!("c{turn}a"), format!("c{turn}b")];
        let mut content = vec![json!({"type": "text", "text": "Let me look."})];
        for c in &calls {
            content.push(json!({"type": "tool-call", "id": c, "name": "bash", "arguments": "{\"command\":\"ls\"}"}));
        }
        push(
            "assistant/message",
            json!({"turn": turn, "step": 1, "message": {"id": format!("a{turn}"), "role": "assistant", "content": content, "source": {"kind": "model", "provider": "p", "model": "m"}}}),
            true,
            None,
        );
        for c in &calls {
            let cs = push(
                "tool/call",
                json!({"turn": turn, "step": 1, "callId": c, "name": "bash", "arguments": "{\"command\":\"ls\"}"}),
                false,
                None,
            );
            push(
                "tool/result",
                json!({"turn": turn, "step": 1, "message": {"id": format!("r{c}"), "role": "user", "content": [{"type": "tool-result", "toolCallId": c, "content": [{"type": "text", "text": "file.txt\n".repeat(20)}], "isError": false}], "source": {"kind": "tool", "callId": c}}}),
                true,
                Some(vec![cs]),
            );
        }
        push("step/end", json!({"turn": turn, "step": 1}), false, None);
        push("step/start", json!({"turn": turn, "step": 2}), false, None);
        push(
            "assistant/message",
            json!({"turn": turn, "step": 2, "message": {"id": format!("b{turn}"), "role": "assistant", "content": [{"type": "text", "text": "done"}], "source": {"kind": "model", "provider": "p", "model": "m"}}}),
            true,
            None,
        );
        push("step/end", json!({"turn": turn, "step": 2}), false, None);
        push(
            "turn/end",
            json!({"turn": turn, "reason": {"kind": "completed"}}),
            false,
            None,
        );
    }
    out
}

/// The child body: only active when re-invoked by the parent.
#[test]
fn torture_child() {
    let Ok(root) = std::env::var(ROOT_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let zstd = std::env::var(ZSTD_ENV).is_ok();
        let backend = jsonl_persistence(config(std::path::Path::new(&root), zstd));
        let coord = WriteCoordinator::new(backend, Duration::from_millis(5));
        let h = header();
        let events = script();
        let mut stdout = std::io::stdout();
        writeln!(stdout, "READY").unwrap();
        stdout.flush().unwrap();
        for e in events {
            coord.admit(&h, &e);
            let barrier = matches!(
                e.data,
                EventData::ToolCall(_) | EventData::StepEnd(_) | EventData::TurnEnd(_)
            );
            if barrier {
                coord.flush(SESSION).await.unwrap();
                writeln!(stdout, "ACK {}", e.seq + 1).unwrap();
                stdout.flush().unwrap();
            }
            if e.seq % 7 == 0 {
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
        }
    });
}

fn iterations() -> u64 {
    std::env::var("DSH_TORTURE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

#[test]
fn torture_kill9_repairs_and_keeps_acked_events() {
    let expected = script();
    let exe = std::env::current_exe().unwrap();
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut outcomes = [0u64; 3]; // [no log yet, balanced, repaired]
    for i in 0..iterations() {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay_ms = (rng >> 33) % 300;
        let dir = tempfile::tempdir().unwrap();
        // Odd iterations use the zstd-framed layout.
        let zstd = i % 2 == 1;
        let mut command = Command::new(&exe);
        if zstd {
            command.env(ZSTD_ENV, "1");
        }
        let mut child = command
            .args([
                "--exact",
                "torture_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROOT_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let acked = Arc::new(Mutex::new(0u64));
        let out = child.stdout.take().unwrap();
        let acked2 = acked.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.ends_with("READY") {
                    let _ = ready_tx.send(());
                }
                if let Some(n) = line
                    .strip_prefix("ACK ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
                {
                    let mut a = acked2.lock().unwrap();
                    *a = (*a).max(n);
                }
            }
        });
        // Kill a random time after the child reached its script (process start-up excluded).
        let _ = ready_rx.recv_timeout(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL on unix
        let _ = child.wait();
        reader.join().unwrap();
        let acked = *acked.lock().unwrap();

        let p = jsonl_persistence(config(dir.path(), zstd));
        let loaded = match p.load(SESSION) {
            Ok(l) => l,
            Err(e) if e.code() == "SESSION_NOT_FOUND" && acked == 0 => {
                outcomes[0] += 1;
                continue;
            }
            Err(e) => panic!(
                "iteration {i} (zstd {zstd}, kill after {delay_ms} ms, acked {acked}): load failed: {} {e}",
                e.code()
            ),
        };
        let stored = loaded.events.len() - loaded.repair.closers;
        assert!(
            stored as u64 >= acked,
            "iteration {i}: {stored} stored < {acked} acknowledged"
        );
        let want: Vec<SessionEvent> = expected[..stored].iter().map(|e| (**e).clone()).collect();
        assert_eq!(
            loaded.events[..stored],
            want[..],
            "iteration {i}: stored prefix differs from the script"
        );
        let arcs: Vec<Arc<SessionEvent>> = loaded.events.iter().cloned().map(Arc::new).collect();
        assert_eq!(check_invariants(&arcs, None), vec![], "iteration {i}");
        // Every tool call has a result.
        let mut open: Vec<String> = Vec::new();
        for e in &loaded.events {
            match &e.data {
                EventData::AssistantMessage(m) => {
                    for b in &m.message.content {
                        if let dsh_llm::ContentBlock::ToolCall { id, .. } = b {
                            open.push(id.to_string());
                        }
                    }
                }
                EventData::ToolResult(r) => {
                    let id = r.call_id().map(ToString::to_string).unwrap_or_default();
                    open.retain(|c| *c != id);
                }
                _ => {}
            }
        }
        assert_eq!(
            open,
            Vec::<String>::new(),
            "iteration {i}: tool calls without result"
        );
        if loaded.repair == Default::default() {
            outcomes[1] += 1;
        } else {
            outcomes[2] += 1;
        }
        p.release(SESSION);
        let again = jsonl_persistence(config(dir.path(), zstd))
            .load(SESSION)
            .unwrap();
        assert_eq!(
            again.events, loaded.events,
            "iteration {i}: repair not idempotent"
        );
    }
    eprintln!(
        "torture outcomes: no log {}, balanced {}, repaired {}",
        outcomes[0], outcomes[1], outcomes[2]
    );
}
