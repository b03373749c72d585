//! dsh-permissions: the decision matrix (each preset × read / write inside / write outside /
//! edit / bash), symlink and `..` escapes, decisions from declared effects (a new read-only
//! tool, a network tool) with no name list, the pipeline integration (deny text the model sees,
//! ask without an approval service), the `permission/preset` event payload and its once-per-
//! session logging (also at agent creation), and the `permission:policy` runtime context.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::ErrorCode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::{Kernel, ScopeKey, Settings};
use dsh_llm::SessionId;
use dsh_permissions::{
    EVENT_PRESET, PLUGIN_ID, POLICY_CONTEXT, PermissionMode, PermissionPolicy, PermissionsConfig,
    last_logged_preset, sandboxed_policy_text,
};
use dsh_session::{EventData, Session, SessionHeader};
use dsh_tools::{
    PreToolDecision, Tool, ToolCaller, ToolEffects, ToolExecutionInput, ToolExecutionResult,
    ToolFailure, ToolRegistry, ToolRunContext,
};
use serde_json::{Value, json};

use PermissionMode::{DangerFullAccess, ReadOnly, WorkspaceWrite};

/// The effects the built-in tool plugins declare (dsh-tool-fs, dsh-tool-search,
/// dsh-tool-todo, dsh-tool-shell). This test crate does not link them: a plugin never depends
/// on another plugin, so the declarations are restated here.
fn builtin_effects(tool: &str) -> Option<ToolEffects> {
    Some(match tool {
        "read" => ToolEffects::READ_ONLY.parallel_safe().target("file_path"),
        "grep" | "glob" | "job_list" => ToolEffects::READ_ONLY.parallel_safe(),
        "todo_write" | "job_output" => ToolEffects::READ_ONLY,
        "write" | "edit" => ToolEffects::WRITES_FILES.target("file_path"),
        "bash" => ToolEffects::RUNS_COMMANDS.target("workdir"),
        "job_kill" => ToolEffects::OTHER,
        _ => return None,
    })
}

/// [`dsh_permissions::decide`] for a built-in tool.
fn decide(mode: PermissionMode, tool: &str, args: &Value, ws: &Path) -> PreToolDecision {
    dsh_permissions::decide(mode, tool, builtin_effects(tool), args, ws)
}

/// A stand-in tool with declared effects; its body returns `"ran <name>"`.
struct Stub<const N: usize>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AnyArgs {
    #[serde(default)]
    file_path: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

const STUBS: [(&str, ToolEffects); 5] = [
    ("write", ToolEffects::WRITES_FILES.target("file_path")),
    ("bash", ToolEffects::RUNS_COMMANDS.target("workdir")),
    // Tools no name list has ever heard of: the declaration alone decides.
    ("peek", ToolEffects::READ_ONLY),
    ("fetch_url", ToolEffects::NETWORK),
    (
        "upload",
        ToolEffects::NETWORK.union(ToolEffects::WRITES_FILES.target("file_path")),
    ),
];

impl<const N: usize> Tool for Stub<N> {
    const NAME: &'static str = STUBS[N].0;
    type Args = AnyArgs;
    type Output = String;

    fn description(&self) -> String {
        "A stand-in.".into()
    }

    fn effects(&self) -> ToolEffects {
        STUBS[N].1
    }

