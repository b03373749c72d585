//! Faults of the loop and of tool processes, through the built `dsh` binary (issue 13, "The loop
//! and the tools"): the step limit (`--max-steps`, `[agent] max_steps_per_turn`, exit 5),
//! non-object tool arguments (nothing runs), SIGHUP (the running command's process group is
//! killed, the session saved), and commands that want a terminal (run without one; under a real
//! pseudo-terminal nothing reaches it and the call returns at once).
//!
//! The model is the replay provider (`dsh_test_support::ReplayServer` on 127.0.0.1); the
//! binary is located as `common/mod.rs` says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
use common::dsh_bin;
use common::e2e::{Replay, Sandbox, code, json_lines, text};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_persistence::{RepairReport, SessionPersistence};
use dsh_persistence_jsonl::{JsonlConfig, jsonl_persistence};
use dsh_test_support::RecordedRequest;
use serde_json::{Value, json};

const API_KEY: &str = "sk-faults-loop";
/// "Did not hang" bound for one dsh run (generous; runs take well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(60);

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

    fn store(&self) -> std::sync::Arc<dsh_persistence_jsonl::JsonlPersistence> {
        jsonl_persistence(JsonlConfig {
            root: self.home.join("sessions"),
            ..JsonlConfig::default()
        })
    }
}

/// The tool-result texts of a recorded chat request, in order.
fn tool_texts(req: &RecordedRequest) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits until `pid` is gone (or a zombie awaiting its reaper), failing after [`HANG_LIMIT`].
fn assert_gone(pid: u32, what: &str) {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let gone_by = Instant::now() + HANG_LIMIT;
    while proc_dir.exists() {
        let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            break;
        }
        assert!(Instant::now() < gone_by, "{what} {pid} survived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a file `path` holding a complete line and returns its trimmed content.
fn wait_for_line(path: &Path) -> String {
    let deadline = Instant::now() + HANG_LIMIT;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// The step limit
// ---------------------------------------------------------------------------------------------

/// A model that calls a tool at every step (ten scripted calls, never an answer).
fn endless_tool_caller() -> Value {
    let step = json!({"tool_calls": [["bash", {"command": "echo again", "description": "Again"}]]});
    Value::Array(vec![step; 10])
}

#[test]
fn max_steps_stops_an_endless_tool_caller_with_exit_5() {
    let env = Env::new();
    let replay = Replay::start(endless_tool_caller());
    let out = run(env.dsh(&replay.url(), &["exec", "--max-steps", "3", "loop"]));
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 5, "stderr: {stderr}");
    assert_eq!(replay.chat_requests().len(), 3);
    assert!(
        common::e2e::before_end_line(&stderr).ends_with("stopped at the step limit (3 steps)\n"),
        "{stderr}"
    );
}

#[test]
fn the_step_limit_setting_ends_the_turn_max_steps_in_the_log() {
    let env = Env::new();
    let replay = Replay::start(endless_tool_caller());
    let out = run(env.dsh(
        &replay.url(),
        &["exec", "--json", "-c", "agent.max_steps_per_turn=2", "loop"],
    ));
    assert_eq!(code(out.status), 5, "stderr: {}", text(&out.stderr));
    assert_eq!(replay.chat_requests().len(), 2);
    let lines = json_lines(&out.stdout);
    let (result, events) = lines.split_last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["reason"], "max-steps");
    let turn_end = events.last().unwrap();
    assert_eq!(turn_end["type"], "turn/end");
    assert_eq!(
        turn_end["data"],
        json!({"turn": 1, "reason": {"kind": "max-steps", "limit": 2}})
    );
    let steps = events.iter().filter(|e| e["type"] == "step/start").count();
    assert_eq!(steps, 2);
    // `--max-steps` wins over the setting.
    let replay = Replay::start(endless_tool_caller());
    let out = run(env.dsh(
        &replay.url(),
        &[
            "exec",
            "-c",
            "agent.max_steps_per_turn=2",
            "--max-steps",
            "4",
            "loop",
        ],
    ));
    assert_eq!(code(out.status), 5);
    assert_eq!(replay.chat_requests().len(), 4);
}

// ---------------------------------------------------------------------------------------------
// Tool arguments
// ---------------------------------------------------------------------------------------------

#[test]
fn array_arguments_run_nothing_and_tell_the_model() {
    let env = Env::new();
    let marker = env.repo.join("marker");
    let written = env.repo.join("written.txt");
    let replay = Replay::start(json!([
        {"tool_calls": [
            ["bash", ["touch marker", "Make a marker"]],
            ["write", [written.to_str().unwrap(), "positional content"]],
        ]},
        {"text": "done"},
    ]));
    let out = run(env.dsh(
        &replay.url(),
        &["exec", "--permission-mode", "danger-full-access", "go"],
    ));
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    assert!(!marker.exists(), "bash ran with positional arguments");
    assert!(!written.exists(), "write ran with positional arguments");
    let requests = replay.chat_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        tool_texts(&requests[1]),
        vec![
            "Error: invalid arguments for tool \"bash\": the arguments must be a JSON object, got an array",
            "Error: invalid arguments for tool \"write\": the arguments must be a JSON object, got an array",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// SIGHUP
// ---------------------------------------------------------------------------------------------

#[test]
fn sighup_kills_the_running_command_and_saves_the_session() {
    let env = Env::new();
    let pid_file = env.repo.join("sleep.pid");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": "echo $$ > sleep.pid; exec sleep 300",
            "description": "Wait a long time"
        }]]},
        {"text": "never served"},
    ]));
    let mut cmd = env.dsh(&replay.url(), &["exec", "--json", "wait"]);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(Result::unwrap)
            .collect::<Vec<String>>()
    });
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let sleep_pid: u32 = wait_for_line(&pid_file).parse().unwrap();

    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (tx_exit, rx_exit) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx_exit.send(child.wait());
    });
    let exit = match rx_exit.recv_timeout(HANG_LIMIT) {
        Ok(s) => s.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string(), &sleep_pid.to_string()])
                .status();
            panic!("dsh did not exit after SIGHUP");
        }
    };
    let lines = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    // The sleep is killed with dsh, not orphaned (checked before anything else can fail).
    let orphan = PathBuf::from(format!("/proc/{sleep_pid}")).exists();
    assert_gone(sleep_pid, "sleep");
    assert!(
        exit.code().is_some(),
        "dsh died from the signal: {exit} (orphan: {orphan})"
    );
    assert_eq!(code(exit), 130, "stderr: {stderr}");

    let values: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (result, events) = values.split_last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["reason"], "aborted");
    let id = result["sessionId"].as_str().unwrap();
    assert_eq!(events.last().unwrap()["type"], "turn/end");
    // The session was saved: it loads without repair, the bash call has its result.
    let loaded = env.store().inspect(id).unwrap();
    assert_eq!(loaded.repair, RepairReport::default());
    let stored: Vec<Value> = loaded.events.iter().map(|e| e.to_value()).collect();
    assert_eq!(stored, *events);
    let results = stored.iter().filter(|e| e["type"] == "tool/result").count();
    assert_eq!(results, 1);
    assert_eq!(replay.chat_requests().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Commands that want a terminal
// ---------------------------------------------------------------------------------------------

/// Runs `argv` under a real pseudo-terminal (python3's `pty` module: the child is a session
/// leader with the pty as its controlling terminal, as in a user's shell) and prints one JSON
/// line: `{"code": exit code or null, "output": everything written to the terminal, "elapsed":
/// seconds}`. Nothing is ever typed; after 45 s the child is killed.
const PTY_DRIVER: &str = r#"
import json, os, pty, select, signal, sys, time
start = time.time()
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    left = 45 - (time.time() - start)
    if left <= 0:
        os.kill(pid, signal.SIGKILL)
        break
    ready, _, _ = select.select([fd], [], [], min(left, 0.5))
    if not ready:
        continue
    try:
        data = os.read(fd, 65536)
    except OSError:
        data = b""
    if not data:
        break
    out += data
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
print(json.dumps({"code": code, "output": out.decode("utf-8", "replace"), "elapsed": time.time() - start}))
"#;

/// A loopback HTTP server that answers every request `401` with a Basic challenge (a git
/// remote that wants credentials); returns its port.
fn credentials_wanted_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"dsh\"\r\n\
                      Content-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    port
}

