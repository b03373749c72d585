//! Memory of a resume: writes a large JSONL session log, then loads it the way a resume does
//! (`SessionPersistence::prepare`, then `Session::from_restore`, then the model history
//! serialized as a request body would be) and compares the process's peak RSS with the memory
//! the decoded events occupy once restored.
//!
//! ```sh
//! cargo run --release -p dsh-persistence-jsonl --example load_rss -- gen DIR [MIB] [KIND]   # write the log
//! cargo run --release -p dsh-persistence-jsonl --example load_rss -- load DIR              # measure inspect
//! cargo run --release -p dsh-persistence-jsonl --example load_rss -- resume DIR            # measure a resume
//! ```
//! `KIND` is the log's composition: `titles` (4 events per turn: a 1,900-byte user message and a
//! session title), `stream` (the default: every turn streams a 20,000-byte `write` tool call and a
//! 2,000-byte answer in 4-byte deltas, as DeepSeek does, and reads back a 20,000-byte result) or
//! `reads` (every turn reads a 56,000-byte file: a large tool result with per-line meta). `MIB`
//! is the approximate log size (default 128). Generation runs in its own process so its
//! allocations do not count. Target (issues 8 and 13): peak RSS ≤ 1.5× the decoded events.
//! `tests/bench/resume_rss.sh` runs all of it and `dsh exec --resume` on the same logs;
//! results in docs/benchmarks.md.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "measurement harness"
)]
#![allow(missing_docs, reason = "example binary")]

use std::sync::Arc;

use dsh_persistence::{SessionHeader, SessionPersistence};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::{Session, SessionEvent};
use serde_json::{Value, json};

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Builds a log event by event: `seq` and `time` are stamped here.
struct Log {
    events: Vec<Arc<SessionEvent>>,
}

impl Log {
    fn seq(&self) -> u64 {
        self.events.len() as u64
    }

    fn push(&mut self, mut v: Value) -> u64 {
        let seq = self.seq();
        v["seq"] = json!(seq);
        v["time"] = json!(1_700_000_000_000u64 + seq);
        self.events
            .push(Arc::new(SessionEvent::from_value(v).unwrap()));
        seq
    }

    fn chunk(&mut self, turn: u64, step: u64, chunk: Value) -> u64 {
        self.push(json!({"type":"assistant/chunk","data":{"turn":turn,"step":step,"chunk":chunk}}))
    }

    /// Streams `text` as 4-byte deltas of a text block `index`; returns the chunk seqs.
    fn stream_text(&mut self, turn: u64, step: u64, index: u32, text: &str) -> Vec<u64> {
        let mut seqs = vec![self.chunk(
            turn,
            step,
            json!({"type":"block-start","index":index,"blockType":"text"}),
        )];
        for piece in pieces(text) {
            seqs.push(self.chunk(
                turn,
                step,
                json!({"type":"text-delta","index":index,"text":piece}),
            ));
        }
        seqs.push(self.chunk(
            turn,
            step,
            json!({"type":"block-end","index":index,"block":{"type":"text","text":text}}),
        ));
        seqs
    }
}

fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(4).map(|c| c.iter().collect()).collect()
}

fn words(n: usize, salt: u64) -> String {
    const W: [&str; 12] = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        "lambda", "mu",
    ];
    let mut s = String::with_capacity(n + 8);
    let mut x = salt.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    while s.len() < n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        s.push_str(W[(x >> 33) as usize % W.len()]);
        s.push(' ');
    }
    s.truncate(n);
    s
}

fn user(log: &mut Log, turn: u64, text: &str) {
    log.push(json!({"type":"user/message","data":{"id":format!("u{turn}"),"role":"user","content":[{"type":"text","text":text}],"source":{"kind":"user"}},"surfaceOp":"append"}));
}

