//! The `custom_harness` example is a real harness: it boots exactly the plugin set its `preset!`
//! names (nothing its dependencies link), and `exec` runs a turn with it against the replay
//! provider.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

use std::path::PathBuf;
use std::process::Command;

use dsh_test_support::{ReplayServer, ScriptResponse};

/// `target/<profile>/examples/custom_harness`, built by cargo with the test targets.
fn example_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let bin = profile_dir.join("examples").join("custom_harness");
    assert!(bin.is_file(), "{} is not built", bin.display());
    bin
}

fn harness(home: &std::path::Path) -> Command {
    let mut cmd = Command::new(example_bin());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .current_dir(home);
    cmd
}

#[test]
fn the_custom_harness_boots_exactly_its_preset() {
    let home = tempfile::tempdir().unwrap();
    let out = harness(home.path())
        .args(["plugins", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = list.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "dsh-agent",
            "dsh-agent-loop",
            "dsh-approval",
            "dsh-llm",
            "dsh-llm-deepseek",
            "dsh-permissions",
            "dsh-session",
            "dsh-system-prompt",
            "dsh-tool-fs",
            "dsh-tools",
        ]
    );
    assert!(list.iter().all(|p| p["enabled"] == true));
}

#[test]
fn the_custom_harness_runs_a_turn_against_the_replay_provider() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(ReplayServer::with_responses(vec![ScriptResponse::text(
            "hello from a custom harness",
        )]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = harness(home.path())
        .env("DEEPSEEK_BASE_URL", server.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test")
        .args(["exec", "--ephemeral", "say hello"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello from a custom harness",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_custom_harness_enforces_read_only() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = tempfile::tempdir().unwrap();
    let target = home.path().join("x.txt");
    let call = ScriptResponse {
        tool_calls: Some(vec![(
            "write".to_owned(),
            serde_json::Value::String(
                serde_json::json!({"file_path": target, "content": "pwned"}).to_string(),
            ),
        )]),
        ..ScriptResponse::default()
    };
    let server = rt
        .block_on(ReplayServer::with_responses(vec![
            call,
            ScriptResponse::text("could not write"),
        ]))
        .unwrap();
    let out = harness(home.path())
        .env("DEEPSEEK_BASE_URL", server.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test")
        .args([
            "--permission-mode",
            "read-only",
            "exec",
            "--ephemeral",
            "write x",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!target.exists(), "read-only let a write through");
    let bodies = server.chat_bodies();
    let tool = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("denied by permission preset read-only"),
        "{tool}"
    );
}