#[test]
fn commands_that_want_a_terminal_fail_at_once_under_a_real_terminal() {
    let env = Env::new();
    let port = credentials_wanted_server();
    let replay = Replay::start(json!([
        {"tool_calls": [
            ["bash", {
                "command": "p=Pass; read -r -s -p \"${p}word-prompt: \" pw < /dev/tty && echo \"got $pw\"",
                "description": "Ask for a password"
            }],
            ["bash", {
                "command": format!("git ls-remote http://127.0.0.1:{port}/repo.git"),
                "description": "List the remote"
            }],
            ["bash", {
                "command": "echo \"$GIT_TERMINAL_PROMPT $GIT_EDITOR $EDITOR ${GIT_ASKPASS-unset} ${SSH_ASKPASS-unset}\"",
                "description": "Show the environment"
            }],
        ]},
        {"text": "done"},
    ]));
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(PTY_DRIVER)
        .arg(dsh_bin())
        .args(["exec", "--permission-mode", "danger-full-access", "try it"])
        .current_dir(&env.repo)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &env.home)
        .env("DSH_HOME", &env.home)
        .env("DEEPSEEK_BASE_URL", replay.url())
        .env("DEEPSEEK_API_KEY", API_KEY)
        .env("GIT_ASKPASS", "/bin/false")
        .env("SSH_ASKPASS", "/bin/false")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run(cmd);
    assert!(out.status.success(), "python3 pty driver: {out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let terminal = report["output"].as_str().unwrap();
    eprintln!(
        "under the pty: {:.2} s",
        report["elapsed"].as_f64().unwrap()
    );
    assert_eq!(report["code"], 0, "terminal: {terminal}");
    // Returned within seconds (the stall it replaces lasted until the 120 s command timeout).
    assert!(report["elapsed"].as_f64().unwrap() < 30.0, "{report}");
    // Nothing but dsh's own output reached the terminal: no prompt of the commands.
    assert!(!terminal.contains("Password-prompt"), "{terminal}");
    // (The result tail of `git ls-remote` shows its error, "could not read Username for …".)
    assert!(
        !terminal
            .replace("could not read Username for", "")
            .contains("Username for"),
        "{terminal}"
    );
    assert!(terminal.contains("done"), "{terminal}");

    let requests = replay.chat_requests();
    assert_eq!(requests.len(), 2);
    let texts = tool_texts(&requests[1]);
    assert_eq!(texts.len(), 3, "{texts:?}");
    let note = dsh_process_note();
    assert!(texts[0].contains("/dev/tty"), "{}", texts[0]);
    assert!(
        texts[0].ends_with(&format!("[exit code: 1]\n{note}")),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains(&format!(
            "fatal: could not read Username for 'http://127.0.0.1:{port}': terminal prompts disabled"
        )),
        "{}",
        texts[1]
    );
    assert!(
        texts[1].ends_with(&format!("[exit code: 128]\n{note}")),
        "{}",
        texts[1]
    );
    assert_eq!(texts[2], "0 true true unset unset\n");
}

