//! Settings through the built binary: every plugin's settings can be set from a settings file
//! and from `-c`, `dsh config --json` says which layer each value came from, and a wrong key or
//! a wrong type is an exit-2 error naming the file, the key and the expected type.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_dsh");

/// One settable key per plugin that declares settings: (plugin id, TOML key as the file writes
/// it, the key inside the plugin's section, a file value, a `-c` value).
const KEYS: &[(&str, &str, &str, &str, &str)] = &[
    ("dsh-agent", "max_tokens", "max_tokens", "1000", "2000"),
    (
        "dsh-agent-loop",
        "agent.max_parallel_tool_calls",
        "max_parallel_tool_calls",
        "3",
        "4",
    ),
    (
        "dsh-approval",
        "approval.policy",
        "policy",
        "\"never\"",
        "\"ask\"",
    ),
    (
        "dsh-compaction-basic",
        "compaction.threshold_ratio",
        "threshold_ratio",
        "0.5",
        "0.6",
    ),
    ("dsh-context", "persona", "persona", "\"file\"", "\"flag\""),
    (
        "dsh-llm",
        "models.m1.context_window",
        "models.m1.context_window",
        "16000",
        "32000",
    ),
    (
        "dsh-hooks-claude-code",
        "plugins.dsh-hooks-claude-code.max_stop_blocks",
        "max_stop_blocks",
        "3",
        "4",
    ),
    (
        "dsh-hooks-codex",
        "plugins.dsh-hooks-codex.max_stop_blocks",
        "max_stop_blocks",
        "5",
        "6",
    ),
    (
        "dsh-llm-deepseek",
        "providers.local.base_url",
        "local.base_url",
        "\"http://127.0.0.1:9/v1\"",
        "\"http://127.0.0.1:8/v1\"",
    ),
    (
        "dsh-llm-retry",
        "plugins.dsh-llm-retry.max_retries",
        "max_retries",
        "1",
        "2",
    ),
    (
        "dsh-mcp",
        "mcp.import_project",
        "import_project",
        "true",
        "false",
    ),
    (
        "dsh-permissions",
        "permission_mode",
        "permission_mode",
        "\"read-only\"",
        "\"danger-full-access\"",
    ),
    (
        "dsh-persistence",
        "persistence.write_batch_ms",
        "write_batch_ms",
        "5",
        "6",
    ),
    (
        "dsh-persistence-jsonl",
        "plugins.dsh-persistence-jsonl.compression",
        "compression",
        "\"zstd\"",
        "\"none\"",
    ),
    (
        "dsh-persistence-sqlite",
        "plugins.dsh-persistence-sqlite.pack_chunks",
        "pack_chunks",
        "false",
        "true",
    ),
    ("dsh-sandbox", "sandbox.network", "network", "true", "false"),
    (
        "dsh-sandbox-linux",
        "plugins.dsh-sandbox-linux.probe_timeout_ms",
        "probe_timeout_ms",
        "1000",
        "2000",
    ),
    (
        "dsh-skill-filesystem",
        "skills.dirs",
        "dirs",
        "[\"a\"]",
        "[\"b\"]",
    ),
    (
        "dsh-spill",
        "plugins.dsh-spill.max_inline_bytes",
        "max_inline_bytes",
        "1000",
        "2000",
    ),
    (
        "dsh-system-prompt",
        "plugins.dsh-system-prompt.include_harness_identity",
        "include_harness_identity",
        "false",
        "true",
    ),
    (
        "dsh-tool-fs",
        "plugins.dsh-tool-fs.read_limit",
        "read_limit",
        "100",
        "200",
    ),
    (
        "dsh-tool-search",
        "plugins.dsh-tool-search.grep_max_matches",
        "grep_max_matches",
        "10",
        "20",
    ),
    (
        "dsh-tool-shell",
        "plugins.dsh-tool-shell.timeout_ms",
        "timeout_ms",
        "1000",
        "2000",
    ),
    (
        "dsh-tool-todo",
        "plugins.dsh-tool-todo.allow_parallel_in_progress",
        "allow_parallel_in_progress",
        "true",
        "false",
    ),
];

