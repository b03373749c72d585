//! The MCP client end to end through the built `dsh` binary, with real servers from the
//! package registries (`.ci/run` installs them into `$DSH_MCP_SERVERS_DIR`; without it these
//! tests are reported as skipped, and under `CI` they fail): `@modelcontextprotocol/server-everything`
//! over stdio and over streamable HTTP, `mcp-server-time` (PyPI) over stdio, and two tiny
//! Python scripts for the failure cases (one on the `mcp` package that exits on request, one
//! that reads stdin and never answers `initialize`).
//!
//! Each test scripts the model (replay provider) to call an MCP tool and checks the result
//! text in the next request. Behaviour: docs/upstream/mcp.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::e2e::{Replay, Sandbox, code, run, text};
use serde_json::{Value, json};

const HANG_LIMIT: Duration = Duration::from_secs(90);
const KEY: &str = "sk-e2e-mcp";

/// Where `.ci/run` installed the servers.
fn servers() -> PathBuf {
    std::env::var_os("DSH_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .expect("DSH_MCP_SERVERS_DIR must name the folder .ci/run installs the MCP servers into")
}

fn everything_js() -> PathBuf {
    servers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn venv_bin(name: &str) -> PathBuf {
    servers().join("venv/bin").join(name)
}

fn q(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).unwrap()
}

fn q_path(p: &Path) -> String {
    q(p.display().to_string())
}

/// Writes `$DSH_HOME/settings.toml` (the user's own layer: `mcp_servers` is restricted).
fn settings(sb: &Sandbox, toml: &str) {
    std::fs::write(sb.home.join("settings.toml"), toml).unwrap();
}

/// The text content of the tool result in the last message of chat request `i`.
fn tool_text(replay: &Replay, i: usize) -> String {
    replay.last_message(i)
}

fn tool_names(replay: &Replay, i: usize) -> Vec<String> {
    replay.chat_requests()[i].body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn exec(sb: &Sandbox, replay: &Replay, prompt: &str) -> std::process::Output {
    let out = run(sb.dsh(&replay.url(), KEY, &["exec", prompt]), HANG_LIMIT);
    eprintln!("stderr:\n{}", text(&out.stderr));
    out
}

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn server_everything_over_stdio_answers_and_credentials_are_withheld() {
    let sb = Sandbox::new();
    settings(
        &sb,
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\nenv = {{ PLAIN_SETTING = \"p\" }}\nenv_vars = [\"LISTED_TOKEN\"]\n",
            q_path(&everything_js())
        ),
    );
    let replay = Replay::start(json!([
        {"tool_calls": [["mcp__everything__echo", {"message": "hello from dsh"}]]},
        {"tool_calls": [["mcp__everything__get-env", {}]]},
        {"text": "done"},
    ]));
    let mut cmd = sb.dsh(&replay.url(), KEY, &["exec", "echo it"]);
    cmd.env("UNLISTED_TOKEN", "secret-1")
        .env("LISTED_TOKEN", "ok-2");
    let out = run(cmd, HANG_LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "done");
    assert!(tool_names(&replay, 0).contains(&"mcp__everything__echo".to_owned()));
    assert_eq!(tool_text(&replay, 1), "Echo: hello from dsh");
    let env: Value = serde_json::from_str(&tool_text(&replay, 2)).unwrap();
    assert_eq!(env["PLAIN_SETTING"], "p");
    assert_eq!(env["LISTED_TOKEN"], "ok-2");
    assert!(env.get("UNLISTED_TOKEN").is_none(), "{env}");
    assert!(env.get("DEEPSEEK_API_KEY").is_none(), "{env}");
}

/// A free loopback port (bound, then released for the server).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn server_everything_over_streamable_http_answers() {
    let port = free_port();
    let _server = Child(
        std::process::Command::new("node")
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ready = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(ready, "server-everything did not listen on {port}");
    let sb = Sandbox::new();
    settings(
        &sb,
        &format!("[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
    );
    let replay = Replay::start(json!([
        {"tool_calls": [["mcp__web__echo", {"message": "over http"}]]},
        {"text": "done"},
    ]));
    let out = exec(&sb, &replay, "echo it");
    assert_eq!(code(out.status), 0);
    assert_eq!(tool_text(&replay, 1), "Echo: over http");
}

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn mcp_server_time_over_stdio_answers() {
    let sb = Sandbox::new();
    settings(
        &sb,
        &format!(
            "[mcp_servers.time]\ncommand = {}\nargs = [\"--local-timezone\", \"UTC\"]\n",
            q_path(&venv_bin("mcp-server-time"))
        ),
    );
    let replay = Replay::start(json!([
        {"tool_calls": [["mcp__time__get_current_time", {"timezone": "UTC"}]]},
        {"text": "done"},
    ]));
    let out = exec(&sb, &replay, "what time is it");
    assert_eq!(code(out.status), 0);
    let mut names = tool_names(&replay, 0);
    names.retain(|n| n.starts_with("mcp__"));
    names.sort();
    assert_eq!(
        names,
        ["mcp__time__convert_time", "mcp__time__get_current_time"]
    );
    let got: Value = serde_json::from_str(&tool_text(&replay, 1)).unwrap();
    assert_eq!(got["timezone"], "UTC");
    assert!(
        got["datetime"].as_str().unwrap().ends_with("+00:00"),
        "{got}"
    );
}

const CRASHY: &str = r#"import os
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("crashy")


@mcp.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@mcp.tool()
def die() -> str:
    """Exit at once."""
    os._exit(3)


mcp.run()
"#;

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn a_server_that_exits_mid_session_is_reported_and_reconnected() {
    let sb = Sandbox::new();
    let script = sb.root.join("crashy.py");
    std::fs::write(&script, CRASHY).unwrap();
    settings(
        &sb,
        &format!(
            "[mcp_servers.crashy]\ncommand = {}\nargs = [{}]\n",
            q_path(&venv_bin("python")),
            q_path(&script)
        ),
    );
    let replay = Replay::start(json!([
        {"tool_calls": [["mcp__crashy__pid", {}]]},
        {"tool_calls": [["mcp__crashy__die", {}]]},
        {"tool_calls": [["mcp__crashy__pid", {}]]},
        {"text": "done"},
    ]));
    let out = exec(&sb, &replay, "crash it");
    assert_eq!(code(out.status), 0);
    let first: u32 = tool_text(&replay, 1).parse().unwrap();
    assert!(
        tool_text(&replay, 2).starts_with("Error: "),
        "{}",
        tool_text(&replay, 2)
    );
    let second: u32 = tool_text(&replay, 3).parse().unwrap();
    assert_ne!(first, second, "a new server process answered");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("MCP server \"crashy\" exited with exit status: 3; reconnecting"),
        "{stderr}"
    );
    assert!(
        stderr.contains("MCP server \"crashy\" reconnected"),
        "{stderr}"
    );
}

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn a_server_that_never_answers_initialize_times_out_without_blocking_the_session() {
    let sb = Sandbox::new();
    let script = sb.root.join("silent.py");
    std::fs::write(
        &script,
        "import sys\nprint('silent server up', file=sys.stderr, flush=True)\nfor _ in sys.stdin:\n    pass\n",
    )
    .unwrap();
    settings(
        &sb,
        &format!(
            "[mcp_servers.silent]\ncommand = \"python3\"\nargs = [{}]\nstartup_timeout_ms = 1500\n\n[mcp_servers.time]\ncommand = {}\n",
            q_path(&script),
            q_path(&venv_bin("mcp-server-time"))
        ),
    );
    let replay = Replay::start(json!([{"text": "started anyway"}]));
    let out = exec(&sb, &replay, "hello");
    assert_eq!(code(out.status), 0);
    assert_eq!(text(&out.stdout).trim_end(), "started anyway");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "MCP server \"silent\" failed to start: no answer to initialize within 1500 ms; stderr:\nsilent server up"
        ),
        "{stderr}"
    );
    let names = tool_names(&replay, 0);
    assert!(
        names.contains(&"mcp__time__get_current_time".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__silent")),
        "{names:?}"
    );
}

#[cfg_attr(
    not(mcp_servers),
    ignore = "needs the MCP servers .ci/run installs (DSH_MCP_SERVERS_DIR)"
)]
#[test]
fn dsh_mcp_list_shows_each_server_state_and_tools() {
    let sb = Sandbox::new();
    settings(
        &sb,
        &format!(
            "[mcp_servers.time]\ncommand = {}\n\n[mcp_servers.gone]\ncommand = \"/nonexistent/mcp-server\"\n",
            q_path(&venv_bin("mcp-server-time"))
        ),
    );
    let out = run(
        sb.dsh("http://127.0.0.1:9", KEY, &["mcp", "list"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "gone\tstdio\tfailed\t0 tools\n  ! MCP server \"gone\" failed to start: cannot start \"/nonexistent/mcp-server\": No such file or directory (os error 2)\ntime\tstdio\tready\t2 tools\n  mcp__time__get_current_time\n  mcp__time__convert_time\n"
    );
    let out = run(
        sb.dsh("http://127.0.0.1:9", KEY, &["mcp", "list", "--json"]),
        HANG_LIMIT,
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[1]["name"], "time");
    assert_eq!(list[1]["state"], "ready");
    assert_eq!(
        list[1]["tools"][0],
        json!({"name": "mcp__time__get_current_time", "mcpName": "get_current_time"})
    );
    assert_eq!(list[0]["state"], "failed");
}

#[test]
fn a_project_settings_file_may_not_start_mcp_servers() {
    let sb = Sandbox::new();
    let marker = sb.root.join("started");
    std::fs::create_dir_all(sb.repo.join(".dsh")).unwrap();
    for file in [
        format!(
            "[mcp_servers.x]\ncommand = \"touch\"\nargs = [{}]\n",
            q_path(&marker)
        ),
        "[mcp]\nimport_project = true\n".to_owned(),
    ] {
        std::fs::write(sb.repo.join(".dsh/settings.toml"), file).unwrap();
        let out = run(
            sb.dsh("http://127.0.0.1:9", KEY, &["mcp", "list"]),
            HANG_LIMIT,
        );
        assert_eq!(code(out.status), 2);
        assert!(
            text(&out.stderr).contains("a project's settings may not set this"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(!marker.exists());
}