    async fn call(&self, a: AnyArgs, _cx: ToolRunContext) -> Result<String, ToolFailure> {
        let _ = (
            a.file_path,
            a.content,
            a.command,
            a.description,
            a.workdir,
            a.url,
        );
        Ok(format!("ran {}", Self::NAME))
    }
}

struct Ws {
    _dir: tempfile::TempDir,
    /// Canonical temp dir (parent of the workspace).
    base: PathBuf,
    /// The workspace root (`base/ws`).
    root: PathBuf,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let root = base.join("ws");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir(base.join("outside")).unwrap();
    Ws {
        _dir: dir,
        base,
        root,
    }
}

fn allow() -> PreToolDecision {
    PreToolDecision::Allow
}

fn deny(reason: &str) -> PreToolDecision {
    PreToolDecision::Deny {
        reason: reason.to_owned(),
    }
}

fn ask(reason: String) -> PreToolDecision {
    PreToolDecision::Ask {
        reason: Some(reason),
    }
}

/// The five probe calls of the matrix.
fn probes(w: &Ws) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("read", "read", json!({"file_path": "src/lib.rs"})),
        (
            "write inside",
            "write",
            json!({"file_path": "src/new.rs", "content": "x"}),
        ),
        (
            "write outside",
            "write",
            json!({"file_path": w.base.join("outside/x.txt").display().to_string(), "content": "x"}),
        ),
        (
            "edit",
            "edit",
            json!({"file_path": "src/lib.rs", "old_string": "main", "new_string": "start"}),
        ),
        (
            "bash",
            "bash",
            json!({"command": "cargo test", "description": "Run the tests"}),
        ),
    ]
}

#[test]
fn read_only_matrix() {
    let w = ws();
    let expected = [
        allow(),
        deny(
            "denied by permission preset read-only: write modifies files; rerun with --permission-mode workspace-write to allow it",
        ),
        deny(
            "denied by permission preset read-only: write modifies files; rerun with --permission-mode workspace-write to allow it",
        ),
        deny(
            "denied by permission preset read-only: edit modifies files; rerun with --permission-mode workspace-write to allow it",
        ),
        deny(
            "denied by permission preset read-only: bash runs shell commands that can modify files; rerun with --permission-mode workspace-write to allow it",
        ),
    ];
    for ((label, tool, args), want) in probes(&w).into_iter().zip(expected) {
        assert_eq!(decide(ReadOnly, tool, &args, &w.root), want, "{label}");
    }
}

#[test]
fn workspace_write_matrix() {
    let w = ws();
    let outside = w.base.join("outside/x.txt");
    let expected = [
        allow(),
        allow(),
        ask(format!(
            "permission preset workspace-write: write target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            outside.display(),
            w.root.display()
        )),
        allow(),
        allow(),
    ];
    for ((label, tool, args), want) in probes(&w).into_iter().zip(expected) {
        assert_eq!(
            decide(WorkspaceWrite, tool, &args, &w.root),
            want,
            "{label}"
        );
    }
}

#[test]
fn danger_full_access_matrix() {
    let w = ws();
    for (label, tool, args) in probes(&w) {
        assert_eq!(
            decide(DangerFullAccess, tool, &args, &w.root),
            allow(),
            "{label}"
        );
    }
}

#[test]
fn read_only_allowlist_and_other_tools() {
    let w = ws();
    for tool in [
        "read",
        "grep",
        "glob",
        "todo_write",
        "job_output",
        "job_list",
    ] {
        assert_eq!(
            decide(ReadOnly, tool, &json!({}), &w.root),
            allow(),
            "{tool}"
        );
    }
    assert_eq!(
        decide(ReadOnly, "job_kill", &json!({"job_id": "bash-1"}), &w.root),
        deny(
            "denied by permission preset read-only: job_kill is not a read-only tool; rerun with --permission-mode workspace-write to allow it"
        )
    );
    // workspace-write lets tools without path arguments through.
    assert_eq!(
        decide(
            WorkspaceWrite,
            "job_kill",
            &json!({"job_id": "bash-1"}),
            &w.root
        ),
        allow()
    );
}