fn usage_and_finish(log: &mut Log, turn: u64, step: u64, finish: &str) -> Vec<u64> {
    vec![
        log.chunk(
            turn,
            step,
            json!({"type":"usage","usage":{"inputTokens":100,"outputTokens":20}}),
        ),
        log.chunk(
            turn,
            step,
            json!({"type":"finish","reason":{"kind":finish}}),
        ),
    ]
}

/// One tool step: the model streams a call of `tool` with `args`, the result is `result`.
fn tool_step(log: &mut Log, turn: u64, args: &Value, tool: &str, result: &str, meta: Value) {
    let call_id = format!("call_{turn}");
    let arguments = args.to_string();
    log.push(json!({"type":"step/start","data":{"turn":turn,"step":1}}));
    let mut src = vec![log.chunk(
        turn,
        1,
        json!({"type":"block-start","index":0,"blockType":"tool-call"}),
    )];
    for (k, piece) in pieces(&arguments).into_iter().enumerate() {
        let mut c = json!({"type":"tool-call-delta","index":0,"id":call_id,"argumentsDelta":piece});
        if k == 0 {
            c["name"] = json!(tool);
        }
        src.push(log.chunk(turn, 1, c));
    }
    let call = json!({"type":"tool-call","id":call_id,"name":tool,"arguments":arguments});
    src.push(log.chunk(turn, 1, json!({"type":"block-end","index":0,"block":call})));
    src.extend(usage_and_finish(log, turn, 1, "tool-calls"));
    log.push(json!({"type":"assistant/message","data":{"turn":turn,"step":1,
        "message":{"id":format!("a{turn}"),"role":"assistant","content":[call],"source":{"kind":"model","provider":"deepseek","model":"m"}},
        "usage":{"inputTokens":100,"outputTokens":20}},"sourceEventSeqs":src,"surfaceOp":"append"}));
    let call_seq = log.push(json!({"type":"tool/call","data":{"turn":turn,"step":1,"callId":call_id,"name":tool,"arguments":arguments}}));
    log.push(json!({"type":"tool/result","data":{"turn":turn,"step":1,
        "message":{"id":format!("t{turn}"),"role":"user","content":[{"type":"tool-result","toolCallId":call_id,"content":[{"type":"text","text":result}],"isError":false}],"source":{"kind":"tool","callId":call_id}},
        "meta":meta},"sourceEventSeqs":[call_seq],"surfaceOp":"append"}));
    log.push(json!({"type":"step/end","data":{"turn":turn,"step":1}}));
}

fn answer_step(log: &mut Log, turn: u64, answer: &str) {
    log.push(json!({"type":"step/start","data":{"turn":turn,"step":2}}));
    let mut src = log.stream_text(turn, 2, 0, answer);
    src.extend(usage_and_finish(log, turn, 2, "stop"));
    log.push(json!({"type":"assistant/message","data":{"turn":turn,"step":2,
        "message":{"id":format!("b{turn}"),"role":"assistant","content":[{"type":"text","text":answer}],"source":{"kind":"model","provider":"deepseek","model":"m"}},
        "usage":{"inputTokens":100,"outputTokens":20}},"sourceEventSeqs":src,"surfaceOp":"append"}));
    log.push(json!({"type":"step/end","data":{"turn":turn,"step":2}}));
}

