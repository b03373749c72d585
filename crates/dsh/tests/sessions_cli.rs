//! End-to-end tests of `dsh sessions list|show|fork|verify|import`, running the built binary
//! against hand-written fixture logs in a temporary `DSH_HOME`, the upstream conformance corpus
//! (`docs/persistence.md`, "Conformance corpus"; skipped when absent) and the replay provider for
//! `exec --resume`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_dsh");

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        Self { dir }
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("ws")).unwrap()
    }
    fn sessions(&self) -> PathBuf {
        self.home().join("sessions")
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.ws())
            .env("DSH_HOME", self.home())
            .env_remove("DSH_LOG")
            .env_remove("DEEPSEEK_BASE_URL")
            .env_remove("DEEPSEEK_API_KEY");
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
    /// Writes a log at the JSONL layout path; returns the path.
    fn store(&self, id: &str, cwd: &str, lines: &[String], mtime_secs: u64) -> PathBuf {
        let path = self
            .sessions()
            .join(project_dir(cwd))
            .join(id)
            .join("session.jsonl");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, join(lines)).unwrap();
        set_mtime(&path, mtime_secs);
        path
    }
}

fn project_dir(cwd: &str) -> String {
    format!("--{}--", cwd.trim_start_matches('/').replace('/', "-"))
}

fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn join(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn header(id: &str, created: u64, cwd: &str) -> String {
    json!({"type": "session", "version": 0, "id": id, "createdAt": created, "cwd": cwd, "delegationDepth": 0}).to_string()
}

/// Event lines (dsh key order) of `turns` complete turns starting at seq 0, time `t0 + seq`.
/// Turn n: user prompt, a `bash` call with a two-line result, a final answer.
fn turn_lines(turns: &[(&str, &str)], t0: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |v: Value| {
        let seq = out.len() as u64;
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), v["type"].clone());
        obj.insert("seq".into(), json!(seq));
        obj.insert("time".into(), json!(t0 + seq));
        for (k, x) in v.as_object().unwrap() {
            if k != "type" {
                obj.insert(k.clone(), x.clone());
            }
        }
        out.push(Value::Object(obj).to_string());
    };
    for (i, (prompt, answer)) in turns.iter().enumerate() {
        let t = i as u64 + 1;
        let call = format!("c{t}");
        push(json!({"type": "turn/start", "data": {"turn": t}}));
        push(json!({"type": "step/start", "data": {"turn": t, "step": 1}}));
        push(
            json!({"type": "user/message", "data": {"id": format!("u{t}"), "role": "user", "content": [{"type": "text", "text": prompt}], "source": {"kind": "user"}}, "surfaceOp": "append"}),
        );
        push(
            json!({"type": "assistant/message", "data": {"turn": t, "step": 1, "message": {"id": format!("a{t}"), "role": "assistant", "content": [{"type": "text", "text": "Looking."}, {"type": "tool-call", "id": call, "name": "bash", "arguments": "{\"command\":\"ls\"}"}], "source": {"kind": "model", "provider": "p", "model": "m"}}}, "surfaceOp": "append"}),
        );
        let call_seq = (i as u64) * 11 + 4;
        push(
            json!({"type": "tool/call", "data": {"turn": t, "step": 1, "callId": call, "name": "bash", "arguments": "{\"command\":\"ls\"}"}}),
        );
        push(
            json!({"type": "tool/result", "data": {"turn": t, "step": 1, "message": {"id": format!("r{t}"), "role": "user", "content": [{"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": "a.txt\nb.txt"}], "isError": false}], "source": {"kind": "tool", "callId": call}}}, "sourceEventSeqs": [call_seq], "surfaceOp": "append"}),
        );
        push(json!({"type": "step/end", "data": {"turn": t, "step": 1}}));
        push(json!({"type": "step/start", "data": {"turn": t, "step": 2}}));
        push(
            json!({"type": "assistant/message", "data": {"turn": t, "step": 2, "message": {"id": format!("b{t}"), "role": "assistant", "content": [{"type": "text", "text": answer}], "source": {"kind": "model", "provider": "p", "model": "m"}}}, "surfaceOp": "append"}),
        );
        push(json!({"type": "step/end", "data": {"turn": t, "step": 2}}));
        push(json!({"type": "turn/end", "data": {"turn": t, "reason": {"kind": "completed"}}}));
    }
    out
}

