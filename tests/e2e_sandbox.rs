//! End-to-end tests of the OS sandbox for `bash` through the built `dsh` binary, against the
//! replay provider: both Linux runners (bubblewrap; the Landlock helper with bubblewrap left
//! out through `[sandbox] runners`) confine writes to the workspace, `/tmp` and `$TMPDIR`,
//! deletions, descendants, symlinks and the network; `read-only` writes nothing; no usable
//! runner is `SANDBOX_UNAVAILABLE` and runs nothing; the upstream logs `missing-sandbox-runner`
//! (a runner command that does not exist), `partial-landlock-child-failure` (a fake helper in
//! partial enforcement) and the escalation path are reproduced.
//!
//! A runner whose probe fails on this machine makes its tests report themselves skipped, and
//! fail when `CI` is set (CI installs bubblewrap; the kernel must have Landlock and user
//! namespaces). Every run's root lives under the target directory, not under `/tmp`, because
//! `/tmp` is writable in the sandbox by design.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test harness")]

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::dsh_bin;
use common::e2e::{Replay, code, json_lines, run, text};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The Landlock helper next to the `dsh` binary (built here when missing).
fn helper_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dsh = dsh_bin();
        let helper = dsh.parent().unwrap().join("dsh-landlock-run");
        if !helper.is_file() {
            let profile_dir = dsh.parent().unwrap();
            let profile = match profile_dir.file_name().and_then(|s| s.to_str()).unwrap() {
                "debug" => "dev".to_owned(),
                other => other.to_owned(),
            };
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
            let status = Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "dsh", "--bin", "dsh-landlock-run"])
                .arg("--profile")
                .arg(&profile)
                .arg("--target-dir")
                .arg(profile_dir.parent().unwrap())
                .arg("--manifest-path")
                .arg(&manifest)
                .status()
                .unwrap();
            assert!(status.success(), "building dsh-landlock-run failed");
        }
        assert!(helper.is_file(), "{} missing", helper.display());
        helper
    })
}