fn turn(log: &mut Log, kind: &str, turn: u64) {
    log.push(json!({"type":"turn/start","data":{"turn":turn}}));
    match kind {
        "titles" => {
            user(log, turn, &"x".repeat(1_900));
            log.push(json!({"type":"session/title","data":{"title":"x".repeat(1_900)}}));
        }
        "reads" => {
            user(log, turn, "read big.txt");
            let lines: Vec<String> = (0..1_000).map(|i| words(55, turn * 1_000 + i)).collect();
            let text: String = lines
                .iter()
                .enumerate()
                .map(|(i, l)| format!("{}: {l}\n", i + 1))
                .collect();
            let meta = json!({"path":"/bench/proj/big.txt","offset":1,
                "lines": lines.iter().enumerate().map(|(i, l)| json!({"number": i + 1, "text": l})).collect::<Vec<_>>(),
                "totalLines": lines.len()});
            tool_step(
                log,
                turn,
                &json!({"file_path":"/bench/proj/big.txt"}),
                "read",
                &text,
                meta,
            );
            answer_step(log, turn, &words(2_000, turn));
        }
        _ => {
            user(log, turn, "write out.txt, then read it back");
            let content = words(20_000, turn);
            tool_step(
                log,
                turn,
                &json!({"file_path":"/bench/proj/out.txt","content":content}),
                "write",
                &content,
                json!({"path":"/bench/proj/out.txt","operation":"create","diff":""}),
            );
            answer_step(log, turn, &words(2_000, turn + 7));
        }
    }
    log.push(json!({"type":"turn/end","data":{"turn":turn,"reason":{"kind":"completed"}}}));
}

fn report(what: &str, events: usize, base: u64, decoded: u64) {
    let peak = status_kib("VmHWM:");
    let overhead = peak.saturating_sub(base);
    println!(
        "{what}: events {events}; baseline {base} KiB; decoded events {decoded} KiB; peak {overhead} KiB above baseline; ratio {:.2}",
        overhead as f64 / decoded.max(1) as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = std::path::PathBuf::from(&args[2]);
    let p = jsonl_persistence(JsonlConfig {
        root: root.clone(),
        ..JsonlConfig::default()
    });
    match args[1].as_str() {
        "gen" => {
            let mib: u64 = args.get(3).map_or(128, |s| s.parse().unwrap());
            let kind = args.get(4).map_or("stream", String::as_str);
            let mut h = SessionHeader::new("big", 1);
            h.cwd = Some("/bench/proj".into());
            p.create(h).unwrap();
            let path = dsh_persistence_jsonl::log_path(&root, Some("/bench/proj"), "big").unwrap();
            let mut n = 0;
            let mut written = 0;
            while std::fs::metadata(&path).map_or(0, |m| m.len()) < mib << 20 {
                let mut log = Log { events: Vec::new() };
                // Keep the seqs contiguous across batches.
                let mut shift = Vec::new();
                for _ in 0..10 {
                    n += 1;
                    turn(&mut log, kind, n);
                }
                for e in log.events.drain(..) {
                    let mut v = e.to_value();
                    v["seq"] = json!(written + v["seq"].as_u64().unwrap());
                    if let Some(src) = v.get_mut("sourceEventSeqs") {
                        let moved: Vec<u64> = src
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|s| written + s.as_u64().unwrap())
                            .collect();
                        *src = json!(moved);
                    }
                    shift.push(Arc::new(SessionEvent::from_value(v).unwrap()));
                }
                written += shift.len() as u64;
                p.append("big", &shift).unwrap();
            }
            println!(
                "wrote {} turns, {written} events, {} bytes",
                n,
                std::fs::metadata(path).unwrap().len()
            );
        }
        "resume" => {
            let base = status_kib("VmRSS:");
            let loaded = p.prepare("big").unwrap();
            let n = loaded.events.len();
            let session = Session::from_restore("big", loaded.events, Some(loaded.header)).unwrap();
            let decoded = status_kib("VmRSS:").saturating_sub(base);
            report("load + restore", n, base, decoded);
            // The first request after a resume sends the whole derived history.
            let body = serde_json::to_vec(&session.derive_messages()).unwrap();
            report(
                &format!("+ history as a {} KiB request body", body.len() >> 10),
                n,
                base,
                decoded,
            );
            drop(body);
            drop(session);
        }
        _ => {
            let base = status_kib("VmRSS:");
            let loaded = p.inspect("big").unwrap();
            let decoded = status_kib("VmRSS:").saturating_sub(base);
            report("inspect", loaded.events.len(), base, decoded);
        }
    }
}
