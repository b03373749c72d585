//! Shared test helpers: event builders for scripted sessions and the conformance-corpus filler
//! (template substitution + `seq`/`time` restoration; see `docs/persistence.md`, "Conformance
//! corpus").
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_session::{SessionEvent, packed};
use serde_json::{Value, json};

/// One event from its JSON record.
pub fn ev(v: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::from_value(v).unwrap())
}

/// A scripted session: push events with auto seq/time.
#[derive(Default)]
pub struct Script {
    pub events: Vec<Arc<SessionEvent>>,
}

impl Script {
    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }
    pub fn push(&mut self, kind: &str, data: Value) -> Arc<SessionEvent> {
        self.push_full(kind, data, None, None)
    }
    pub fn push_full(
        &mut self,
        kind: &str,
        data: Value,
        surface: Option<Value>,
        sources: Option<Vec<u64>>,
    ) -> Arc<SessionEvent> {
        let seq = self.next_seq();
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), json!(kind));
        obj.insert("seq".into(), json!(seq));
        obj.insert("time".into(), json!(1_700_000_000_000u64 + seq));
        obj.insert("data".into(), data);
        if let Some(s) = sources {
            obj.insert("sourceEventSeqs".into(), json!(s));
        }
        if let Some(op) = surface {
            obj.insert("surfaceOp".into(), op);
        }
        let e = ev(Value::Object(obj));
        self.events.push(e.clone());
        e
    }
    pub fn turn_start(&mut self, turn: u64) {
        self.push("turn/start", json!({"turn": turn}));
    }
    pub fn turn_end(&mut self, turn: u64) {
        self.push(
            "turn/end",
            json!({"turn": turn, "reason": {"kind": "completed"}}),
        );
    }
    pub fn step_start(&mut self, turn: u64, step: u64) {
        self.push("step/start", json!({"turn": turn, "step": step}));
    }
    pub fn step_end(&mut self, turn: u64, step: u64) {
        self.push("step/end", json!({"turn": turn, "step": step}));
    }
    pub fn user(&mut self, text: &str) {
        let id = format!("u-{}", self.next_seq());
        self.push_full(
            "user/message",
            json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}),
            Some(json!("append")),
            None,
        );
    }
    pub fn text_deltas(&mut self, turn: u64, step: u64, parts: &[&str]) {
        for p in parts {
            self.push("assistant/chunk", json!({"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": p}}));
        }
    }
    /// An assistant message with the given text and tool-call ids.
    pub fn assistant(&mut self, turn: u64, step: u64, text: &str, calls: &[&str]) {
        let mut content = vec![json!({"type": "text", "text": text})];
        for c in calls {
            content.push(json!({"type": "tool-call", "id": c, "name": "bash", "arguments": "{\"command\":\"ls\"}"}));
        }
        let id = format!("a-{}", self.next_seq());
        self.push_full(
            "assistant/message",
            json!({"turn": turn, "step": step, "message": {"id": id, "role": "assistant", "content": content, "source": {"kind": "model", "provider": "p", "model": "m"}}}),
            Some(json!("append")),
            None,
        );
    }
    pub fn tool_call(&mut self, turn: u64, step: u64, call: &str) -> u64 {
        let seq = self.next_seq();
        self.push("tool/call", json!({"turn": turn, "step": step, "callId": call, "name": "bash", "arguments": "{\"command\":\"ls\"}"}));
        seq
    }
    pub fn tool_result(&mut self, turn: u64, step: u64, call: &str, call_seq: u64) {
        let id = format!("r-{}", self.next_seq());
        self.push_full(
            "tool/result",
            json!({"turn": turn, "step": step, "message": {"id": id, "role": "user", "content": [{"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": "ok"}], "isError": false}], "source": {"kind": "tool", "callId": call}}}),
            Some(json!("append")),
            Some(vec![call_seq]),
        );
    }
    /// A complete turn: user, step with one tool call + result, step with text, end.
    pub fn full_turn(&mut self, turn: u64) {
        self.turn_start(turn);
        self.user("list files");
        self.step_start(turn, 1);
        self.text_deltas(turn, 1, &["I will", " run", " ls", "."]);
        let call = format!("call-{turn}");
        self.assistant(turn, 1, "I will run ls.", &[&call]);
        let cs = self.tool_call(turn, 1, &call);
        self.tool_result(turn, 1, &call, cs);
        self.step_end(turn, 1);
        self.step_start(turn, 2);
        self.assistant(turn, 2, "done", &[]);
        self.step_end(turn, 2);
        self.turn_end(turn);
    }
}

pub fn to_plain(events: &[Arc<SessionEvent>]) -> Vec<SessionEvent> {
    events.iter().map(|e| (**e).clone()).collect()
}

// ---- conformance corpus ----

/// The upstream corpus directory (`dsh_shared_corpus::require`: a test that reaches this without
/// the corpus fails; such tests are `#[ignore]`d by the crate's build script when it is absent
/// and `CI` is unset).
pub fn corpus_dir() -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
}

pub const CONFORMANCE_CWD: &str = "/tmp/dsh-conformance/workspace";

fn fill_str(s: &str) -> Value {
    match s {
        "{{tools}}" => {
            return json!([
                {"name": "bash", "description": "Run a shell command.", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
                {"name": "read", "description": "Read a file.", "parameters": {"type": "object"}}
            ]);
        }
        "{{system}}" => return json!("You are dsh. (conformance system prompt)"),
        "{{cwd}}" => return json!(CONFORMANCE_CWD),
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
                    out.push_str(CONFORMANCE_CWD);
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

pub fn fill(v: &mut Value) {
    match v {
        Value::String(s) => *v = fill_str(s),
        Value::Array(a) => a.iter_mut().for_each(fill),
        Value::Object(o) => o.values_mut().for_each(fill),
        _ => {}
    }
}

/// Restores `seq`/`time` (events) or `seq0`/`time0` (rows).
pub fn restore_envelopes(records: Vec<Value>) -> Vec<Value> {
    let mut seq = 0u64;
    let mut time = 1_700_000_000_000u64;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let Value::Object(obj) = r else {
            panic!("record is not an object")
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
            let span: u64 = data
                .get("dt")
                .and_then(Value::as_array)
                .map_or(0, |a| a.iter().filter_map(Value::as_u64).sum());
            seq += members;
            time += span + 1;
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
    out
}

/// A filled corpus file: header value + records.
pub struct Filled {
    pub header: Value,
    pub records: Vec<Value>,
}

pub fn load_corpus_file(path: &Path) -> Filled {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    fill(&mut header);
    let raw: Vec<Value> = lines
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            fill(&mut v);
            v
        })
        .collect();
    Filled {
        header,
        records: restore_envelopes(raw),
    }
}

/// Writes header + records as a JSONL log at `layout(root, cwd, id)` (the JSONL backend's
/// `log_path`); returns (id, path).
pub fn write_raw_log(
    root: &Path,
    filled: &Filled,
    layout: impl Fn(&Path, Option<&str>, &str) -> PathBuf,
) -> (String, PathBuf) {
    let id = filled.header["id"].as_str().unwrap().to_owned();
    let cwd = filled.header.get("cwd").and_then(Value::as_str);
    let path = layout(root, cwd, &id);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = filled.header.to_string();
    text.push('\n');
    for r in &filled.records {
        text.push_str(&r.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    (id, path)
}

pub fn corpus_files() -> Vec<PathBuf> {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
}