/// A hermetic root outside `/tmp`: `home/` ($HOME, $DSH_HOME), `proj/` (the workspace, a git
/// work tree),
/// `tmp/` ($TMPDIR) and `outside/` (a folder no confined command may write).
struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
    tmp: PathBuf,
    outside: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let dirs = ["home", "proj", "tmp", "outside"].map(|d| root.join(d));
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        let [home, repo, tmp_dir, outside] = dirs;
        // A git work tree of its own: the workspace root is the nearest ancestor holding
        // `.git`, and the target dir sits inside this repository's work tree.
        let st = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .env("HOME", &home)
            .status()
            .unwrap();
        assert!(st.success());
        Self {
            _tmp: tmp,
            home,
            repo,
            tmp: tmp_dir,
            outside,
        }
    }

    fn dsh(&self, url: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(dsh_bin());
        cmd.args(args)
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("DSH_HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .env("DEEPSEEK_BASE_URL", url)
            .env("DEEPSEEK_API_KEY", "sk-test")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

#[derive(Clone, Copy, Debug)]
enum Runner {
    Bwrap,
    Landlock,
}

impl Runner {
    fn name(self) -> &'static str {
        match self {
            Self::Bwrap => "bwrap",
            Self::Landlock => "landlock",
        }
    }

    /// `-c` settings selecting only this runner (and the helper path).
    fn settings(self) -> Vec<String> {
        vec![
            format!("sandbox.runners=[\"{}\"]", self.name()),
            format!(
                "plugins.dsh-sandbox-linux.landlock_helper=\"{}\"",
                helper_bin().display()
            ),
        ]
    }

    /// Whether `dsh sandbox check` selects this runner here; when not, the test reports itself
    /// skipped (and fails under `CI`).
    fn usable(self) -> bool {
        let env = Env::new();
        let mut args = vec!["sandbox".to_owned(), "check".to_owned()];
        for s in self.settings() {
            args.push("-c".into());
            args.push(s);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(env.dsh("http://127.0.0.1:9", &args), LIMIT);
        let first = text(&out.stdout).lines().next().unwrap_or("").to_owned();
        if code(out.status) == 0 && first == format!("runner: {}", self.name()) {
            return true;
        }
        let why = format!(
            "SKIPPED: the {} runner is not usable here: {}",
            self.name(),
            text(&out.stdout)
        );
        assert!(std::env::var_os("CI").is_none(), "{why} (CI is set)");
        eprintln!("{why}");
        false
    }
}

/// Runs one `dsh exec --json` whose scripted model calls `bash` once per command, then
/// answers; returns the text of each bash result (in order) and the JSON lines.
fn exec_bash(env: &Env, commands: &[String], args: &[String]) -> (Vec<String>, Vec<Value>) {
    let mut script: Vec<Value> = commands
        .iter()
        .map(|c| json!({"tool_calls": [["bash", {"command": c, "description": "Run a command"}]]}))
        .collect();
    script.push(json!({"text": "DONE"}));
    let replay = Replay::start(Value::Array(script));
    let mut all = vec!["exec".to_owned(), "--json".to_owned()];
    for a in args {
        all.push(a.clone());
    }
    all.push("go".into());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let out = run(env.dsh(&replay.url(), &all), LIMIT);
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    (tool_texts(&lines), lines)
}

/// The text of every `tool/result` in `lines`, in order.
fn tool_texts(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["type"] == "tool/result")
        .map(|l| {
            l["data"]["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn settings_args(runner: Runner, extra: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for s in runner.settings() {
        out.push("-c".into());
        out.push(s);
    }
    for e in extra {
        out.push((*e).to_owned());
    }
    out
}

const WS_HINT: &str =
    "under workspace-write mode writes outside the workspace, /tmp and $TMPDIR are denied";

fn workspace_write_confines(runner: Runner) {
    if !runner.usable() {
        return;
    }
    let env = Env::new();
    let keep = env.outside.join("keep.txt");
    std::fs::write(&keep, "keep").unwrap();
    std::os::unix::fs::symlink(&env.outside, env.repo.join("link")).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = env.outside.display().to_string();
    let tmp_name = format!(
        "/tmp/dsh-e2e-sandbox-{}-{}",
        runner.name(),
        std::process::id()
    );
    let commands = vec![
        "echo in > inside.txt && cat inside.txt".to_owned(),
        format!("echo t > {tmp_name} && cat {tmp_name} && rm {tmp_name}"),
        "echo t > \"$TMPDIR/t.txt\" && cat \"$TMPDIR/t.txt\"".to_owned(),
        "echo h > \"$HOME/escape.txt\"".to_owned(),
        "echo e > /etc/dsh-e2e-sandbox".to_owned(),
        format!("rm {}", keep.display()),
        "echo s > link/through-link.txt".to_owned(),
        format!("bash -c 'sh -c \"echo n > {out}/nested.txt\"'"),
        format!("nohup sh -c 'echo d > {out}/daemon.txt' >/dev/null 2>&1 & sleep 1"),
        format!(
            "(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED || echo NO-NETWORK"
        ),
    ];
    let (texts, _) = exec_bash(&env, &commands, &settings_args(runner, &[]));
    assert_eq!(texts.len(), commands.len());
    assert_eq!(texts[0], "in\n");
    assert_eq!(
        std::fs::read_to_string(env.repo.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert_eq!(texts[1], "t\n");
    assert_eq!(texts[2], "t\n");
    let signature = match runner {
        Runner::Bwrap => "Read-only file system",
        Runner::Landlock => "Permission denied",
    };
    let hint = |rule: &str| {
        format!(
            "[sandbox: file access denied under workspace-write mode]\n[sandbox: escalation available \u{2014} {WS_HINT} (the sandbox reported \"{rule}\"); if the change is required, retry the same command once with sandbox_permissions \"danger-full-access\" and a one-sentence justification; the user will be asked to approve]"
        )
    };
    let rule = signature.to_lowercase();
    assert_eq!(
        texts[4],
        format!(
            "[stderr]\nbash: line 1: /etc/dsh-e2e-sandbox: {signature}\n[exit code: 1]\n{}",
            hint(&rule)
        )
    );
    for (i, t) in texts.iter().enumerate().take(8).skip(3) {
        assert!(t.contains(signature), "command {i}: {t}");
        assert!(t.ends_with(&hint(&rule)), "command {i}: {t}");
    }
    assert!(!env.home.join("escape.txt").exists());
    assert!(!Path::new("/etc/dsh-e2e-sandbox").exists());
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "keep");
    assert!(!env.outside.join("through-link.txt").exists());
    assert!(!env.outside.join("nested.txt").exists());
    std::thread::sleep(Duration::from_millis(500));
    assert!(!env.outside.join("daemon.txt").exists());
    assert_eq!(texts[9], "NO-NETWORK\n");

    // `[sandbox] network = true` gives the network back, nothing else.
    let (texts, _) = exec_bash(
        &env,
        &commands[9..],
        &settings_args(runner, &["-c", "sandbox.network=true"]),
    );
    assert_eq!(texts, ["CONNECTED\n"]);
    drop(listener);
}

fn read_only_writes_nothing(runner: Runner) {
    if !runner.usable() {
        return;
    }
    let env = Env::new();
    std::fs::write(env.repo.join("seen.txt"), "x").unwrap();
    let tmp_name = format!("/tmp/dsh-e2e-ro-{}-{}", runner.name(), std::process::id());
    let commands = vec![
        "ls".to_owned(),
        "echo x > new.txt".to_owned(),
        format!("echo x > {tmp_name}"),
        "echo x > \"$TMPDIR/x\"".to_owned(),
    ];
    let (texts, _) = exec_bash(
        &env,
        &commands,
        &settings_args(runner, &["--permission-mode", "read-only"]),
    );
    assert_eq!(texts[0], "seen.txt\n");
    for t in &texts[1..] {
        assert!(
            t.contains("[sandbox: file access denied under read-only mode]\n[sandbox: escalation available \u{2014} under read-only mode every write is denied"),
            "{t}"
        );
    }
    assert!(!env.repo.join("new.txt").exists());
    assert!(!Path::new(&tmp_name).exists());
    assert!(!env.tmp.join("x").exists());
}

#[test]
fn bwrap_workspace_write_confines_writes_deletes_descendants_symlinks_and_network() {
    workspace_write_confines(Runner::Bwrap);
}

#[test]
fn landlock_workspace_write_confines_writes_deletes_descendants_symlinks_and_network() {
    workspace_write_confines(Runner::Landlock);
}

#[test]
fn bwrap_read_only_writes_nothing() {
    read_only_writes_nothing(Runner::Bwrap);
}

#[test]
fn landlock_read_only_writes_nothing() {
    read_only_writes_nothing(Runner::Landlock);
}

fn unavailable_text(mode: &str, detail: &str) -> String {
    format!(
        "Error: sandbox mode \"{mode}\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) \u{2014} otherwise switch the consumer to danger-full-access. Runner failure: {detail}"
    )
}

#[test]
fn no_usable_runner_is_sandbox_unavailable_and_runs_nothing_but_full_access_runs() {
    let env = Env::new();
    let ran = env.repo.join("ran.txt");
    let commands = vec![format!("touch {}", ran.display())];
    let (texts, lines) = exec_bash(&env, &commands, &["-c".into(), "sandbox.runners=[]".into()]);
    assert_eq!(
        texts,
        [unavailable_text(
            "workspace-write",
            "bwrap: not in [sandbox] runners; landlock: not in [sandbox] runners"
        )]
    );
    let result = lines.iter().find(|l| l["type"] == "tool/result").unwrap();
    assert_eq!(
        result["data"]["error"],
        json!({"name": "SandboxUnavailableError", "code": "SANDBOX_UNAVAILABLE"})
    );
    assert!(!ran.exists());

    let full = env.outside.join("full.txt");
    let (texts, _) = exec_bash(
        &env,
        &[format!(
            "echo full > {} && cat {}",
            full.display(),
            full.display()
        )],
        &[
            "-c".into(),
            "sandbox.runners=[]".into(),
            "--permission-mode".into(),
            "danger-full-access".into(),
        ],
    );
    assert_eq!(texts, ["full\n"]);
    assert_eq!(std::fs::read_to_string(&full).unwrap(), "full\n");
}

/// Upstream log `missing-sandbox-runner`: a runner command that does not exist fails a
/// foreground call with the fixed text, the spawn error as the runner failure and the typed
/// error; a background start records a job that ended `killed` with the runner-failure marker.
#[test]
fn missing_sandbox_runner_log() {
    let env = Env::new();
    let missing = env.repo.join(".dsh-missing-sandbox-runner");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "true", "description": "Exercise missing sandbox runner"}]]},
        {"tool_calls": [["bash", {"command": "true", "description": "Exercise missing sandbox runner in background", "run_in_background": true}]]},
        {"tool_calls": [["job_output", {"job_id": "bash-1", "wait": true}]]},
        {"text": "RUNNER_FAILURES_SURFACED"}
    ]));
    let runner = format!("sandbox.runner_command=\"{}\"", missing.display());
    let out = run(
        env.dsh(
            &replay.url(),
            &[
                "exec",
                "--json",
                "-c",
                &runner,
                "--permission-mode",
                "read-only",
                "go",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    let spawn = format!("Error: spawn {} ENOENT", missing.display());
    assert_eq!(
        tool_texts(&lines),
        [
            unavailable_text("read-only", &spawn),
            "started background job bash-1".to_owned(),
            format!(
                "[stderr]\nspawn failed: {spawn}\n[sandbox: the sandbox runner itself failed under read-only mode \u{2014} the command did not run; this is a sandbox problem, not a command failure]\n[status: killed, killed before exit]"
            ),
        ]
    );
    let result = lines.iter().find(|l| l["type"] == "tool/result").unwrap();
    assert_eq!(
        result["data"]["error"],
        json!({"name": "SandboxUnavailableError", "code": "SANDBOX_UNAVAILABLE"})
    );
}

/// Upstream log `partial-landlock-child-failure`: a Landlock helper in partial enforcement (a
/// fake one, answering the probe `partially enforced` and printing the notice at every run)
/// keeps the notice in stderr, and the child's exit 1 is the command's outcome, not a runner
/// failure.
#[test]
fn partial_landlock_child_failure_log() {
    let env = Env::new();
    let fake = env.outside.join("fake-landlock-run");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = --no-network ] && shift\nif [ \"$1\" = --probe ]; then echo 'landlock: partially enforced (older ABI)'; exit 0; fi\nwhile [ \"$1\" != -- ]; do shift; done\nshift\necho 'landlock-run: partial enforcement (older Landlock ABI)' >&2\nexec \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (texts, _) = exec_bash(
        &env,
        &["false".to_owned()],
        &[
            "-c".into(),
            "sandbox.runners=[\"landlock\"]".into(),
            "-c".into(),
            format!(
                "plugins.dsh-sandbox-linux.landlock_helper=\"{}\"",
                fake.display()
            ),
            "--permission-mode".into(),
            "read-only".into(),
        ],
    );
    assert_eq!(
        texts,
        ["[stderr]\nlandlock-run: partial enforcement (older Landlock ABI)\n[exit code: 1]"]
    );
}

/// `dsh sandbox check`: the runner on the first line; exit 1 with none usable.
#[test]
fn sandbox_check_reports_the_runner() {
    let env = Env::new();
    let out = run(
        env.dsh(
            "http://127.0.0.1:9",
            &["sandbox", "check", "-c", "sandbox.runners=[]"],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 1);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "runner: none");
    assert_eq!(
        &lines[2..],
        [
            "mode: workspace-write",
            "network: off for confined commands",
            "not used: bwrap: not in [sandbox] runners",
            "not used: landlock: not in [sandbox] runners",
        ]
    );
    if Runner::Bwrap.usable() {
        let out = run(env.dsh("http://127.0.0.1:9", &["sandbox", "check"]), LIMIT);
        assert_eq!(code(out.status), 0);
        assert_eq!(
            text(&out.stdout),
            "runner: bwrap\nenforcement: full\nmode: workspace-write\nnetwork: off for confined commands\n"
        );
    }
}

/// An escalation under `dsh exec` (no one to ask): `approval/asked` with upstream's reason,
/// then a refusal naming the flag that allows it; nothing runs.
#[test]
fn escalation_in_exec_is_denied_naming_the_flag() {
    let env = Env::new();
    let target = env.outside.join("escalated.txt");
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": format!("echo e > {}", target.display()),
            "description": "Write outside",
            "sandbox_permissions": "danger-full-access",
            "justification": "the user asked to write a file outside the workspace"
        }]]},
        {"text": "DONE"}
    ]));
    let out = run(env.dsh(&replay.url(), &["exec", "--json", "go"]), LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    let asked = lines
        .iter()
        .find(|l| l["type"] == "approval/asked")
        .unwrap();
    assert_eq!(
        asked["data"]["reason"],
        "escalate sandbox to danger-full-access: the user asked to write a file outside the workspace"
    );
    assert_eq!(
        tool_texts(&lines),
        [
            "Error: escalating this command to \"danger-full-access\" needs the user's approval and none is available (dsh exec cannot ask); rerun with --permission-mode danger-full-access to allow it"
        ]
    );
    assert!(!target.exists());
}

