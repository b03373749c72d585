//! Memory of a resume: loads a 100,000-event / ~105 MB JSONL log and compares the process's peak
//! RSS during the load with the memory the decoded events occupy once loaded.
//!
//! ```sh
//! cargo run --release -p dsh-persistence --example load_rss -- gen /tmp/dsh-rss   # write the log
//! cargo run --release -p dsh-persistence --example load_rss -- load /tmp/dsh-rss  # measure
//! ```
//! Generation runs in its own process so its allocations do not count. Target (issue 8): peak
//! RSS ≤ 1.5× the decoded events.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "measurement harness"
)]
#![allow(missing_docs, reason = "example binary")]

use std::sync::Arc;

use dsh_persistence::{SessionHeader, SessionPersistence};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_session::SessionEvent;
use serde_json::json;

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn event(seq: u64, payload: &str) -> Arc<SessionEvent> {
    let turn = seq / 4 + 1;
    let v = match seq % 4 {
        0 => json!({"type":"turn/start","seq":seq,"time":seq,"data":{"turn":turn}}),
        1 => {
            json!({"type":"user/message","seq":seq,"time":seq,"data":{"id":format!("u{seq}"),"role":"user","content":[{"type":"text","text":payload}],"source":{"kind":"user"}},"surfaceOp":"append"})
        }
        2 => json!({"type":"session/title","seq":seq,"time":seq,"data":{"title":payload}}),
        _ => {
            json!({"type":"turn/end","seq":seq,"time":seq,"data":{"turn":turn,"reason":{"kind":"completed"}}})
        }
    };
    Arc::new(SessionEvent::from_value(v).unwrap())
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
            let payload = "x".repeat(1_900);
            let mut h = SessionHeader::new("big", 1);
            h.cwd = Some("/bench/proj".into());
            p.create(h).unwrap();
            let evs: Vec<_> = (0..100_000).map(|s| event(s, &payload)).collect();
            for chunk in evs.chunks(10_000) {
                p.append("big", chunk).unwrap();
            }
            let path = dsh_persistence_jsonl::log_path(&root, Some("/bench/proj"), "big").unwrap();
            println!("wrote {} bytes", std::fs::metadata(path).unwrap().len());
        }
        _ => {
            let base = status_kib("VmRSS:");
            let loaded = p.inspect("big").unwrap();
            let after = status_kib("VmRSS:");
            let peak = status_kib("VmHWM:");
            let decoded = after.saturating_sub(base);
            let overhead = peak.saturating_sub(base);
            println!(
                "events {}; baseline {} KiB; decoded events {} KiB; peak during load {} KiB above baseline; ratio {:.2}",
                loaded.events.len(),
                base,
                decoded,
                overhead,
                overhead as f64 / decoded.max(1) as f64
            );
        }
    }
}
