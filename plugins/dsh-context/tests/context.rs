//! dsh-context: AGENTS.md discovery order on a temp tree with `git init`, exact section texts
//! (including truncation and braces in a file), the date text with an injected clock, the git
//! context on a temp repository, and a byte-stable system prompt while only the date and git
//! state change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use dsh_context::{
    AgentInfo, ContextConfig, ContextService, DATE_CONTEXT, GIT_CONTEXT, GitOptions,
    MAX_AGENTS_FILE_BYTES, PERSONA, TOOL_GUIDANCE, agents_section_text, date_text,
    discover_agents_files, git_context, install, load_agents_file,
};
use dsh_kernel::{Context, ErrorCode, Kernel, ScopeKey, Settings};
use dsh_system_prompt::{
    AssembleContext, IDENTITY_TEXT, SystemPrompt, render_contexts, render_prompt,
};
use serde_json::json;

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=dsh test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

struct Tree {
    _dir: tempfile::TempDir,
    base: PathBuf,
    repo: PathBuf,
    home: PathBuf,
}

/// base/AGENTS.md (above the repo: ignored), base/repo (git) with AGENTS.md at repo/, repo/a/,
/// repo/a/b/ (none in repo/a/b's parent chain elsewhere), repo/a/b/c/AGENTS.md (below the cwd:
/// ignored), base/home/AGENTS.md.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let repo = base.join("repo");
    let home = base.join("home");
    for d in [repo.join("a/b/c"), repo.join("x"), home.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    git(&repo, &["init", "-q"]);
    std::fs::write(base.join("AGENTS.md"), "above the repository\n").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "root rules\n").unwrap();
    std::fs::write(repo.join("a/AGENTS.md"), "a rules\n").unwrap();
    std::fs::write(repo.join("a/b/AGENTS.md"), "b rules\n").unwrap();
    std::fs::write(repo.join("a/b/c/AGENTS.md"), "below the cwd\n").unwrap();
    std::fs::write(home.join("AGENTS.md"), "home rules\n").unwrap();
    Tree {
        _dir: dir,
        base,
        repo,
        home,
    }
}

#[test]
fn agents_md_discovery_order_git_root_to_cwd_then_home() {
    let t = tree();
    let found = discover_agents_files(&t.repo.join("a/b"), Some(&t.home));
    assert_eq!(
        found,
        vec![
            t.repo.join("AGENTS.md"),
            t.repo.join("a/AGENTS.md"),
            t.repo.join("a/b/AGENTS.md"),
            t.home.join("AGENTS.md"),
        ]
    );
    // A directory without its own file still gets the root's; no home ⇒ nothing more.
    assert_eq!(
        discover_agents_files(&t.repo.join("x"), None),
        vec![t.repo.join("AGENTS.md")]
    );
    // Outside a repository: only the cwd's own file, then home.
    assert_eq!(
        discover_agents_files(&t.base, Some(&t.home)),
        vec![t.base.join("AGENTS.md"), t.home.join("AGENTS.md")]
    );
    // Home inside the chain is listed once, at its first position.
    assert_eq!(
        discover_agents_files(&t.repo.join("a"), Some(&t.repo)),
        vec![t.repo.join("AGENTS.md"), t.repo.join("a/AGENTS.md")]
    );
}

#[test]
fn agents_section_text_exact_and_truncation() {
    let t = tree();
    let f = load_agents_file(&t.repo.join("a/AGENTS.md")).unwrap();
    assert_eq!(
        agents_section_text(&f),
        format!(
            "# AGENTS.md: {}\n\na rules",
            t.repo.join("a/AGENTS.md").display()
        )
    );
    // 40 000 bytes: 'é' (2 bytes) repeated, so the 32 KiB cut lands on a char boundary exactly.
    let big = t.base.join("big.md");
    std::fs::write(&big, "é".repeat(20_000)).unwrap();
    let f = load_agents_file(&big).unwrap();
    assert!(f.truncated);
    assert_eq!(f.total_bytes, 40_000);
    assert_eq!(f.text.len(), MAX_AGENTS_FILE_BYTES);
    let text = agents_section_text(&f);
    assert!(text.ends_with(&format!(
        "\n\n[truncated: only the first 32768 of 40000 bytes of {} are included]",
        big.display()
    )));
    // Odd cut: 'x' then 'é's ⇒ the cut backs off to a boundary (32767 bytes kept).
    std::fs::write(&big, format!("x{}", "é".repeat(20_000))).unwrap();
    let f = load_agents_file(&big).unwrap();
    assert_eq!(f.text.len(), 32_767);
    // Whitespace-only files are skipped.
    std::fs::write(&big, " \n\n").unwrap();
    assert_eq!(load_agents_file(&big), None);
}