#[test]
fn workspace_write_edit_and_bash_workdir_outside_ask() {
    let w = ws();
    let outside = w.base.join("outside");
    assert_eq!(
        decide(
            WorkspaceWrite,
            "edit",
            &json!({"file_path": "/etc/hosts", "old_string": "a", "new_string": "b"}),
            &w.root
        ),
        ask(format!(
            "permission preset workspace-write: edit target /etc/hosts is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            w.root.display()
        ))
    );
    assert_eq!(
        decide(
            WorkspaceWrite,
            "bash",
            &json!({"command": "ls", "description": "List", "workdir": outside.display().to_string()}),
            &w.root
        ),
        ask(format!(
            "permission preset workspace-write: bash workdir {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            outside.display(),
            w.root.display()
        ))
    );
    // A relative workdir inside, and the root itself, are inside.
    for wd in ["src", ".", w.root.display().to_string().as_str()] {
        assert_eq!(
            decide(
                WorkspaceWrite,
                "bash",
                &json!({"command": "ls", "description": "List", "workdir": wd}),
                &w.root
            ),
            allow(),
            "{wd}"
        );
    }
}

fn outside_ask(tool: &str, target: &Path, root: &Path) -> PreToolDecision {
    let what = if tool == "bash" {
        "bash workdir".to_owned()
    } else {
        format!("{tool} target")
    };
    ask(format!(
        "permission preset workspace-write: {what} {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
        target.display(),
        root.display()
    ))
}

#[test]
fn dotdot_and_symlink_escapes_count_as_outside() {
    let w = ws();
    let out = w.base.join("outside");
    std::fs::write(out.join("secret.txt"), "s").unwrap();
    // ws/link -> ../outside (directory symlink), ws/file-link -> outside/secret.txt,
    // ws/dangling -> outside/new.txt (does not exist yet), ws/inner -> src (stays inside).
    std::os::unix::fs::symlink(&out, w.root.join("link")).unwrap();
    std::os::unix::fs::symlink(out.join("secret.txt"), w.root.join("file-link")).unwrap();
    std::os::unix::fs::symlink("../outside/new.txt", w.root.join("dangling")).unwrap();
    std::os::unix::fs::symlink("src", w.root.join("inner")).unwrap();

    let write = |p: &str| {
        decide(
            WorkspaceWrite,
            "write",
            &json!({"file_path": p, "content": ""}),
            &w.root,
        )
    };
    assert_eq!(
        write("../outside/x.txt"),
        outside_ask("write", &out.join("x.txt"), &w.root)
    );
    assert_eq!(
        write("src/../../outside/x.txt"),
        outside_ask("write", &out.join("x.txt"), &w.root)
    );
    assert_eq!(
        write("missing/../../outside/y"),
        outside_ask("write", &out.join("y"), &w.root)
    );
    assert_eq!(
        write("link/x.txt"),
        outside_ask("write", &out.join("x.txt"), &w.root)
    );
    assert_eq!(
        write("file-link"),
        outside_ask("write", &out.join("secret.txt"), &w.root)
    );
    assert_eq!(
        write("dangling"),
        outside_ask("write", &out.join("new.txt"), &w.root)
    );
    // `..` after a symlink leaves the link's target, not the link's directory.
    assert_eq!(write("link/../ws/a.txt"), allow());
    assert_eq!(write("inner/a.rs"), allow());
    assert_eq!(write("inner/../src/b.rs"), allow());
    // A sibling whose name merely starts with the root's name is outside.
    std::fs::create_dir(w.base.join("ws-other")).unwrap();
    assert_eq!(
        write(&w.base.join("ws-other/f").display().to_string()),
        outside_ask("write", &w.base.join("ws-other/f"), &w.root)
    );
    // bash workdir through the directory link.
    assert_eq!(
        decide(
            WorkspaceWrite,
            "bash",
            &json!({"command": "ls", "description": "List", "workdir": "link"}),
            &w.root
        ),
        outside_ask("bash", &out, &w.root)
    );
    // read-only tools are not path-checked.
    assert_eq!(
        decide(
            WorkspaceWrite,
            "read",
            &json!({"file_path": "link/secret.txt"}),
            &w.root
        ),
        allow()
    );
}

#[test]
fn workspace_root_given_through_a_symlink_still_contains_its_files() {
    let w = ws();
    let alias = w.base.join("alias");
    std::os::unix::fs::symlink(&w.root, &alias).unwrap();
    assert_eq!(
        decide(
            WorkspaceWrite,
            "write",
            &json!({"file_path": "src/a.rs", "content": ""}),
            &alias
        ),
        allow()
    );
    assert_eq!(
        decide(
            WorkspaceWrite,
            "write",
            &json!({"file_path": w.root.join("src/a.rs").display().to_string(), "content": ""}),
            &alias
        ),
        allow()
    );
}

