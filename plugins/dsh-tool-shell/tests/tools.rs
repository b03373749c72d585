//! The `bash`, `job_output`, `job_kill` and `job_list` tools through the `dsh-tools` registry
//! pipeline: exact rendered content, the session cwd as the default workdir, cancellation as an
//! `ABORTED` failure that kills the group, background jobs owned by the calling agent, and the
//! plugin's link-time registration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_kernel::{Context, Kernel, ScopeKey};
use dsh_llm::SessionId;
use dsh_session::{Session, SessionHeader};
use dsh_tool_shell::proc::pid_alive;
use dsh_tool_shell::tools::register_tools;
use dsh_tool_shell::{JobService, ShellConfig, ShellExecutor};
use dsh_tools::{ExecutionMode, ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use dsh_approval as _;
use dsh_tools as _;

const HANG: Duration = Duration::from_secs(30);

struct Fx {
    _kernel: Kernel,
    registry: ToolRegistry,
    root: Context,
}

fn setup() -> Fx {
    let kernel = Kernel::new();
    let root = kernel.root().child("tools").unwrap();
    let registry = ToolRegistry::new(root.clone());
    let ex = Arc::new(ShellExecutor::new(ShellConfig::default()));
    for r in register_tools(&root, &registry, ex, Arc::new(JobService::default())).unwrap() {
        r.detach();
    }
    Fx {
        _kernel: kernel,
        registry,
        root,
    }
}

fn caller(root: &Context, id: &str, cwd: &Path) -> ToolCaller {
    let key = ScopeKey::new(id);
    let ctx = root.tagged(key.clone(), id).unwrap();
    let mut header = SessionHeader::new(id, 1);
    header.cwd = Some(cwd.to_string_lossy().into_owned());
    let session = Arc::new(Session::create(id, None, Some(header)).unwrap());
    ToolCaller::new(key, ctx, session, SessionId::new(id))
}

async fn call(
    fx: &Fx,
    who: &ToolCaller,
    name: &str,
    args: Value,
    signal: CancellationToken,
) -> Arc<ToolExecutionResult> {
    let mut input = ToolExecutionInput::new("c1", name, args);
    input.caller = Some(who.clone());
    input.signal = signal;
    tokio::time::timeout(HANG, fx.registry.execute(input))
        .await
        .expect("hung")
}

fn text(r: &ToolExecutionResult) -> String {
    r.content()
        .iter()
        .filter_map(dsh_llm::ContentBlock::as_text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_runs_in_the_session_cwd_and_renders_exactly() {
    let fx = setup();
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    let a = caller(&fx.root, "a", d.path());
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "pwd", "description": "Print dir", "workdir": "sub"}),
        CancellationToken::new(),
    )
    .await;
    assert!(!r.is_error());
    assert_eq!(text(&r), format!("{}\n", d.path().join("sub").display()));
    assert_eq!(r.value().unwrap()["kind"], "foreground");
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "echo out; echo err >&2; exit 3", "description": "Fail"}),
        CancellationToken::new(),
    )
    .await;
    assert!(!r.is_error());
    assert_eq!(text(&r), "out\n[stderr]\nerr\n[exit code: 3]");
    assert_eq!(r.value().unwrap()["exitCode"], 3);
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "kill -KILL $$", "description": "Die"}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(text(&r), "(no output)\n[killed by signal: SIGKILL]");
    assert_eq!(r.value().unwrap().get("exitCode"), None);
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": " ", "description": "x"}),
        CancellationToken::new(),
    )
    .await;
    assert!(r.is_error());
    assert_eq!(
        text(&r),
        "Error: invalid command: expected a non-empty string"
    );
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"description": "x"}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(r.error_info().unwrap().code, "INVALID_ARGS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_timeout_is_reported() {
    let fx = setup();
    let d = tempfile::tempdir().unwrap();
    let a = caller(&fx.root, "a", d.path());
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "echo start; sleep 1000", "description": "Hang", "timeoutMs": 500}),
        CancellationToken::new(),
    )
    .await;
    assert!(!r.is_error());
    assert_eq!(
        text(&r),
        "start\n[timed out after 500ms]\n[killed by signal: SIGTERM]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_bash_call_is_aborted_and_group_killed() {
    let fx = setup();
    let d = tempfile::tempdir().unwrap();
    let a = caller(&fx.root, "a", d.path());
    let signal = CancellationToken::new();
    let pidfile = d.path().join("p.pid");
    let s2 = signal.clone();
    let pf = pidfile.clone();
    tokio::spawn(async move {
        let end = Instant::now() + HANG;
        while !pf.exists() && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        s2.cancel();
    });
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "sleep 600 & echo $! > p.pid; wait", "description": "Wait"}),
        signal,
    )
    .await;
    assert!(r.is_error());
    assert_eq!(r.error_info().unwrap().code, "ABORTED");
    assert_eq!(text(&r), "Error: tool call aborted");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(15);
    while pid_alive(pid) && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!pid_alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_job_tools_round_trip() {
    let fx = setup();
    let d = tempfile::tempdir().unwrap();
    let a = caller(&fx.root, "a", d.path());
    let b = caller(&fx.root, "b", d.path());
    let none = CancellationToken::new;
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "echo bg", "description": "Bg", "run_in_background": true}),
        none(),
    )
    .await;
    assert_eq!(text(&r), "started background job bash-1");
    assert_eq!(
        r.value().unwrap(),
        &json!({"kind": "background", "jobId": "bash-1"})
    );
    let r = call(
        &fx,
        &a,
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 20000}),
        none(),
    )
    .await;
    assert_eq!(text(&r), "bg\n[status: completed, exit code: 0]");
    let r = call(&fx, &a, "job_output", json!({"job_id": "bash-1"}), none()).await;
    assert_eq!(
        text(&r),
        "(no new output)\n[status: completed, exit code: 0]"
    );
    let r = call(&fx, &a, "job_kill", json!({"job_id": "bash-1"}), none()).await;
    assert_eq!(
        text(&r),
        "job bash-1 had already finished [status: completed, exit code: 0]"
    );
    let r = call(&fx, &b, "job_output", json!({"job_id": "bash-1"}), none()).await;
    assert_eq!(r.error_info().unwrap().code, "JOB_ACCESS_DENIED");
    let r = call(
        &fx,
        &a,
        "bash",
        json!({"command": "sleep 1000", "description": "Long", "run_in_background": true}),
        none(),
    )
    .await;
    assert_eq!(text(&r), "started background job bash-2");
    let r = call(
        &fx,
        &a,
        "job_kill",
        json!({"job_id": "bash-2", "reason": "no longer needed"}),
        none(),
    )
    .await;
    assert_eq!(text(&r), "requested cancellation of job bash-2");
    let r = call(
        &fx,
        &a,
        "job_output",
        json!({"job_id": "bash-2", "wait": true}),
        none(),
    )
    .await;
    assert_eq!(
        text(&r),
        "(no new output)\n[status: killed, signal: SIGTERM]"
    );
    let r = call(&fx, &a, "job_list", json!({}), none()).await;
    assert_eq!(
        text(&r),
        "bash-1 [bash] completed — echo bg\nbash-2 [bash] killed — sleep 1000"
    );
    let r = call(&fx, &b, "job_list", json!({}), none()).await;
    assert_eq!(text(&r), "(no background jobs)");
    let r = call(&fx, &a, "job_output", json!({"job_id": "nope-1"}), none()).await;
    assert_eq!(text(&r), "Error: unknown job nope-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_is_exclusive_and_job_list_parallel() {
    let fx = setup();
    let args = json!({"command": "true", "description": "x"});
    assert_eq!(
        fx.registry.execution_mode("bash", &args, None),
        ExecutionMode::Exclusive
    );
    assert_eq!(
        fx.registry.execution_mode("job_list", &json!({}), None),
        ExecutionMode::Parallel
    );
    let names: Vec<String> = fx
        .registry
        .schemas(None)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["bash", "job_kill", "job_list", "job_output"]);
    let bash = fx
        .registry
        .schemas(None)
        .into_iter()
        .find(|s| s.name == "bash")
        .unwrap();
    let props: Vec<&String> = bash.parameters["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        props,
        [
            "command",
            "description",
            "timeoutMs",
            "workdir",
            "run_in_background",
            "sandbox_permissions",
            "justification"
        ]
    );
    assert_eq!(
        bash.parameters["required"],
        json!(["command", "description"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_boot_registers_the_tools() {
    let kernel = Kernel::new();
    let report = kernel.boot().await.unwrap();
    let _ = report;
    let registry = kernel.root().get::<ToolRegistry>().expect("registry");
    let names: Vec<String> = registry.schemas(None).into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"bash".to_string()) && names.contains(&"job_output".to_string()),
        "{names:?}"
    );
    assert!(kernel.root().get::<JobService>().is_some());
    kernel.dispose().await;
}

#[test]
fn declared_effects_and_snake_case_settings() {
    use dsh_tools::ToolEffects;
    let fx = setup();
    let e = |name: &str| fx.registry.effects(name, None);
    assert_eq!(
        e("bash"),
        Some(ToolEffects::RUNS_COMMANDS.target("workdir"))
    );
    assert_eq!(e("job_output"), Some(ToolEffects::READ_ONLY));
    assert_eq!(e("job_kill"), Some(ToolEffects::OTHER));
    assert_eq!(e("job_list"), Some(ToolEffects::READ_ONLY.parallel_safe()));
    let c: ShellConfig =
        serde_json::from_value(json!({"timeout_ms": 1000, "enable_run_in_background": false}))
            .unwrap();
    assert_eq!(
        c,
        ShellConfig {
            timeout_ms: 1000,
            enable_run_in_background: false,
            ..ShellConfig::default()
        }
    );
    assert!(serde_json::from_value::<ShellConfig>(json!({"timeoutMs": 1000})).is_err());
}

/// With an [`dsh_tools::OutputFolders`] service the whole of a stream beyond the cap is stored in
/// the session's folder and declared in the value; the content has one notice naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_stores_an_overflowing_stream_in_the_session_output_folder() {
    let fx = setup();
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("spill");
    let given = folder.clone();
    fx.root
        .provide(Arc::new(dsh_tools::OutputFolders::new(move |h| {
            assert_eq!(h.id, "agent-out");
            std::fs::create_dir_all(&given)?;
            Ok(given.clone())
        })))
        .unwrap()
        .detach();
    let who = caller(&fx.root, "agent-out", dir.path());
    let r = call(
        &fx,
        &who,
        "bash",
        json!({"command": "head -c 100000 /dev/zero | tr '\\0' z", "description": "Flood"}),
        CancellationToken::new(),
    )
    .await;
    assert!(!r.is_error(), "{}", text(&r));
    let v = r.value().unwrap();
    let path = v["stdout"]["outputFile"].as_str().unwrap().to_owned();
    assert!(Path::new(&path).starts_with(&folder), "{path}");
    assert_eq!(v["stdout"]["outputFileBytes"], json!(100_000));
    assert_eq!(v["stdout"]["omittedBytes"], json!(36_000));
    assert_eq!(v["stderr"].get("outputFile"), None);
    assert_eq!(
        dsh_tools::declared_output_files(Some(v)),
        vec![path.as_str()]
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'z'; 100_000]);
    assert_eq!(
        text(&r),
        format!(
            "{}\n[... 36000 bytes omitted. Showing first 32000 and last 32000 of 100000 bytes (1 line); full output in {path} (read/grep it) ...]\n{}",
            "z".repeat(32_000),
            "z".repeat(32_000)
        )
    );
    // output within the cap keeps no file
    let r = call(
        &fx,
        &who,
        "bash",
        json!({"command": "echo small", "description": "Echo"}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(text(&r), "small\n");
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1);
}