fn log_lines(id: &str, created: u64, cwd: &str, turns: &[(&str, &str)]) -> Vec<String> {
    let mut lines = vec![header(id, created, cwd)];
    lines.extend(turn_lines(turns, created));
    lines
}

#[test]
fn list_is_newest_first_with_title_turns_activity_and_cwd() {
    let h = Home::new();
    h.store(
        "s-old",
        "/w/a",
        &log_lines(
            "s-old",
            1_000,
            "/w/a",
            &[("fix the bug\nin main", "Fixed.")],
        ),
        1_700_000_000,
    );
    h.store(
        "s-new",
        "/w/b",
        &log_lines(
            "s-new",
            2_000,
            "/w/b",
            &[("write tests", "Done."), ("run them", "All pass.")],
        ),
        1_800_000_000,
    );
    let o = h.run(&["sessions", "list", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        json!([
            {"id": "s-new", "title": "write tests", "turns": 2, "lastActivity": 1_800_000_000_000u64, "createdAt": 2000, "cwd": "/w/b"},
            {"id": "s-old", "title": "fix the bug", "turns": 1, "lastActivity": 1_700_000_000_000u64, "createdAt": 1000, "cwd": "/w/a"}
        ])
    );
    let o = h.run(&["sessions", "list"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "ID     LAST ACTIVITY     TURNS  TITLE / CWD\n\
         s-new  2027-01-15 08:00      2  write tests  (/w/b)\n\
         s-old  2023-11-14 22:13      1  fix the bug  (/w/a)\n"
    );
}

#[test]
fn list_of_an_empty_store() {
    let h = Home::new();
    let o = h.run(&["sessions", "list"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "no stored sessions\n");
    let o = h.run(&["sessions", "list", "--json"]);
    assert_eq!(stdout(&o), "[]\n");
}

#[test]
fn show_prints_the_transcript_and_json_lines() {
    let h = Home::new();
    let lines = log_lines("s1", 1_000, "/w/a", &[("fix the bug\nin main", "Fixed.")]);
    h.store("s1", "/w/a", &lines, 1_700_000_000);
    let o = h.run(&["sessions", "show", "s1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "session s1  created 1970-01-01 00:00 UTC  cwd /w/a\n\
         \n\
         ── turn 1\n\
         > fix the bug\n\
         > in main\n\
         Looking.\n\
         • bash ls\n\
         \x20 → a.txt (+1 lines)\n\
         Fixed.\n\
         ── turn 1 end: completed\n"
    );
    let o = h.run(&["sessions", "show", "s1", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), join(&lines[1..]));
    let o = h.run(&["sessions", "show", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: no stored session `nope` (see `dsh sessions list`)\n"
    );
}

fn find_log(root: &Path, id: &str) -> PathBuf {
    for project in std::fs::read_dir(root).unwrap() {
        let p = project.unwrap().path().join(id).join("session.jsonl");
        if p.is_file() {
            return p;
        }
    }
    panic!("no log for {id}");
}

#[test]
fn fork_at_a_seq_writes_the_prefix_then_end_seed() {
    let h = Home::new();
    let lines = log_lines(
        "p1",
        1_000,
        "/w/a",
        &[("first", "One."), ("second", "Two.")],
    );
    h.store("p1", "/w/a", &lines, 1_700_000_000);
    // Seq 10 is the first turn's turn/end.
    let o = h.run(&["sessions", "fork", "p1", "--at", "10"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let child = stdout(&o).trim().to_owned();
    assert_eq!(child.len(), 36, "a UUID: {child}");
    let text = std::fs::read_to_string(find_log(&h.sessions(), &child)).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), 1 + 11 + 1);
    let mut head: Value = serde_json::from_str(got[0]).unwrap();
    let created = head["createdAt"].as_u64().unwrap();
    head.as_object_mut().unwrap().remove("createdAt");
    assert_eq!(
        head,
        json!({"type": "session", "version": 0, "id": child, "cwd": "/w/a", "parentSession": "p1", "seedLength": 11, "delegationDepth": 0})
    );
    assert_eq!(
        got[1..12],
        lines[1..12].iter().map(String::as_str).collect::<Vec<_>>()[..]
    );
    assert_eq!(
        got[12],
        format!(r#"{{"type":"session/end-seed","seq":11,"time":{created},"data":{{}}}}"#)
    );
    // The child is listed (one turn, its parent's first prompt) and verifies cleanly.
    let o = h.run(&[
        "sessions",
        "verify",
        find_log(&h.sessions(), &child).to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let o = h.run(&["sessions", "list", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == json!(child))
        .unwrap();
    assert_eq!(row["turns"], json!(1));
    assert_eq!(row["title"], json!("first"));
    assert_eq!(row["parentSession"], json!("p1"));
}

#[test]
fn fork_without_at_takes_the_whole_log() {
    let h = Home::new();
    h.store(
        "p2",
        "/w/a",
        &log_lines("p2", 1_000, "/w/a", &[("only", "Yes.")]),
        1_700_000_000,
    );
    let o = h.run(&["sessions", "fork", "p2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let child = stdout(&o).trim().to_owned();
    let text = std::fs::read_to_string(find_log(&h.sessions(), &child)).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], json!("session/end-seed"));
    assert_eq!(last["seq"], json!(11));
    let head: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(head["seedLength"], json!(11));
}

#[test]
fn fork_inside_an_open_turn_is_refused() {
    let h = Home::new();
    h.store(
        "p3",
        "/w/a",
        &log_lines("p3", 1_000, "/w/a", &[("first", "One.")]),
        1_700_000_000,
    );
    let o = h.run(&["sessions", "fork", "p3", "--at", "4"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: cannot fork `p3` at seq 4: the prefix ends inside open turn 1 (pick a seq at or \
         after its turn/end, or before its turn/start)\n"
    );
    let o = h.run(&["sessions", "fork", "p3", "--at", "11"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: --at 11 is past the end of session `p3` (11 events, last seq 10)\n"
    );
    // Nothing was stored.
    let o = h.run(&["sessions", "list", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn verify_a_clean_log() {
    let h = Home::new();
    let p = write_file(
        h.dir.path(),
        "clean.jsonl",
        &join(&log_lines("v1", 1_000, "/w/a", &[("a", "b")])),
    );
    let ps = p.to_str().unwrap();
    let o = h.run(&["sessions", "verify", ps]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), format!("{ps}: ok (11 events)\n"));
    let o = h.run(&["sessions", "verify", ps, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        json!({"path": ps, "ok": true, "events": 11, "errors": [], "repair": {"tornTail": false, "closers": []}, "notes": []})
    );
}

#[test]
fn verify_reports_a_torn_last_line_and_the_closers() {
    let h = Home::new();
    let text = join(&log_lines("v2", 1_000, "/w/a", &[("a", "b")]));
    // Cut the final `turn/end` record in half (no newline).
    let cut = text.len() - 20;
    let p = write_file(h.dir.path(), "torn.jsonl", &text[..cut]);
    let before = std::fs::read(&p).unwrap();
    let ps = p.to_str().unwrap();
    let o = h.run(&["sessions", "verify", ps, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        json!({"path": ps, "ok": false, "events": 10, "errors": [], "repair": {"tornTail": true, "closers": ["turn/end"]}, "notes": []})
    );
    let o = h.run(&["sessions", "verify", ps]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!(
            "repair: the last line is torn (unterminated); a load drops it\n\
             repair: the last turn is open; a load closes it with turn/end\n\
             {ps}: loads only after repair (10 events)\n"
        )
    );
    assert_eq!(std::fs::read(&p).unwrap(), before, "verify never writes");
}

#[test]
fn verify_reports_an_open_turn_with_a_pending_call() {
    let h = Home::new();
    let lines = log_lines("v3", 1_000, "/w/a", &[("a", "b")]);
    // Through the tool/call (seq 4): the call is pending, step 1 open.
    let p = write_file(h.dir.path(), "open.jsonl", &join(&lines[..6]));
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["repair"],
        json!({"tornTail": false, "closers": ["tool/result", "step/end", "turn/end"]})
    );
    assert_eq!(v["errors"], json!([]));
}

#[test]
fn verify_reports_a_garbage_middle_line_as_corruption() {
    let h = Home::new();
    let mut lines = log_lines("v4", 1_000, "/w/a", &[("a", "b")]);
    lines[4] = "{not json".to_owned();
    let p = write_file(h.dir.path(), "garbage.jsonl", &join(&lines));
    let ps = p.to_str().unwrap();
    let o = h.run(&["sessions", "verify", ps, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], json!(false));
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors[0]["code"], json!("SESSION_PERSISTENCE_CORRUPTION"));
    assert_eq!(errors[0]["line"], json!(5));
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("unparsable committed record:"),
        "{v}"
    );
    // The gap it leaves is reported too.
    assert_eq!(errors[1]["code"], json!("SESSION_PERSISTENCE_CORRUPTION"));
    assert_eq!(errors[1]["message"], json!("seq gap (expected 3, got 4)"));
    assert_eq!(errors[1]["line"], json!(6));
    let o = h.run(&["sessions", "verify", ps]);
    let text = stdout(&o);
    assert!(
        text.starts_with(
            "error SESSION_PERSISTENCE_CORRUPTION (line 5): unparsable committed record:"
        ),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("{ps}: errors (10 events)\n")),
        "{text}"
    );
}

#[test]
fn verify_reports_append_rule_and_invariant_violations() {
    let h = Home::new();
    let mut lines = log_lines("v5", 1_000, "/w/a", &[("a", "b")]);
    // A tool/result for a call that was never announced.
    let mut v: Value = serde_json::from_str(&lines[6]).unwrap();
    v["data"]["message"]["content"][0]["toolCallId"] = json!("zzz");
    v["data"]["message"]["source"]["callId"] = json!("zzz");
    lines[6] = v.to_string();
    let p = write_file(h.dir.path(), "bad.jsonl", &join(&lines));
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["errors"][0]["code"], json!("UNPAIRED_TOOL_RESULT"));
    assert_eq!(v["errors"][0]["line"], json!(7));
    assert_eq!(v["repair"], json!({"tornTail": false, "closers": []}));
}

#[test]
fn verify_refuses_damaged_zstd_and_bad_headers() {
    let h = Home::new();
    let p = write_file(h.dir.path(), "session.jsonl.zstd", "xx");
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["errors"],
        json!([{"code": "SESSION_PERSISTENCE_CORRUPTION", "message": "missing or incomplete header frame", "line": 1}])
    );
    let p = write_file(
        h.dir.path(),
        "newer.jsonl",
        "{\"type\":\"session\",\"version\":3,\"id\":\"x\",\"createdAt\":1}\n",
    );
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["errors"][0]["code"], json!("SESSION_FORMAT_UNSUPPORTED"));
    assert_eq!(v["errors"][0]["line"], json!(1));
    let p = write_file(h.dir.path(), "notes.txt", "hello");
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["errors"],
        json!([{"code": "SESSION_FILE_UNRECOGNIZED", "message": format!("{} is not a session file of any registered backend (registered: jsonl, sqlite)", p.display())}])
    );
}

/// One zstd frame (level 3, content checksum) holding `text`, as the JSONL backend writes them.
fn zstd_frame(text: &str) -> Vec<u8> {
    dsh_persistence_jsonl::zstd_frame(text.as_bytes()).unwrap()
}

#[test]
fn verify_a_zstd_log() {
    let h = Home::new();
    let lines = log_lines("z1", 1_000, "/w/a", &[("a", "b")]);
    // The upstream layout: one frame for the header line, one per append batch.
    let mut bytes = zstd_frame(&format!("{}\n", lines[0]));
    bytes.extend(zstd_frame(&join(&lines[1..6])));
    bytes.extend(zstd_frame(&join(&lines[6..])));
    let p = h.dir.path().join("session.jsonl.zstd");
    std::fs::write(&p, &bytes).unwrap();
    let ps = p.to_str().unwrap();
    let o = h.run(&["sessions", "verify", ps]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), format!("{ps}: ok (11 events)\n"));
    // A torn final frame: a load keeps its complete records (none here) and closes the turn.
    let cut = bytes.len() - 5;
    std::fs::write(&p, &bytes[..cut]).unwrap();
    let o = h.run(&["sessions", "verify", ps, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        json!({"path": ps, "ok": false, "events": 5, "errors": [], "repair": {"tornTail": true, "closers": ["tool/result", "step/end", "turn/end"]}, "notes": []})
    );
}

// ---- upstream conformance corpus ----

fn corpus_dir() -> PathBuf {
    dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
}

const CONFORMANCE_CWD: &str = "/tmp/dsh-conformance/workspace";

/// Substitutes the corpus templates with concrete values (the README's procedure), leaving the
/// stripped `seq`/`time` envelopes absent: `verify` restores those itself.
fn fill(v: &mut Value) {
    match v {
        Value::String(s) => {
            *v = match s.as_str() {
                "{{tools}}" => {
                    json!([{"name": "bash", "description": "Run a shell command.", "parameters": {"type": "object"}}])
                }
                "{{system}}" => json!("You are dsh. (conformance system prompt)"),
                "{{cwd}}" => json!(CONFORMANCE_CWD),
                other if other.contains("{{") => {
                    let mut out = String::new();
                    let mut rest = other;
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
                other => Value::String(other.to_owned()),
            }
        }
        Value::Array(a) => a.iter_mut().for_each(fill),
        Value::Object(o) => o.values_mut().for_each(fill),
        _ => {}
    }
}

fn filled_copy(src: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(src).unwrap();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut v: Value = serde_json::from_str(line).unwrap();
        fill(&mut v);
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let p = dir.join(src.file_name().unwrap());
    std::fs::write(&p, out).unwrap();
    p
}

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn verify_upstream_conformance_logs() {
    let dir = corpus_dir();
    let h = Home::new();
    // A raw snapshot is templated: its header cwd `{{cwd}}` is not a real path.
    let raw = dir.join("examples__acp-agent__snapshots__bash-tool-turn__session.jsonl");
    if raw.is_file() {
        let o = h.run(&["sessions", "verify", raw.to_str().unwrap(), "--json"]);
        assert_eq!(o.status.code(), Some(1));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(
            v["errors"][0]["code"],
            json!("SESSION_PERSISTENCE_CORRUPTION")
        );
        assert_eq!(v["errors"][0]["line"], json!(1));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut clean = 0;
    for f in &files {
        let p = filled_copy(f, h.dir.path());
        let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["errors"], json!([]), "{}", f.display());
        assert_eq!(v["repair"]["tornTail"], json!(false), "{}", f.display());
        // Every record lacks seq/time; verify restores them and says so (header-only files
        // have no records).
        let notes = v["notes"].as_array().unwrap();
        if v["events"] != json!(0) {
            assert_eq!(notes.len(), 1, "{}", f.display());
            assert!(
                notes[0].as_str().unwrap().contains("had no seq/time"),
                "{}",
                f.display()
            );
        }
        if v["ok"] == json!(true) {
            assert_eq!(o.status.code(), Some(0));
            clean += 1;
        } else {
            // Only an open trailing turn may need repair in a recorded snapshot.
            assert_eq!(o.status.code(), Some(1));
            let closers = v["repair"]["closers"].as_array().unwrap();
            assert_eq!(
                closers.last().unwrap(),
                &json!("turn/end"),
                "{}",
                f.display()
            );
        }
    }
    assert!(clean > 0);

    // Import restores the envelopes durably: the stored copy verifies without notes.
    let src = dir.join("examples__acp-agent__snapshots__bash-tool-turn__session.jsonl");
    if src.is_file() {
        let filled = filled_copy(&src, h.dir.path());
        let before: Value = serde_json::from_str(&stdout(&h.run(&[
            "sessions",
            "verify",
            filled.to_str().unwrap(),
            "--json",
        ])))
        .unwrap();
        let o = h.run(&["sessions", "import", filled.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let id = stdout(&o).trim().to_owned();
        let stored = find_log(&h.sessions(), &id);
        let o = h.run(&["sessions", "verify", stored.to_str().unwrap(), "--json"]);
        assert_eq!(o.status.code(), Some(0));
        let after: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(after["notes"], json!([]));
        assert_eq!(after["events"], before["events"]);
    }
}

// ---- import + resume ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_then_exec_resume_continues_the_session() {
    use dsh_test_support::{ReplayOptions, ReplayServer, Script, ScriptResponse};
    let h = Home::new();
    let ws = h.ws();
    let cwd = ws.to_str().unwrap().to_owned();
    let mut lines = log_lines("imp-1", 1_000, &cwd, &[("first", "One.")]);
    // A torn tail: the import repairs it like a load (drop it, close the open turn).
    lines.pop();
    let mut text = join(&lines);
    text.push_str("{\"type\":\"turn/e");
    let p = write_file(h.dir.path(), "import.jsonl", &text);
    let o = h.run(&["sessions", "import", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "imp-1\n");
    let stored = std::fs::read_to_string(find_log(&h.sessions(), "imp-1")).unwrap();
    let last: Value = serde_json::from_str(stored.lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        json!({"type": "turn/end", "seq": 10, "time": 1009, "data": {"turn": 1, "reason": {"kind": "interrupted"}}})
    );
    // A second import of the same id is refused.
    let o = h.run(&["sessions", "import", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: a session `imp-1` already exists in the store; not imported\n"
    );

    // Stateless: the response index is the number of assistant messages in the request (2).
    let server = ReplayServer::start(
        Script::new(vec![
            ScriptResponse::text("unused 0"),
            ScriptResponse::text("unused 1"),
            ScriptResponse::text("resumed answer"),
        ]),
        ReplayOptions {
            stateless: true,
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let mut cmd = h.cmd(&["exec", "--resume", "imp-1", "go on"]);
    cmd.env("DEEPSEEK_BASE_URL", server.base_url())
        .env("DEEPSEEK_API_KEY", "test");
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "resumed answer\n");
    let bodies = server.chat_bodies();
    assert_eq!(bodies.len(), 1);
    let o = h.run(&["sessions", "show", "imp-1"]);
    let shown = stdout(&o);
    assert!(
        shown.ends_with(
            "── turn 2\n> go on\nresumed answer\n── turn 2 end: completed\n   \
             usage: 100 in · 3 out · $0.000015\n"
        ),
        "{shown}"
    );
    assert!(shown.contains("── turn 1 end: interrupted\n"), "{shown}");
}

#[test]
fn sqlite_backend_import_list_show_fork() {
    let h = Home::new();
    let sq = ["-c", "persistence.backend=sqlite"];
    let lines = log_lines(
        "q1",
        1_000,
        "/w/q",
        &[("first", "One."), ("second", "Two.")],
    );
    let p = write_file(h.dir.path(), "q1.jsonl", &join(&lines));
    let args =
        |rest: &[&str]| -> Vec<String> { sq.iter().chain(rest).map(|s| (*s).to_owned()).collect() };
    let run = |rest: &[&str]| {
        let a = args(rest);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        h.run(&refs)
    };
    let o = run(&["sessions", "import", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "q1\n");
    // Without a log file, last activity is the last event's time.
    let o = run(&["sessions", "list", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        json!([{"id": "q1", "title": "first", "turns": 2, "lastActivity": 1021, "createdAt": 1000, "cwd": "/w/q"}])
    );
    let o = run(&["sessions", "show", "q1", "--json"]);
    assert_eq!(stdout(&o), join(&lines[1..]));
    let o = run(&["sessions", "fork", "q1", "--at", "10"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let child = stdout(&o).trim().to_owned();
    let o = run(&["sessions", "show", &child, "--json"]);
    let got: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(got.len(), 12);
    assert_eq!(got[..11], lines[1..12]);
    let last: Value = serde_json::from_str(&got[11]).unwrap();
    assert_eq!(last["type"], json!("session/end-seed"));
    assert_eq!(last["seq"], json!(11));
    let o = run(&["sessions", "import", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn export_copies_into_another_backend_and_verify_takes_a_stored_id() {
    let h = Home::new();
    let lines = log_lines("e1", 1_000, "/w/e", &[("first", "One.")]);
    h.store("e1", "/w/e", &lines, 1_700_000_000);
    let o = h.run(&["sessions", "export", "e1", "--to", "sqlite"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "e1\n");
    assert!(h.sessions().join("sessions.sqlite").is_file());
    let sq = |rest: &[&str]| {
        let mut a = vec!["-c", "persistence.backend=sqlite"];
        a.extend_from_slice(rest);
        h.run(&a)
    };
    // The SQLite store lists and shows it; last activity is the last event's time there.
    let o = sq(&["sessions", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "ID  LAST ACTIVITY     TURNS  TITLE / CWD\n\
         e1  1970-01-01 00:00      1  first  (/w/e)\n"
    );
    let o = sq(&["sessions", "show", "e1", "--json"]);
    assert_eq!(stdout(&o), join(&lines[1..]));
    // `verify ID` checks the stored session of the configured backend.
    let o = sq(&["sessions", "verify", "e1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(stdout(&o), "e1: ok (11 events)\n");
    let o = h.run(&["sessions", "verify", "e1", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], json!(true));
    assert!(
        v["path"].as_str().unwrap().ends_with("/e1/session.jsonl"),
        "{v}"
    );
    // The SQLite database itself verifies too (one report per stored session).
    let db = h.sessions().join("sessions.sqlite");
    let o = h.run(&["sessions", "verify", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(
        stdout(&o),
        format!("{}: ok (11 events)\n", db.join("e1").display())
    );
    // Refusals: already there, same backend, unknown backend.
    let o = h.run(&["sessions", "export", "e1", "--to", "sqlite"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: backend `sqlite` already has a session `e1`; not exported\n"
    );
    let o = h.run(&["sessions", "export", "e1", "--to", "jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: session `e1` is already stored by backend `jsonl`\n"
    );
    let o = h.run(&["sessions", "export", "e1", "--to", "postgres"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: unknown session persistence backend `postgres` (registered: jsonl, sqlite)\n"
    );
}

#[test]
fn an_unknown_backend_setting_is_a_usage_error_naming_the_registered_ones() {
    let h = Home::new();
    let o = h.run(&["-c", "persistence.backend=postgres", "sessions", "list"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: persistence.backend: unknown session persistence backend `postgres` (registered: \
         jsonl, sqlite)\n"
    );
    let o = h.run(&["-c", "persistence.backend=postgres", "exec", "hello"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: persistence.backend: unknown session persistence backend `postgres` \
         (registered: jsonl, sqlite)\n"
    );
}

#[test]
fn verify_uses_the_plugin_declarations_a_resume_would_use() {
    let h = Home::new();
    let mut lines = log_lines("v6", 1_000, "/w/a", &[("a", "b")]);
    // `llm/retry` is declared by dsh-llm-retry with a payload validator.
    lines.insert(
        4,
        r#"{"type":"llm/retry","seq":3,"time":1003,"data":{"bogus":true}}"#.to_owned(),
    );
    // Renumber the records after it.
    for (i, l) in lines.iter_mut().enumerate().skip(5) {
        let mut v: Value = serde_json::from_str(l).unwrap();
        v["seq"] = json!(i as u64 - 1);
        if let Some(src) = v.get_mut("sourceEventSeqs") {
            *src = json!([src[0].as_u64().unwrap() + 1]);
        }
        *l = v.to_string();
    }
    let p = write_file(h.dir.path(), "retry.jsonl", &join(&lines));
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["errors"][0]["code"],
        json!("INVALID_PLUGIN_PAYLOAD"),
        "{v}"
    );
    assert_eq!(v["errors"][0]["line"], json!(5));
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn verify_locates_a_bad_event_inside_a_fork_seed() {
    let h = Home::new();
    let parent = log_lines("v7", 1_000, "/w/a", &[("a", "b")]);
    let mut lines = vec![header("v7c", 2_000, "/w/a")];
    lines.extend(parent[1..].iter().cloned());
    lines.push(r#"{"type":"session/end-seed","seq":11,"time":2000,"data":{}}"#.to_owned());
    // Break step numbering inside the seed: the second step/start says step 1 again.
    let mut v: Value = serde_json::from_str(&lines[8]).unwrap();
    assert_eq!(v["type"], json!("step/start"));
    v["data"]["step"] = json!(1);
    lines[8] = v.to_string();
    let p = write_file(h.dir.path(), "fork.jsonl", &join(&lines));
    let o = h.run(&["sessions", "verify", p.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let errors = v["errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{v}");
    assert_eq!(errors[0]["line"], json!(9), "{v}");
}

#[test]
fn verify_of_a_missing_file_that_is_no_stored_id_is_a_usage_error() {
    let h = Home::new();
    let o = h.run(&["sessions", "verify", "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: nosuch: no such file, and no stored session has that id (see `dsh sessions list`)\n"
    );
}
