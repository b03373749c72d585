//! End-to-end tests of the built `dsh` binary on a real terminal (tmux), against the in-process
//! replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1) (issue 15, "Output"):
//!
//! - `approval_allow_once_asks_again_for_the_identical_request`: `y` allows one call; the
//!   identical next call asks again.
//! - `approval_allow_for_the_session_by_path_and_by_tool`: `p` allows the call's path and `s`
//!   the tool for the rest of the session: later matching calls run without a question, and
//!   every call that ran is logged as upstream logs an approved call (`approval/asked`, then
//!   `approval/decided {outcome: "allowed-once"}`).
//! - `approval_deny_with_a_reason_passes_it_to_the_model`: `n REASON` denies, the model's next
//!   request carries the reason in the tool result; the question shows the write as a diff and
//!   is wrapped at word boundaries on a 60-column terminal.
//! - `a_terminal_gets_a_spinner_and_dim_reasoning`: while the model thinks, stderr shows a
//!   spinner with the elapsed time; reasoning is shown dimmed.
//!
//! Each test reports itself skipped when `tmux` is absent, and fails instead when `CI` is set.
//! Locating the binary: see `common/mod.rs` (`dsh_bin`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::e2e::{Replay, Sandbox};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Hang guard for one expected screen state.
const WAIT: Duration = Duration::from_secs(60);

/// True when tmux can run; false (the test is skipped) when it is absent outside CI.
fn tmux_available(test: &str) -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: tmux is required when CI is set"
        );
        eprintln!("{test}: skipped (tmux is not installed)");
    }
    ok
}

/// `s` quoted for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// One detached tmux server (its own socket) running one command in one pane, with everything
/// the pane's program writes copied to a file (`pipe-pane`).
struct Tmux {
    socket: String,
    raw: PathBuf,
}

impl Tmux {
    /// Runs `cmd` (built by [`Sandbox::dsh`]: its program, arguments, directory and
    /// environment) in a `width`×40 pane. The program starts once output capture is attached;
    /// when it ends the pane shows `[exit N]`.
    fn start(env: &Sandbox, cmd: &Command, width: u16) -> Self {
        let socket = format!(
            "dsh-test-{}-{}",
            std::process::id(),
            env.root.file_name().unwrap().to_string_lossy()
        );
        let raw = env.root.join("pane.raw");
        std::fs::write(&raw, b"").unwrap();
        let mut line = String::from("read _; ");
        line.push_str(&sh_quote(&cmd.get_program().to_string_lossy()));
        for a in cmd.get_args() {
            line.push(' ');
            line.push_str(&sh_quote(&a.to_string_lossy()));
        }
        line.push_str("; echo \"[exit $?]\"; exec sleep 600");
        let mut tmux = Command::new("tmux");
        tmux.env_clear();
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                tmux.env(k, v);
            }
        }
        tmux.env("TERM", "xterm-256color").args([
            "-L",
            &socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            "40",
            "-s",
            "t",
            "-c",
        ]);
        tmux.arg(cmd.get_current_dir().unwrap()).arg(&line);
        let st = tmux.status().unwrap();
        assert!(st.success(), "tmux new-session failed");
        let t = Self { socket, raw };
        t.tmux(&[
            "pipe-pane",
            "-t",
            "t",
            "-o",
            &format!("cat >> {}", sh_quote(&t.raw.display().to_string())),
        ]);
        t.tmux(&["send-keys", "-t", "t", "Enter"]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane as shown (one line per screen row, history included).
    fn pane(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t", "-S", "-2000"])
    }

    /// Everything the program wrote so far, raw bytes as text.
    fn raw(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.raw).unwrap()).into_owned()
    }

    /// Waits until the raw output holds `needle` `count` times; returns the raw output.
    fn wait_raw(&self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let raw = self.raw();
            if raw.matches(needle).count() >= count {
                return raw;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} ×{count} did not appear within {WAIT:?}; pane:\n{}\nraw:\n{raw:?}",
                self.pane()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `line` and Enter.
    fn send(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", line]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The only `session.jsonl` under `$DSH_HOME`.
fn session_log(env: &Sandbox) -> PathBuf {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                out.push(p);
            }
        }
    }
    let mut logs = Vec::new();
    walk(&env.home, &mut logs);
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs.remove(0)
}

/// The records of type `kind` in `log`.
fn records_of(log: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

fn outcomes(log: &Path) -> Vec<Value> {
    records_of(log, "approval/decided")
        .into_iter()
        .map(|v| v["data"]["outcome"].clone())
        .collect()
}

/// The interactive shell in tmux; ends it with `/exit` once `done` is on screen.
fn finish(t: &Tmux) {
    t.wait_raw("done", 1);
    t.send("/exit");
    t.wait_raw("[exit 0]", 1);
}

const QUESTION: &str = "allow tool `";

#[test]
fn approval_allow_once_asks_again_for_the_identical_request() {
    if !tmux_available("approval_allow_once_asks_again_for_the_identical_request") {
        return;
    }
    let env = Sandbox::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let o = outside.display().to_string();
    let call =
        json!({"command": "echo hi >> note.txt", "workdir": o, "description": "Append a line"});
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", call]]},
        {"tool_calls": [["bash", call]]},
        {"text": "done"},
    ]));
    let t = Tmux::start(&env, &env.dsh(&replay.url(), "sk-tmux", &[]), 120);
    t.wait_raw("> ", 1);
    t.send("append twice");
    t.wait_raw(QUESTION, 1);
    t.send("y");
    let raw = t.wait_raw(QUESTION, 2);
    assert!(raw.contains("[y] allow once"), "{raw:?}");
    t.send("y");
    finish(&t);
    assert_eq!(
        std::fs::read_to_string(outside.join("note.txt")).unwrap(),
        "hi\nhi\n"
    );
    let log = session_log(&env);
    assert_eq!(
        outcomes(&log),
        [json!("allowed-once"), json!("allowed-once")]
    );
    assert_eq!(t.raw().matches(QUESTION).count(), 2);
}