#[test]
fn date_text_exact() {
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    assert_eq!(
        date_text(at(1_796_018_400)),
        "Today's date is 2026-11-30 (Monday, UTC)."
    );
    assert_eq!(
        date_text(at(1_796_083_201)),
        "Today's date is 2026-12-01 (Tuesday, UTC)."
    );
    assert_eq!(
        date_text(at(1_709_251_199)),
        "Today's date is 2024-02-29 (Thursday, UTC)."
    );
}

#[test]
fn git_context_on_a_temp_repo() {
    let dir = tempfile::tempdir().unwrap();
    let repo = std::fs::canonicalize(dir.path()).unwrap();
    git(&repo, &["init", "-q"]);
    assert_eq!(
        git_context(&repo).unwrap(),
        format!(
            "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## No commits yet on main\nWorking tree clean.",
            repo.display()
        )
    );
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    git(&repo, &["checkout", "-q", "-b", "feature/x"]);
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    std::fs::write(repo.join("b.txt"), "new\n").unwrap();
    let expected = format!(
        "Git repository: {}\nBranch: feature/x\nStatus (`git status --porcelain=v1 --branch`):\n## feature/x\n M a.txt\n?? b.txt",
        repo.display()
    );
    assert_eq!(git_context(&repo).unwrap(), expected);
    // From a subdirectory the same repository is described.
    std::fs::create_dir(repo.join("sub")).unwrap();
    assert_eq!(git_context(&repo.join("sub")).unwrap(), expected);
    // Not a repository ⇒ omitted.
    let plain = tempfile::tempdir().unwrap();
    assert_eq!(git_context(plain.path()), None);
}

// ---- assembly through the SystemPrompt service ----

struct A {
    kernel: Kernel,
    agent: Context,
    key: ScopeKey,
    clock: Arc<AtomicU64>,
    service: Arc<ContextService>,
}

async fn assembly_harness(cwd: &Path, home: &Path) -> A {
    let kernel = Kernel::new();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-system-prompt")
        .collect();
    kernel.boot_with(&descs).await.unwrap();
    let clock = Arc::new(AtomicU64::new(1_796_018_400));
    let c = clock.clone();
    let config = ContextConfig {
        dsh_home: Some(home.to_path_buf()),
        ..ContextConfig::default()
    };
    let scope = kernel.root().child("plugin:dsh-context").unwrap();
    let service = install(
        &scope,
        &config,
        Arc::new(move || UNIX_EPOCH + Duration::from_secs(c.load(Ordering::SeqCst))),
    )
    .unwrap();
    let key = ScopeKey::new("agent:a-1");
    let agent = kernel.root().tagged(key.clone(), "agent:a-1").unwrap();
    agent
        .provide(Arc::new(AgentInfo {
            id: "a-1".into(),
            cwd: Some(cwd.display().to_string()),
        }))
        .unwrap()
        .detach();
    A {
        kernel,
        agent,
        key,
        clock,
        service,
    }
}

impl A {
    async fn render(&self) -> (String, Vec<(String, String)>) {
        let sp = self.kernel.root().require::<SystemPrompt>().unwrap();
        let a = sp
            .assemble(AssembleContext {
                scope: Some(self.key.clone()),
                agent: Some(self.agent.clone()),
                cancellation: None,
            })
            .await
            .unwrap();
        let system = render_prompt(&a).unwrap();
        let contexts = render_contexts(&a)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.text))
            .collect();
        (system, contexts)
    }
}