fn dsh(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("DSH_HOME", dir.join("home"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `$DSH_HOME/settings.toml` (the user's own layer; `dsh` runs with `DSH_HOME=<dir>/home`).
fn write_user_settings(dir: &Path, text: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let p = dir.join("home").join("settings.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn write_project_settings(dir: &Path, text: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join(".dsh")).unwrap();
    let p = dir.join(".dsh").join("settings.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `a.b.c = v` as a TOML document (dotted keys are valid TOML).
fn toml_line(key: &str, value: &str) -> String {
    format!("{key} = {value}\n")
}

fn config(dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["config", "--json"];
    args.extend_from_slice(extra);
    let out = dsh(dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_plugin_with_settings_is_covered_by_this_test() {
    let dir = tempfile::tempdir().unwrap();
    let out = dsh(dir.path(), &["plugins", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut with_settings: Vec<&str> = list
        .iter()
        .filter(|p| !p["settingsSchema"].is_null())
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    with_settings.sort_unstable();
    let mut covered: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
    covered.sort_unstable();
    assert_eq!(with_settings, covered);
}

#[test]
fn every_plugin_setting_is_set_from_a_file_and_from_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = KEYS.iter().map(|k| toml_line(k.1, k.3)).collect();
    let file = write_user_settings(dir.path(), &text);
    let file = file.display().to_string();
    let from_file = config(dir.path(), &[]);
    let flags: Vec<String> = KEYS.iter().map(|k| format!("{}={}", k.1, k.4)).collect();
    let mut args: Vec<&str> = Vec::new();
    for f in &flags {
        args.push("-c");
        args.push(f);
    }
    let from_flags = config(dir.path(), &args);
    for (id, _, key, file_value, flag_value) in KEYS {
        let parse = |v: &str| -> Value {
            let t: toml::Table = format!("v = {v}").parse().unwrap();
            serde_json::to_value(&t["v"]).unwrap()
        };
        let entry = &from_file["plugins"][id]["set"][key];
        assert_eq!(
            entry,
            &json!({"value": parse(file_value), "origin": file}),
            "{id} {key}"
        );
        let entry = &from_flags["plugins"][id]["set"][key];
        assert_eq!(
            entry,
            &json!({"value": parse(flag_value), "origin": "-c flags"}),
            "{id} {key}"
        );
    }
}

#[test]
fn a_wrong_key_names_the_file_the_key_and_the_known_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_project_settings(dir.path(), "[approval]\npolcy = \"never\"\n");
    for cmd in [&["config"][..], &["sessions", "list"], &["plugins"]] {
        let out = dsh(dir.path(), cmd);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        assert_eq!(
            stderr(&out),
            format!(
                "error: {}: approval.polcy: unknown field `polcy`, expected `policy`\n",
                file.display()
            )
        );
    }
    std::fs::remove_file(&file).unwrap();
    let out = dsh(dir.path(), &["-c", "modle=x", "config"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: -c flags: unknown key `modle` (top-level keys: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn dsh_config_hides_the_password_of_a_base_url() {
    // Before, `dsh config` printed it verbatim (text and --json).
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "-c",
        "providers.local.base_url=http://u:pw0rdX@127.0.0.1:1/v1",
        "-c",
        "providers.local.models=[\"m\"]",
    ];
    let out = dsh(dir.path(), &[&flags[..], &["config"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "  local.base_url = \"http://u:***@127.0.0.1:1/v1\"    # -c flags"),
        "{text}"
    );
    let json = dsh(dir.path(), &[&flags[..], &["config", "--json"]].concat());
    assert_eq!(json.status.code(), Some(0));
    for shown in [text, String::from_utf8(json.stdout).unwrap()] {
        assert!(!shown.contains("pw0rdX"), "{shown}");
    }
}

#[test]
fn a_zero_timeout_is_refused_naming_the_key() {
    // Before, each was accepted: every bash call or git context then timed out at once.
    let dir = tempfile::tempdir().unwrap();
    for key in [
        "plugins.dsh-tool-shell.timeout_ms",
        "plugins.dsh-tool-shell.max_timeout_ms",
        "plugins.dsh-context.git_timeout_ms",
    ] {
        let out = dsh(dir.path(), &["-c", &format!("{key}=0"), "config"]);
        assert_eq!(out.status.code(), Some(2), "{key}");
        assert_eq!(
            stderr(&out),
            format!("error: -c flags: {key}: must be at least 1\n")
        );
    }
}

#[test]
fn a_wrong_type_names_the_file_the_key_and_the_expected_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_project_settings(dir.path(), "[agent]\nmax_parallel_tool_calls = \"many\"\n");
    let out = dsh(dir.path(), &["config"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}: agent.max_parallel_tool_calls: invalid type: string \"many\", expected a non-negative integer\n",
            file.display()
        )
    );
    std::fs::remove_file(&file).unwrap();
    let out = dsh(
        dir.path(),
        &["-c", "plugins.dsh-llm-retry.max_retries=-1", "exec", "x"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: -c flags: plugins.dsh-llm-retry.max_retries: invalid value: integer `-1`, expected a non-negative integer\n"
    );
    let out = dsh(dir.path(), &["-c", "max_tokens=0", "config"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: -c flags: max_tokens: invalid value: integer `0`, expected a positive integer\n"
    );
    write_project_settings(dir.path(), "[providers]\nlocal = \"x\"\n");
    let out = dsh(dir.path(), &["config"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}: providers.local: invalid type: string \"x\", expected a table\n",
            dir.path().join(".dsh/settings.toml").display()
        )
    );
}

#[test]
fn plugins_disable_leaves_a_plugin_out_and_refuses_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    let out = dsh(
        dir.path(),
        &[
            "-c",
            "plugins.disable=[\"dsh-tool-todo\"]",
            "plugins",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let todo = list.iter().find(|p| p["id"] == "dsh-tool-todo").unwrap();
    assert_eq!(todo["enabled"], false);
    let out = dsh(
        dir.path(),
        &["-c", "plugins.disable=[\"dsh-tool-tood\"]", "config"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(
            "error: -c flags: unknown plugin `dsh-tool-tood` in plugins.disable (known: dsh-agent, "
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_project_file_may_not_redirect_credentials_or_widen_permissions() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        (
            "[providers.deepseek]\nbase_url = \"http://127.0.0.1:9\"\n",
            "providers.deepseek.base_url",
        ),
        (
            "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"MY_SECRET\"\n",
            "providers.local.api_key_env",
        ),
        (
            "permission_mode = \"danger-full-access\"\n",
            "permission_mode",
        ),
        (
            "[plugins.dsh-tool-fs]\nallow_outside_workspace = true\n",
            "plugins.dsh-tool-fs.allow_outside_workspace",
        ),
        (
            "[persistence]\ndir = \"/tmp/elsewhere\"\n",
            "persistence.dir",
        ),
    ] {
        let file = write_project_settings(dir.path(), text);
        let out = dsh(dir.path(), &["config"]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert_eq!(
            stderr(&out),
            format!(
                "error: {}: {key}: a project's settings may not set this (it decides where \
                 credentials are sent, widens permissions or runs commands); set it in $DSH_HOME/settings.toml, \
                 with -c or on the command line\n",
                file.display()
            )
        );
    }
    // The same keys are the user's to set.
    std::fs::remove_file(dir.path().join(".dsh/settings.toml")).unwrap();
    write_user_settings(
        dir.path(),
        "permission_mode = \"read-only\"\n[providers.deepseek]\nbase_url = \"http://127.0.0.1:9\"\n",
    );
    let out = dsh(dir.path(), &["config"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_permission_mode_no_plugin_enforces_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dsh(
        dir.path(),
        &[
            "-c",
            "plugins.disable=[\"dsh-permissions\"]",
            "--permission-mode",
            "read-only",
            "config",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: command line: `permission_mode` is set, but no plugin of this harness enforces it \
         (the plugin that owns it is disabled or not in the plugin set)\n"
    );
}

#[test]
fn nan_is_not_a_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = dsh(dir.path(), &["-c", "max_tokens=nan", "config"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: -c flags: max_tokens: `nan` and `inf` are not numbers a setting accepts\n"
    );
}