/// The note the bash tool adds to a failed command that wanted a terminal (as
/// `dsh_process::NO_TERMINAL_NOTE` says it; spelled out so a change of wording is seen here).
fn dsh_process_note() -> &'static str {
    "[no terminal: this command runs without a terminal and with stdin from /dev/null, so it cannot prompt for passwords, credentials or editor input; run it non-interactively (pass input by flags, files or environment, use batch/--yes options)]"
}

// ---------------------------------------------------------------------------------------------
// The interactive shell
// ---------------------------------------------------------------------------------------------

/// `dsh` (the interactive shell) with stdin piped and kept open; returns the child.
fn interactive(env: &Env, url: &str, args: &[&str]) -> std::process::Child {
    let mut cmd = env.dsh(url, args);
    cmd.stdin(Stdio::piped());
    cmd.spawn().unwrap()
}

/// Waits for `child` to exit, killing it and failing after [`HANG_LIMIT`].
fn wait_exit(mut child: std::process::Child, what: &str) -> (ExitStatus, String) {
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(HANG_LIMIT) {
        Ok(s) => s.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not exit: {what}");
        }
    };
    (status, err_reader.join().unwrap())
}

#[test]
fn the_interactive_shell_honours_max_steps() {
    use std::io::Write;
    let env = Env::new();
    let replay = Replay::start(endless_tool_caller());
    let mut child = interactive(&env, &replay.url(), &["--max-steps", "2"]);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "loop").unwrap();
    // The turn ends at the limit; then end of input ends the shell.
    let deadline = Instant::now() + HANG_LIMIT;
    while replay.chat_requests().len() < 2 {
        assert!(Instant::now() < deadline, "the turn never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let (status, stderr) = wait_exit(child, "after end of input");
    assert_eq!(code(status), 0, "{stderr}");
    assert_eq!(replay.chat_requests().len(), 2);
    assert!(
        stderr.contains("\nstopped at the step limit (2 steps)\n"),
        "{stderr}"
    );
}

#[test]
fn sighup_ends_the_interactive_shell_without_an_orphan() {
    use std::io::Write;
    let env = Env::new();
    let pid_file = env.repo.join("sleep.pid");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": "echo $$ > sleep.pid; exec sleep 300",
            "description": "Wait a long time"
        }]]},
        {"text": "never served"},
    ]));
    let mut child = interactive(&env, &replay.url(), &[]);
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "wait").unwrap();
    let sleep_pid: u32 = wait_for_line(&pid_file).parse().unwrap();
    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (status, stderr) = wait_exit(child, "after SIGHUP");
    assert_gone(sleep_pid, "sleep");
    assert_eq!(status.code(), Some(130), "{status}: {stderr}");
    assert!(stderr.contains(" saved\n"), "{stderr}");
    drop(stdin);
    // The saved session closed the turn: it loads without repair.
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session ")?.strip_suffix(" saved"))
        .unwrap()
        .to_owned();
    let loaded = env.store().inspect(&id).unwrap();
    assert_eq!(loaded.repair, RepairReport::default());
    let last = loaded.events.last().unwrap().to_value();
    assert_eq!(last["type"], "turn/end");
    assert_eq!(last["data"]["reason"]["kind"], "aborted");
}