fn environment(cwd: &Path) -> String {
    format!(
        "Environment:\n- Workspace root: {}\n- Operating system: {} ({})",
        cwd.display(),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn system_prompt_exact_with_agents_sections() {
    let t = tree();
    // Braces in a file are text, never template references.
    std::fs::write(t.repo.join("a/AGENTS.md"), "use {{name}} literally }}\n").unwrap();
    let cwd = t.repo.join("a/b");
    let h = assembly_harness(&cwd, &t.home).await;
    let (system, contexts) = h.render().await;
    let expected = [
        IDENTITY_TEXT.to_owned(),
        PERSONA.to_owned(),
        TOOL_GUIDANCE.to_owned(),
        environment(&cwd),
        format!(
            "# AGENTS.md: {}\n\nroot rules",
            t.repo.join("AGENTS.md").display()
        ),
        format!(
            "# AGENTS.md: {}\n\nuse {{{{name}}}} literally }}}}",
            t.repo.join("a/AGENTS.md").display()
        ),
        format!(
            "# AGENTS.md: {}\n\nb rules",
            t.repo.join("a/b/AGENTS.md").display()
        ),
        format!(
            "# AGENTS.md: {}\n\nhome rules",
            t.home.join("AGENTS.md").display()
        ),
    ]
    .join("\n\n");
    assert_eq!(system, expected);
    assert_eq!(
        contexts,
        vec![
            (
                DATE_CONTEXT.to_owned(),
                "Today's date is 2026-11-30 (Monday, UTC).".to_owned()
            ),
            (
                GIT_CONTEXT.to_owned(),
                format!(
                    "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## No commits yet on main\n?? AGENTS.md\n?? a/",
                    t.repo.display()
                )
            ),
        ]
    );
    // AGENTS.md files are read once per agent: later edits are not seen by this agent.
    std::fs::write(t.repo.join("AGENTS.md"), "changed\n").unwrap();
    assert_eq!(h.render().await.0, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn system_prompt_is_byte_stable_when_only_date_and_git_change() {
    let t = tree();
    let cwd = t.repo.clone();
    std::fs::write(cwd.join("f.txt"), "1\n").unwrap();
    git(&cwd, &["add", "-A"]);
    git(&cwd, &["commit", "-q", "-m", "init"]);
    let h = assembly_harness(&cwd, &t.home).await;
    let (system1, contexts1) = h.render().await;
    let git1 = format!(
        "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## main\nWorking tree clean.",
        cwd.display()
    );
    assert_eq!(contexts1[1].1, git1);

    // Next day, a modified file and a new branch; the git state is cached until the next turn.
    h.clock.fetch_add(86_400, Ordering::SeqCst);
    std::fs::write(cwd.join("f.txt"), "2\n").unwrap();
    git(&cwd, &["checkout", "-q", "-b", "topic"]);
    assert_eq!(h.render().await.1[1].1, git1);
    h.service.invalidate_git("a-1");
    let (system2, contexts2) = h.render().await;
    assert_eq!(system2, system1);
    assert_eq!(
        contexts2,
        vec![
            (
                DATE_CONTEXT.to_owned(),
                "Today's date is 2026-12-01 (Tuesday, UTC).".to_owned()
            ),
            (
                GIT_CONTEXT.to_owned(),
                format!(
                    "Git repository: {}\nBranch: topic\nStatus (`git status --porcelain=v1 --branch`):\n## topic\n M f.txt",
                    cwd.display()
                )
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn git_state_is_read_again_only_after_a_workspace_change_or_a_new_turn() {
    let t = tree();
    let cwd = t.repo.clone();
    std::fs::write(cwd.join("f.txt"), "1\n").unwrap();
    git(&cwd, &["add", "-A"]);
    git(&cwd, &["commit", "-q", "-m", "init"]);
    let h = assembly_harness(&cwd, &t.home).await;
    let clean = format!(
        "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## main\nWorking tree clean.",
        cwd.display()
    );
    let modified = format!(
        "Git repository: {}\nBranch: main\nStatus (`git status --porcelain=v1 --branch`):\n## main\n M f.txt",
        cwd.display()
    );
    assert_eq!(h.render().await.1[1].1, clean);
    std::fs::write(cwd.join("f.txt"), "2\n").unwrap();
    assert_eq!(h.render().await.1[1].1, clean);
    h.service.workspace_changed();
    assert_eq!(h.render().await.1[1].1, modified);
    std::fs::write(cwd.join("f.txt"), "1\n").unwrap();
    assert_eq!(h.render().await.1[1].1, modified);
    h.service.invalidate_git("another-agent");
    assert_eq!(h.render().await.1[1].1, modified);
    h.service.invalidate_git("a-1");
    assert_eq!(h.render().await.1[1].1, clean);
    // The work tree was located once and is shared with the AGENTS.md discovery.
    assert_eq!(h.service.repo(&cwd).unwrap().root, cwd);
    assert_eq!(h.service.repo(&cwd).unwrap().index, cwd.join(".git/index"));
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_applies_from_settings_and_respects_switches() {
    let t = tree();
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(Settings::new().with_section(
            "dsh-context",
            json!({
                "persona": "You are a careful reviewer working in {{cwd}}.",
                "persona_mode": "replace",
                "dsh_home": t.home.display().to_string(),
                "include_git": false,
                "include_date": false,
            }),
        )))
        .unwrap()
        .detach();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-system-prompt" || d.id == "dsh-context")
        .collect();
    kernel.boot_with(&descs).await.unwrap();
    let key = ScopeKey::new("agent:b");
    let agent = kernel.root().tagged(key.clone(), "agent:b").unwrap();
    agent
        .provide(Arc::new(AgentInfo {
            id: "b".into(),
            cwd: Some(t.base.display().to_string()),
        }))
        .unwrap()
        .detach();
    let sp = kernel.root().require::<SystemPrompt>().unwrap();
    let a = sp
        .assemble(AssembleContext {
            scope: Some(key),
            agent: Some(agent),
            cancellation: None,
        })
        .await
        .unwrap();
    assert_eq!(
        render_prompt(&a).unwrap(),
        [
            IDENTITY_TEXT.to_owned(),
            format!(
                "You are a careful reviewer working in {}.",
                t.base.display()
            ),
            TOOL_GUIDANCE.to_owned(),
            environment(&t.base),
            format!(
                "# AGENTS.md: {}\n\nabove the repository",
                t.base.join("AGENTS.md").display()
            ),
            format!(
                "# AGENTS.md: {}\n\nhome rules",
                t.home.join("AGENTS.md").display()
            ),
        ]
        .join("\n\n")
    );
    assert_eq!(render_contexts(&a).unwrap(), vec![]);

    // An assembly without an agent: no workspace line, no AGENTS.md, no cwd needed.
    let a = sp.assemble(AssembleContext::for_scope(None)).await.unwrap();
    let err = render_prompt(&a).unwrap_err();
    // The persona override references {{cwd}}, which has no value without an agent.
    assert_eq!(err.code(), "PROMPT_VARIABLE_UNSET");
}

#[test]
fn settings_defaults_and_unknown_fields() {
    let c = ContextConfig::default();
    assert_eq!(c.persona, None);
    assert_eq!(c.persona_text(), PERSONA);
    // `persona` adds to the working method unless `persona_mode = "replace"`.
    let c: ContextConfig = serde_json::from_value(json!({"persona": "Answer in French."})).unwrap();
    assert_eq!(c.persona_text(), format!("{PERSONA}\n\nAnswer in French."));
    let c: ContextConfig =
        serde_json::from_value(json!({"persona": "Answer in French.", "persona_mode": "replace"}))
            .unwrap();
    assert_eq!(c.persona_text(), "Answer in French.");
    let c: ContextConfig = serde_json::from_value(json!({"persona": " "})).unwrap();
    assert_eq!(c.persona_text(), PERSONA);
    assert!(c.include_git && c.include_date);
    let c: ContextConfig = serde_json::from_value(json!({"include_git": false})).unwrap();
    assert!(!c.include_git && c.include_date);
    assert!(serde_json::from_value::<ContextConfig>(json!({"git": false})).is_err());
    let d = ContextConfig::default().git_options();
    assert_eq!(d.timeout, Duration::from_millis(2_000));
    assert_eq!(d.status_max_files, 20_000);
    let zero = serde_json::from_value::<ContextConfig>(json!({"git_timeout_ms": 0}));
    assert_eq!(zero.unwrap_err().to_string(), "must be at least 1");
    let c: ContextConfig =
        serde_json::from_value(json!({"git_timeout_ms": 1, "git_status_max_files": 7})).unwrap();
    assert_eq!(
        c.git_options(),
        GitOptions {
            timeout: Duration::from_millis(1),
            status_max_files: 7
        }
    );
    let c = ContextConfig {
        dsh_home: Some("/x".into()),
        ..ContextConfig::default()
    };
    assert_eq!(c.resolved_dsh_home(), Some(PathBuf::from("/x")));
}