#[test]
fn approval_allow_for_the_session_by_path_and_by_tool() {
    if !tmux_available("approval_allow_for_the_session_by_path_and_by_tool") {
        return;
    }
    let env = Sandbox::new();
    let outside = env.root.join("outside");
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let o = outside.display().to_string();
    let x = elsewhere.join("x.txt").display().to_string();
    let y = env.root.join("y.txt").display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "echo 1 > one.txt", "workdir": o, "description": "One"}]]},
        {"tool_calls": [["bash", {"command": "echo 2 > two.txt", "workdir": o, "description": "Two"}]]},
        {"tool_calls": [["write", {"file_path": x, "content": "x\n"}]]},
        {"tool_calls": [["write", {"file_path": y, "content": "y\n"}]]},
        {"text": "done"},
    ]));
    let t = Tmux::start(&env, &env.dsh(&replay.url(), "sk-tmux", &[]), 120);
    t.wait_raw("> ", 1);
    t.send("do four things");
    let raw = t.wait_raw(QUESTION, 1);
    assert!(
        raw.contains(&format!("[p] allow {o} for this session")),
        "{raw:?}"
    );
    t.send("p");
    let raw = t.wait_raw(QUESTION, 2);
    assert!(
        raw.contains("[s] allow `write` for this session"),
        "{raw:?}"
    );
    t.send("s");
    finish(&t);
    assert_eq!(t.raw().matches(QUESTION).count(), 2, "{}", t.pane());
    assert_eq!(
        std::fs::read_to_string(outside.join("two.txt")).unwrap(),
        "2\n"
    );
    assert_eq!(std::fs::read_to_string(&y).unwrap(), "y\n");
    let log = session_log(&env);
    assert_eq!(records_of(&log, "approval/asked").len(), 4);
    assert_eq!(outcomes(&log), vec![json!("allowed-once"); 4]);
}

#[test]
fn approval_deny_with_a_reason_passes_it_to_the_model() {
    if !tmux_available("approval_deny_with_a_reason_passes_it_to_the_model") {
        return;
    }
    let env = Sandbox::new();
    let target = env.root.join("outside").join("new.txt");
    let p = target.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": p, "content": "hello\nworld\n"}]]},
        {"text": "done"},
    ]));
    let t = Tmux::start(&env, &env.dsh(&replay.url(), "sk-tmux", &[]), 60);
    t.wait_raw("> ", 1);
    t.send("write it");
    let raw = t.wait_raw("[n] deny", 1);
    assert!(raw.contains("+hello"), "{raw:?}");
    assert!(raw.contains("+world"), "{raw:?}");
    // Wrapped at word boundaries: every word of the reason is whole on the screen, and no
    // screen row is longer than the terminal.
    let pane = t.pane();
    let words: Vec<&str> = pane.split_whitespace().collect();
    for w in "(permission preset workspace-write: write target is outside the workspace \
              approve this call to allow it once, or rerun with --permission-mode \
              danger-full-access)?"
        .split_whitespace()
    {
        assert!(words.contains(&w), "{w:?} split on screen:\n{pane}");
    }
    for row in pane.lines() {
        assert!(row.chars().count() <= 60, "{row:?}");
    }
    assert!(
        pane.contains("\n  [n] deny — `n REASON` tells the model why\n"),
        "{pane}"
    );
    t.send("n keep it inside the workspace");
    finish(&t);
    assert!(!target.exists());
    let result = replay.last_message(1);
    assert!(result.contains("keep it inside the workspace"), "{result}");
    assert_eq!(outcomes(&session_log(&env)), [json!("rejected")]);
}

#[test]
fn a_terminal_gets_a_spinner_and_dim_reasoning() {
    if !tmux_available("a_terminal_gets_a_spinner_and_dim_reasoning") {
        return;
    }
    let env = Sandbox::new();
    let replay = Replay::start(json!([
        {"reasoning": "Pondering the question.", "text": "Plain answer.", "delay_ms": 150},
    ]));
    let t = Tmux::start(
        &env,
        &env.dsh(&replay.url(), "sk-tmux", &["exec", "think"]),
        100,
    );
    let raw = t.wait_raw("[exit 0]", 1);
    assert!(raw.contains("thinking 0."), "{raw:?}");
    assert!(raw.contains("\x1b[2mPondering"), "{raw:?}");
    assert!(raw.contains("Plain answer."), "{raw:?}");
}