#[test]
fn settings_section_parses_and_defaults() {
    assert_eq!(PermissionsConfig::default().permission_mode, WorkspaceWrite);
    let c: PermissionsConfig = serde_json::from_value(json!({"mode": "read-only"})).unwrap();
    assert_eq!(c.permission_mode, ReadOnly);
    let c: PermissionsConfig = serde_json::from_value(json!({})).unwrap();
    assert_eq!(c.permission_mode, WorkspaceWrite);
    assert!(serde_json::from_value::<PermissionsConfig>(json!({"mode": "yolo"})).is_err());
    assert!(serde_json::from_value::<PermissionsConfig>(json!({"mod": "read-only"})).is_err());
    assert_eq!(
        "danger-full-access".parse::<PermissionMode>().unwrap(),
        DangerFullAccess
    );
    let e = "full".parse::<PermissionMode>().unwrap_err();
    assert_eq!(e.code(), "UNKNOWN_PERMISSION_MODE");
}

// ---- pipeline integration ----

struct H {
    _w: Ws,
    root: PathBuf,
    kernel: Kernel,
    caller: ToolCaller,
    session: Arc<Session>,
}

async fn harness(mode: &str, with_approval: bool) -> H {
    let w = ws();
    let root = w.root.clone();
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(
            Settings::new().with_section(PLUGIN_ID, json!({ "mode": mode })),
        ))
        .unwrap()
        .detach();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| with_approval || d.id != "dsh-approval")
        .collect();
    kernel.boot_with(&descs).await.unwrap();
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    let root_ctx = kernel.root();
    reg.register_tool(root_ctx, Stub::<0>).unwrap().detach();
    reg.register_tool(root_ctx, Stub::<1>).unwrap().detach();
    reg.register_tool(root_ctx, Stub::<2>).unwrap().detach();
    reg.register_tool(root_ctx, Stub::<3>).unwrap().detach();
    reg.register_tool(root_ctx, Stub::<4>).unwrap().detach();
    let mut header = SessionHeader::new("s-1", 0);
    header.cwd = Some(root.display().to_string());
    let session = Arc::new(Session::create("s-1", None, Some(header)).unwrap());
    let key = ScopeKey::new("agent");
    let actx = kernel.root().tagged(key.clone(), "agent").unwrap();
    let caller = ToolCaller::new(key, actx, session.clone(), SessionId::new("s-1"));
    H {
        _w: w,
        root,
        kernel,
        caller,
        session,
    }
}

impl H {
    async fn call(&self, id: &str, name: &str, args: Value) -> Arc<ToolExecutionResult> {
        let reg = self.kernel.root().require::<ToolRegistry>().unwrap();
        reg.execute(ToolExecutionInput::new(id, name, args).with_caller(self.caller.clone()))
            .await
    }

    fn preset_events(&self) -> Vec<Value> {
        self.session
            .events()
            .iter()
            .filter(|e| e.kind.as_str() == EVENT_PRESET)
            .map(|e| match &e.data {
                EventData::Opaque(v) => v.clone(),
                other => panic!("unexpected payload {other:?}"),
            })
            .collect()
    }
}