/// The session logs (`session.jsonl`) under `dir`.
fn session_logs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            session_logs(&p, out);
        } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
            out.push(p);
        }
    }
}

/// The records of type `kind` of the one session log under `$DSH_HOME`.
fn records_of(env: &Env, kind: &str) -> Vec<Value> {
    let mut logs = Vec::new();
    session_logs(&env.home, &mut logs);
    assert_eq!(logs.len(), 1, "{logs:?}");
    std::fs::read_to_string(&logs[0])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

/// Upstream logs `escalation-approved` / `escalation-rejected` through the interactive shell:
/// `approval/asked` with upstream's reason, then on `y` the one call runs unconfined, on `n`
/// it fails with upstream's rejection text; the answer is `approval/decided`.
fn escalation_through_the_shell(approve: bool) {
    let env = Env::new();
    let target = env.outside.join("dsh-escalated.txt");
    let t = target.display().to_string();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": format!("printf 'escalated\\n' > {t} && cat {t} && rm {t}"),
            "description": "Write file outside workspace and verify",
            "sandbox_permissions": "danger-full-access",
            "justification": "the user asked to write a file outside the workspace"
        }]]},
        {"text": "DONE"}
    ]));
    let mut shell = common::e2e::Shell::spawn(env.dsh(&replay.url(), &[]));
    shell.send("write it");
    shell.wait_for(
        "allow tool `bash` (escalate sandbox to danger-full-access: the user asked to write a file outside the workspace)?",
        Duration::from_secs(20),
    );
    shell.send(if approve { "y" } else { "n" });
    let (status, err) = shell.finish(LIMIT);
    assert_eq!(code(status), 0, "stderr: {err}");
    let asked = records_of(&env, "approval/asked");
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["data"]["reason"],
        "escalate sandbox to danger-full-access: the user asked to write a file outside the workspace"
    );
    assert_eq!(asked[0]["data"]["toolName"], "bash");
    let decided = records_of(&env, "approval/decided");
    assert_eq!(
        decided[0]["data"]["outcome"],
        if approve { "allowed-once" } else { "rejected" }
    );
    let result = &records_of(&env, "tool/result")[0]["data"]["message"]["content"][0];
    if approve {
        assert_eq!(result["content"][0]["text"], "escalated\n");
        assert_eq!(result["isError"], false);
    } else {
        assert_eq!(
            result["content"][0]["text"],
            "Error: the user rejected escalating this command to \"danger-full-access\""
        );
        assert_eq!(result["isError"], true);
    }
    assert!(!target.exists());
}

#[test]
fn escalation_approved_log() {
    escalation_through_the_shell(true);
}

#[test]
fn escalation_rejected_log() {
    escalation_through_the_shell(false);
}

/// Upstream log `session-sandbox-root`: the policy's workspace root is the session `cwd`, as the
/// fs tools see it; the model is told it in the `sandbox:policy` runtime context (upstream's
/// text), sent once and not re-sent while it does not change.
#[test]
fn session_sandbox_root_log() {
    let env = Env::new();
    let replay = Replay::start(json!([
        {"tool_calls": [["write", {"file_path": "session-root.txt", "content": "session root"}]]},
        {"tool_calls": [["bash", {"command": "cat session-root.txt", "description": "Show it"}]]},
        {"text": "DONE"}
    ]));
    let out = run(env.dsh(&replay.url(), &["exec", "--json", "go"]), LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let texts = tool_texts(&json_lines(&out.stdout));
    assert_eq!(
        texts[0],
        format!(
            "<path>{}/session-root.txt</path>\n<type>file</type>\n<content>\nCreated file\n</content>",
            env.repo.display()
        )
    );
    assert_eq!(texts[1], "session root");
    let policy = format!(
        "Current DSH file policy: workspace-write. Any available operation enforced by the DSH file sandbox may modify files under the session workspace: \\\"{}\\\". Some platform temporary areas may also be writable.",
        env.repo.display()
    );
    let requests = replay.chat_requests();
    assert_eq!(requests.len(), 3);
    // Once per runtime-context snapshot (a snapshot is re-sent whole when any of its parts
    // changes: here the git status after the write), never twice in one.
    let last = requests[2].body.to_string();
    let snapshots = last.matches("Current runtime context.").count();
    assert!(snapshots >= 1, "{last}");
    assert_eq!(last.matches(&policy).count(), snapshots, "{last}");
}

/// A runner that reports its own failure (a fatal signature on stderr, non-zero exit) fails the
/// call with `SANDBOX_UNAVAILABLE` and the matched line, rather than passing the exit off as the
/// command's.
#[test]
fn a_runner_failure_line_is_sandbox_unavailable() {
    let env = Env::new();
    let fake = env.outside.join("fake-runner");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'fakerunner: cannot set up the sandbox' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (texts, lines) = exec_bash(
        &env,
        &["touch ran.txt".to_owned()],
        &[
            "-c".into(),
            format!("sandbox.runner_command=\"{}\"", fake.display()),
            "-c".into(),
            "sandbox.runner_failure_signatures=[\"fakerunner: \"]".into(),
        ],
    );
    assert_eq!(
        texts,
        [unavailable_text(
            "workspace-write",
            "fakerunner: cannot set up the sandbox"
        )]
    );
    let result = lines.iter().find(|l| l["type"] == "tool/result").unwrap();
    assert_eq!(result["data"]["error"]["code"], "SANDBOX_UNAVAILABLE");
    assert!(!env.repo.join("ran.txt").exists());
}

/// A background job whose runner reports its own failure: once settled, `job_output` shows the
/// runner's line and upstream's runner-failure marker.
#[test]
fn a_background_runner_failure_is_marked() {
    let env = Env::new();
    let fake = env.outside.join("fake-runner");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'fakerunner: cannot set up the sandbox' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "touch ran.txt", "description": "Touch", "run_in_background": true}]]},
        {"tool_calls": [["job_output", {"job_id": "bash-1", "wait": true}]]},
        {"text": "DONE"}
    ]));
    let runner = format!("sandbox.runner_command=\"{}\"", fake.display());
    let out = run(
        env.dsh(
            &replay.url(),
            &[
                "exec",
                "--json",
                "-c",
                &runner,
                "-c",
                "sandbox.runner_failure_signatures=[\"fakerunner: \"]",
                "go",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(
        tool_texts(&json_lines(&out.stdout)),
        [
            "started background job bash-1",
            "[stderr]\nfakerunner: cannot set up the sandbox\n[sandbox: the sandbox runner itself failed under workspace-write mode \u{2014} the command did not run; this is a sandbox problem, not a command failure]\n[status: completed, exit code: 1]",
        ]
    );
    assert!(!env.repo.join("ran.txt").exists());
}

/// Whether a process whose command line is exactly `argv` runs on the host.
fn host_process_with_cmdline(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").unwrap().any(|e| {
        let p = e.unwrap().path();
        std::fs::read(p.join("cmdline")).is_ok_and(|c| c == want)
    })
}