fn text(r: &ToolExecutionResult) -> String {
    r.content()
        .iter()
        .filter_map(|b| b.as_text())
        .collect::<Vec<_>>()
        .join("")
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_denial_reaches_the_model_and_preset_is_logged_once() {
    let h = harness("read-only", true).await;
    let r = h
        .call("c1", "write", json!({"file_path": "a.txt", "content": "x"}))
        .await;
    assert!(r.is_error());
    assert_eq!(
        text(&r),
        "Error: denied by permission preset read-only: write modifies files; rerun with --permission-mode workspace-write to allow it"
    );
    let r = h
        .call(
            "c2",
            "bash",
            json!({"command": "ls", "description": "List"}),
        )
        .await;
    // The sandbox seam is booted (linked through dsh-permissions): under read-only, bash runs,
    // its commands confined read-only by the OS sandbox, instead of being denied.
    assert_eq!(text(&r), "ran bash");
    assert_eq!(h.preset_events(), vec![json!({"preset": "read-only"})]);
    // The serialized event line carries the upstream payload shape.
    let ev = h
        .session
        .events()
        .iter()
        .find(|e| e.kind.as_str() == EVENT_PRESET)
        .cloned()
        .unwrap();
    let line = serde_json::to_value(&*ev).unwrap();
    assert_eq!(line["type"], json!("permission/preset"));
    assert_eq!(line["data"], json!({"preset": "read-only"}));
    assert_eq!(last_logged_preset(&h.session).as_deref(), Some("read-only"));
}

#[tokio::test(flavor = "multi_thread")]
async fn workspace_write_ask_without_approval_service_is_denied_with_the_ask_reason() {
    let h = harness("workspace-write", false).await;
    let outside = h.root.parent().unwrap().join("outside/x.txt");
    let r = h
        .call(
            "c1",
            "write",
            json!({"file_path": outside.display().to_string(), "content": "x"}),
        )
        .await;
    assert_eq!(
        text(&r),
        format!(
            "Error: permission preset workspace-write: write target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            outside.display(),
            h.root.display()
        )
    );
    // Allowed calls pass the policy and reach dispatch (a stand-in tool).
    let r = h
        .call("c2", "write", json!({"file_path": "a.txt", "content": "x"}))
        .await;
    assert!(!text(&r).contains("permission preset"), "{}", text(&r));
    assert_eq!(
        h.preset_events(),
        vec![json!({"preset": "workspace-write"})]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_later_deny_wins_over_an_ask() {
    let h = harness("workspace-write", false).await;
    h.kernel
        .root()
        .on_waterfall::<dsh_tools::ToolsPreExecute, _, _>(|_e, _next| async {
            Ok(PreToolDecision::Deny {
                reason: "blocked by test".into(),
            })
        })
        .unwrap()
        .detach();
    let r = h
        .call(
            "c1",
            "write",
            json!({"file_path": "/etc/x", "content": "x"}),
        )
        .await;
    assert_eq!(text(&r), "Error: blocked by test");
}

#[tokio::test(flavor = "multi_thread")]
async fn resumed_session_with_same_preset_logs_nothing_new() {
    let mut header = SessionHeader::new("s-2", 0);
    header.cwd = Some("/tmp".into());
    let session = Session::create("s-2", None, Some(header)).unwrap();
    let p = PermissionPolicy::new(ReadOnly);
    assert!(p.ensure_logged(&session).unwrap());
    assert!(!p.ensure_logged(&session).unwrap());
    // A new policy (e.g. after a restart) sees the logged preset and appends nothing.
    assert!(
        !PermissionPolicy::new(ReadOnly)
            .ensure_logged(&session)
            .unwrap()
    );
    // A changed preset is logged.
    assert!(
        PermissionPolicy::new(DangerFullAccess)
            .ensure_logged(&session)
            .unwrap()
    );
    let presets: Vec<Value> = session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == EVENT_PRESET)
        .map(|e| match &e.data {
            EventData::Opaque(v) => v.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        presets,
        vec![
            json!({"preset": "read-only"}),
            json!({"preset": "danger-full-access"})
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_runtime_context_states_the_mode() {
    for mode in PermissionMode::ALL {
        let h = harness(mode.as_str(), true).await;
        let sp = h
            .kernel
            .root()
            .require::<dsh_system_prompt::SystemPrompt>()
            .unwrap();
        let a = sp
            .assemble(dsh_system_prompt::AssembleContext::for_scope(None))
            .await
            .unwrap();
        let contexts = dsh_system_prompt::render_contexts(&a).unwrap();
        let ours: Vec<_> = contexts
            .iter()
            .filter(|c| c.name == POLICY_CONTEXT)
            .collect();
        assert_eq!(ours.len(), 1);
        // The sandbox seam is booted: bash is described as sandboxed.
        assert_eq!(ours[0].text, sandboxed_policy_text(mode));
        assert!(
            ours[0]
                .text
                .starts_with(&format!("Permission mode: {mode}."))
        );
    }
}

fn open_turn(session: &Session) {
    session
        .append(
            "turn/start",
            EventData::TurnStart(dsh_session::TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn workspace_write_ask_goes_through_the_approval_service() {
    let h = harness("workspace-write", true).await;
    open_turn(&h.session);
    let outside = h.root.parent().unwrap().join("outside/x.txt");
    let args = json!({"file_path": outside.display().to_string(), "content": "x"});
    // No answerer: the approval service answers `unavailable`; the pipeline denies.
    let r = h.call("c1", "write", args.clone()).await;
    assert_eq!(
        text(&r),
        "Error: tool \"write\" requires approval, but no approval channel is available"
    );
    // The question the user would see carries the preset's reason.
    let asked: Vec<Value> = h
        .session
        .events()
        .iter()
        .filter(|e| e.kind.as_str() == "approval/asked")
        .map(|e| serde_json::to_value(&**e).unwrap()["data"]["reason"].clone())
        .collect();
    assert_eq!(
        asked,
        vec![json!(format!(
            "permission preset workspace-write: write target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            outside.display(),
            h.root.display()
        ))]
    );
    // An answerer that allows once lets the call through the policy (to the stand-in body).
    h.kernel
        .root()
        .on_waterfall::<dsh_approval::ApprovalRequestEvent, _, _>(|_q, _next| async {
            Ok(dsh_approval::ApprovalOutcome::AllowedOnce.into())
        })
        .unwrap()
        .detach();
    let r = h.call("c2", "write", args).await;
    let t = text(&r);
    assert!(
        !t.contains("approval") && !t.contains("permission preset"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_read_only_tool_is_allowed_in_read_only_without_any_name_list() {
    let h = harness("read-only", true).await;
    let r = h
        .call("c1", "peek", json!({"file_path": "src/lib.rs"}))
        .await;
    assert_eq!(
        r.to_json(),
        json!({"isError": false, "value": "ran peek", "content": [{"type": "text", "text": "ran peek"}]})
    );
    // The same decision straight from the declaration.
    assert_eq!(
        dsh_permissions::decide(
            ReadOnly,
            "peek",
            Some(ToolEffects::READ_ONLY),
            &json!({}),
            &h.root
        ),
        allow()
    );
    // Without a declaration (an unknown tool) read-only denies.
    assert_eq!(
        dsh_permissions::decide(ReadOnly, "peek", None, &json!({}), &h.root),
        deny(
            "denied by permission preset read-only: peek is not a read-only tool; rerun with --permission-mode workspace-write to allow it"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_network_tool_is_denied_in_read_only_asks_in_workspace_write_and_runs_in_full_access() {
    let network_ask = "permission preset workspace-write: fetch_url uses the network; approve this call to allow it once, or rerun with --permission-mode danger-full-access";
    let h = harness("read-only", false).await;
    let r = h
        .call("c1", "fetch_url", json!({"url": "http://127.0.0.1/"}))
        .await;
    assert_eq!(
        text(&r),
        "Error: denied by permission preset read-only: fetch_url uses the network; rerun with --permission-mode workspace-write to allow it"
    );
    let h = harness("workspace-write", false).await;
    let r = h
        .call("c1", "fetch_url", json!({"url": "http://127.0.0.1/"}))
        .await;
    assert_eq!(text(&r), format!("Error: {network_ask}"));
    // A target outside the workspace is reported first; inside, the network still asks.
    let outside = h.root.parent().unwrap().join("outside/up.bin");
    assert_eq!(
        dsh_permissions::decide(
            WorkspaceWrite,
            "upload",
            Some(STUBS[4].1),
            &json!({"file_path": outside.display().to_string()}),
            &h.root
        ),
        outside_ask("upload", &outside, &h.root)
    );
    let r = h
        .call("c2", "upload", json!({"file_path": "src/up.bin"}))
        .await;
    assert_eq!(
        text(&r),
        "Error: permission preset workspace-write: upload uses the network; approve this call to allow it once, or rerun with --permission-mode danger-full-access"
    );
    let h = harness("danger-full-access", false).await;
    let r = h
        .call("c1", "fetch_url", json!({"url": "http://127.0.0.1/"}))
        .await;
    assert_eq!(text(&r), "ran fetch_url");
}

#[test]
fn a_read_the_fs_fence_would_refuse_asks_and_one_it_allows_has_no_opinion() {
    use dsh_fs::{FsConfig, FsService};
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let outside = std::fs::canonicalize(other.path()).unwrap().join("x.txt");
    std::fs::write(&outside, "x\n").unwrap();
    std::fs::write(root.join("in.txt"), "in\n").unwrap();
    let read = builtin_effects("read").unwrap();
    let args = |p: &str| json!({"file_path": p});
    let fenced = FsService::new(FsConfig::default());
    assert_eq!(
        dsh_permissions::read_outside_decision(
            &fenced,
            "read",
            read,
            &args(outside.to_str().unwrap()),
            &root
        ),
        Some(PreToolDecision::Ask {
            reason: Some(format!(
                "permission preset workspace-write: read target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
                outside.display(),
                root.display()
            )),
        })
    );
    assert_eq!(
        dsh_permissions::read_outside_decision(&fenced, "read", read, &args("in.txt"), &root),
        None
    );
    // no declared target, or a missing argument: no opinion
    assert_eq!(
        dsh_permissions::read_outside_decision(
            &fenced,
            "grep",
            builtin_effects("grep").unwrap(),
            &args(outside.to_str().unwrap()),
            &root
        ),
        None
    );
    assert_eq!(
        dsh_permissions::read_outside_decision(&fenced, "read", read, &json!({}), &root),
        None
    );
    // the fs policy lets reads out: nothing to ask
    let open = FsService::new(FsConfig {
        allow_read_outside_workspace: true,
        ..FsConfig::default()
    });
    assert_eq!(
        dsh_permissions::read_outside_decision(
            &open,
            "read",
            read,
            &args(outside.to_str().unwrap()),
            &root
        ),
        None
    );
}

/// A session started in a subdirectory of the workspace root: relative targets resolve against
/// the subdirectory, the fence is the root (README, "Workspace root").
#[test]
fn workspace_write_fences_at_the_root_and_resolves_against_the_cwd() {
    let w = ws();
    let dirs = dsh_fs::Workspace {
        root: w.root.clone(),
        cwd: w.root.join("src"),
    };
    let decide_in = |tool: &str, args: Value| {
        dsh_permissions::decide(WorkspaceWrite, tool, builtin_effects(tool), &args, &dirs)
    };
    assert_eq!(
        decide_in("edit", json!({"file_path": "../top.txt"})),
        allow()
    );
    assert_eq!(
        decide_in("bash", json!({"command": "ls", "workdir": ".."})),
        allow()
    );
    assert_eq!(
        decide_in("write", json!({"file_path": "../../outside/x.txt"})),
        ask(format!(
            "permission preset workspace-write: write target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            w.base.join("outside/x.txt").display(),
            w.root.display()
        ))
    );
    // The same relative path from the root itself leaves the workspace.
    assert_eq!(
        decide(
            WorkspaceWrite,
            "edit",
            &json!({"file_path": "../top.txt"}),
            &w.root
        ),
        ask(format!(
            "permission preset workspace-write: edit target {} is outside the workspace {}; approve this call to allow it once, or rerun with --permission-mode danger-full-access",
            w.base.join("top.txt").display(),
            w.root.display()
        ))
    );
}