/// Ctrl-C during a confined long command exits 130 and leaves no confined process behind (the
/// runner and everything under it are in the process group dsh kills).
fn ctrl_c_kills_the_confined_command(runner: Runner) {
    if !runner.usable() {
        return;
    }
    let env = Env::new();
    let secs = format!("300.{}{}", std::process::id(), runner.name().len());
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {
            "command": format!("echo started > started.txt; exec sleep {secs}"),
            "description": "Wait a long time"
        }]]},
        {"text": "never served"},
    ]));
    let mut args = vec!["exec".to_owned(), "--json".to_owned()];
    args.extend(settings_args(runner, &[]));
    args.push("wait".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = env.dsh(&replay.url(), &args).spawn().unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    while !(env.repo.join("started.txt").exists() && host_process_with_cmdline(&["sleep", &secs])) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let exit = rx.recv_timeout(LIMIT).unwrap_or_else(|_| {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("dsh did not exit after SIGINT");
    });
    assert_eq!(code(exit.unwrap()), 130);
    while host_process_with_cmdline(&["sleep", &secs]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the confined sleep survived Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bwrap_ctrl_c_kills_the_confined_command() {
    ctrl_c_kills_the_confined_command(Runner::Bwrap);
}

#[test]
fn landlock_ctrl_c_kills_the_confined_command() {
    ctrl_c_kills_the_confined_command(Runner::Landlock);
}

/// From a subdirectory of a git work tree the writable root is the repository (the workspace
/// root, the same fence as the fs tools'), not the launch directory: `echo > ../f` writes.
fn a_subdirectory_launch_writes_the_parent_inside_the_repository(runner: Runner) {
    if !runner.usable() {
        return;
    }
    let env = Env::new();
    let sub = env.repo.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let replay = Replay::start(json!([
        {"tool_calls": [["bash", {"command": "echo up > ../from_sub.txt", "description": "Write the parent"}]]},
        {"tool_calls": [["bash", {"command": "echo out > ../../outside/no.txt", "description": "Write outside"}]]},
        {"text": "DONE"}
    ]));
    let args = settings_args(runner, &["exec", "--json", "go"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.dsh(&replay.url(), &args);
    cmd.current_dir(&sub);
    let out = run(cmd, LIMIT);
    assert_eq!(code(out.status), 0, "stderr: {}", text(&out.stderr));
    let results = tool_texts(&json_lines(&out.stdout));
    assert_eq!(
        std::fs::read_to_string(env.repo.join("from_sub.txt")).ok(),
        Some("up\n".to_owned()),
        "{results:?}"
    );
    assert!(!env.outside.join("no.txt").exists(), "{results:?}");
}

#[test]
fn bwrap_a_subdirectory_launch_writes_the_parent_inside_the_repository() {
    a_subdirectory_launch_writes_the_parent_inside_the_repository(Runner::Bwrap);
}

#[test]
fn landlock_a_subdirectory_launch_writes_the_parent_inside_the_repository() {
    a_subdirectory_launch_writes_the_parent_inside_the_repository(Runner::Landlock);
}
