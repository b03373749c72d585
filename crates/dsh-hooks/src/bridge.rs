//! The bridge: the hooks of one dialect installed on the loop's and the tool pipeline's
//! extension points. See docs/upstream/hooks.md ("Mapping").
//!
//! | hook | point | effect |
//! |---|---|---|
//! | SessionStart | `agent/session-start` (emit; the run is awaited by the first step) | `additionalContext` ⇒ a context message in the first step |
//! | UserPromptSubmit | `agent/pre-step` (waterfall; only for steps with user messages) | deny ⇒ `Reject` (turn ends `blocked`); contexts ⇒ one message after the step's messages |
//! | PreToolUse | `tools/pre-execute` (waterfall) | deny ⇒ `Deny`; ask (Claude Code) ⇒ `Ask` (a deny further down still wins) |
//! | PostToolUse | `tools/post-execute` (waterfall; Claude Code: only for results that are not errors) | deny ⇒ `Block` with the reason as feedback; contexts ⇒ a message before the next step |
//! | Stop | `agent/turn-stopping` (serial) | deny ⇒ `steer(reason)` (another step), at most `max_stop_blocks` times in a row per turn |

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_agent::lifecycle::AgentSessionStart;
use dsh_agent::{AgentPreStep, AgentRegistry, AgentTurnStopping, PreStepDecision};
use dsh_kernel::{BoxError, Context};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_persistence::PersistenceService;
use dsh_session::Session;
use dsh_tools::{PostToolDecision, PreToolDecision, ToolsPostExecute, ToolsPreExecute};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Dialect, HookCommand, HookEvent, Substitutions, load_file};
use crate::error::HooksError;
use crate::output::{Decision, HookOutput, Merged, StdoutForm, merge, parse_output, too_long};
use crate::payload::{Common, Facts, payload, stdin_bytes};
use crate::records::{self, HookInvoked, HookResult};
use crate::runner::{DEFAULT_TIMEOUT_MS, HookRunSpec, OUTPUT_MAX_BYTES, run_hook};
use crate::settings::DEFAULT_MAX_STOP_BLOCKS;

/// Fallback reason of a PreToolUse block without one (the model reads `Error: <this>`).
pub const PRE_TOOL_FALLBACK: &str = "blocked by PreToolUse hook";
/// Fallback feedback of a PostToolUse block without a reason.
pub const POST_TOOL_FALLBACK: &str = "blocked by PostToolUse hook";
/// Fallback text the model gets when a Stop hook blocks without a reason.
pub const STOP_FALLBACK: &str = "continue: blocked by Stop hook";
/// Most characters of a hook's stderr kept in `hook/result.stderrSummary` (then `…`).
pub const STDERR_SUMMARY_MAX_CHARS: usize = 500;

/// Payload of [`HookNotice`]: something about a hook the user should see (a non-blocking
/// failure, ignored output, a blocked prompt, the Stop guard). Hosts print it; libraries never
/// do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookNoticePayload {
    /// The session concerned (`None` at boot).
    pub session_id: Option<String>,
    /// The bridge's dialect.
    pub dialect: Dialect,
    /// One line of text.
    pub text: String,
}

dsh_kernel::event! {
    /// `hooks/notice` (emit, dispatched with the agent's scope key; hosts listen globally).
    pub struct HookNotice: emit("hooks/notice") => HookNoticePayload;
}

/// What a bridge loaded: its hooks in force, and the files it refused.
#[derive(Debug, Clone)]
pub struct HookSet {
    /// The dialect.
    pub dialect: Dialect,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// The hooks in force, in run order.
    pub hooks: Vec<HookCommand>,
    /// Files that registered nothing, with the offending entry.
    pub problems: Vec<HooksError>,
    /// Entries skipped with a warning (`<file>: <entry>: <why>`).
    pub warnings: Vec<String>,
}

impl HookSet {
    /// Reads `files` in order in `dialect`. A file that is missing, does not parse or holds a
    /// bad matcher is a problem and contributes no hook; the others still load.
    pub fn load(dialect: Dialect, files: &[PathBuf], subst: &Substitutions) -> Self {
        let mut set = Self {
            dialect,
            files: files.to_vec(),
            hooks: Vec::new(),
            problems: Vec::new(),
            warnings: Vec::new(),
        };
        for f in files {
            match load_file(f, dialect, subst) {
                Ok(loaded) => {
                    set.hooks.extend(loaded.hooks);
                    set.warnings.extend(
                        loaded
                            .warnings
                            .into_iter()
                            .map(|w| format!("{}: {w}", f.display())),
                    );
                }
                Err(e) => set.problems.push(e),
            }
        }
        set
    }

    /// Adds a warning (once per file and matcher) for every PreToolUse / PostToolUse matcher
    /// that can match none of the tool names `known`: its hooks would never run.
    pub fn warn_unmatched(&mut self, known: &[String]) {
        let mut seen = std::collections::HashSet::new();
        for h in &self.hooks {
            let Some(m) = &h.matcher else { continue };
            if !matches!(h.event, HookEvent::PreToolUse | HookEvent::PostToolUse) {
                continue;
            }
            if m.can_match_a_tool(known.iter().map(String::as_str)) {
                continue;
            }
            let group = h.entry.split(".hooks[").next().unwrap_or(&h.entry);
            if seen.insert((h.source.clone(), group.to_owned())) {
                self.warnings.push(format!(
                    "{}: {group}.matcher: {:?} matches no tool of this harness; its hooks never run",
                    h.source.display(),
                    m.source()
                ));
            }
        }
    }

    fn has(&self, event: HookEvent) -> bool {
        self.hooks.iter().any(|h| h.event == event)
    }
}

/// How a bridge runs.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The dialect.
    pub dialect: Dialect,
    /// The hook files, in order (absolute).
    pub files: Vec<PathBuf>,
    /// The project directory (`CLAUDE_PROJECT_DIR`, `${CLAUDE_PROJECT_DIR}`; the working
    /// directory when a session has none).
    pub project_dir: PathBuf,
    /// Timeout of a hook without its own (ms).
    pub default_timeout_ms: u64,
    /// Consecutive Stop blocks honoured per turn.
    pub max_stop_blocks: u64,
}

impl BridgeConfig {
    /// Defaults for `dialect` and `files`: 10-minute hook timeout, 8 Stop blocks.
    pub fn new(dialect: Dialect, files: Vec<PathBuf>, project_dir: PathBuf) -> Self {
        Self {
            dialect,
            files,
            project_dir,
            default_timeout_ms: DEFAULT_TIMEOUT_MS,
            max_stop_blocks: DEFAULT_MAX_STOP_BLOCKS,
        }
    }
}

struct Bridge {
    ctx: Context,
    config: BridgeConfig,
    set: Arc<HookSet>,
    /// Handler ids: `<dialect>:<Point>:<n>`, one counter per bridge (never reset).
    counter: AtomicU64,
    /// Per session: (turn, consecutive Stop blocks honoured in it).
    stop_blocks: Mutex<HashMap<String, (u64, u64)>>,
    /// Per session: the SessionStart run the first step waits for.
    session_start: Mutex<HashMap<String, JoinHandle<Vec<String>>>>,
}

/// Where one point fires.
struct PointCtx<'a> {
    session: Option<&'a Arc<Session>>,
    /// The record turn (records are written only with a session and a turn > 0).
    turn: u64,
    subject: Option<&'a str>,
    facts: Facts,
    cancel: CancellationToken,
    key: Option<&'a dsh_kernel::ScopeKey>,
}

impl Bridge {
    fn notice(&self, key: Option<&dsh_kernel::ScopeKey>, session: Option<&str>, text: String) {
        tracing::warn!(target: "dsh_hooks", dialect = self.config.dialect.as_str(), session, "{text}");
        self.ctx
            .dispatch_to(key)
            .emit::<HookNotice>(&HookNoticePayload {
                session_id: session.map(str::to_owned),
                dialect: self.config.dialect,
                text,
            });
    }

    fn common(&self, session: Option<&Arc<Session>>) -> Common {
        let Some(session) = session else {
            return Common {
                session_id: String::new(),
                transcript_path: None,
                cwd: self.config.project_dir.display().to_string(),
                model: String::new(),
            };
        };
        let header = session.header();
        let transcript_path = self
            .ctx
            .get::<PersistenceService>()
            .and_then(|p| p.backend().ok())
            .and_then(|b| b.locate(header))
            .map(|l| l.path.display().to_string());
        Common {
            session_id: header.id.clone(),
            transcript_path,
            cwd: header
                .cwd
                .clone()
                .unwrap_or_else(|| self.config.project_dir.display().to_string()),
            model: session
                .request_header()
                .map(|h| h.config.model)
                .unwrap_or_default(),
        }
    }

    fn workdir(&self, cwd: &str) -> PathBuf {
        let p = Path::new(cwd);
        if p.is_absolute() && p.is_dir() {
            p.to_path_buf()
        } else {
            self.config.project_dir.clone()
        }
    }

    /// Runs every hook of the point whose matcher takes the subject, in file order, writing the
    /// records and notices; returns their outputs.
    async fn run_point(&self, p: PointCtx<'_>) -> Vec<HookOutput> {
        let event = p.facts.event();
        let hooks: Vec<&HookCommand> = self
            .set
            .hooks
            .iter()
            .filter(|h| h.event == event)
            .filter(|h| match (&h.matcher, p.subject) {
                (Some(m), Some(subject)) => m.matches(subject),
                _ => true,
            })
            .collect();
        if hooks.is_empty() {
            return Vec::new();
        }
        let dialect = self.config.dialect;
        let common = self.common(p.session);
        let stdin = stdin_bytes(dialect, &payload(dialect, &common, &p.facts));
        let workdir = self.workdir(&common.cwd);
        let mut env = std::collections::BTreeMap::new();
        if dialect == Dialect::ClaudeCode {
            env.insert(
                "CLAUDE_PROJECT_DIR".to_owned(),
                self.config.project_dir.display().to_string(),
            );
        }
        let record = p.session.filter(|_| p.turn > 0);
        let session_id = p.session.map(|s| s.id().to_owned());
        let mut outputs = Vec::new();
        for hook in hooks {
            if p.cancel.is_cancelled() {
                // The turn (or call) was cancelled: the hooks after this one do not start.
                break;
            }
            let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
            let handler_id = format!("{}:{}:{n}", dialect.as_str(), event.as_str());
            if let Some(s) = record {
                append(
                    s,
                    records::EVENT_INVOKED,
                    &HookInvoked {
                        turn: p.turn,
                        point: event.as_str().to_owned(),
                        dialect: dialect.as_str().to_owned(),
                        handler_id: handler_id.clone(),
                        matcher: hook.matcher.as_ref().map(|m| m.source().to_owned()),
                    },
                );
            }
            let timeout_ms = hook.timeout_ms.unwrap_or(self.config.default_timeout_ms);
            let run = run_hook(
                &HookRunSpec {
                    command: hook.command.clone(),
                    workdir: workdir.clone(),
                    timeout_ms,
                    env: env.clone(),
                    stdin: stdin.clone(),
                },
                p.cancel.clone(),
            )
            .await;
            let out = if run.stdout_truncated {
                too_long(run.exit_code, &run.stderr, event, OUTPUT_MAX_BYTES)
            } else {
                parse_output(run.exit_code, &run.stdout, &run.stderr, event, dialect)
            };
            if let Some(s) = record {
                append(
                    s,
                    records::EVENT_RESULT,
                    &HookResult {
                        turn: p.turn,
                        point: event.as_str().to_owned(),
                        handler_id: handler_id.clone(),
                        decision: out.record_decision(),
                        exit_code: out.exit_code.map(i64::from),
                        stderr_summary: (!out.stderr.is_empty()).then(|| summary(&out.stderr)),
                        duration_ms: run.duration_ms,
                    },
                );
            }
            let what = format!(
                "{} hook `{}` ({})",
                event.as_str(),
                short(&hook.command),
                hook.source.display()
            );
            let sid = session_id.as_deref();
            if run.timed_out {
                self.notice(
                    p.key,
                    sid,
                    format!("{what} timed out after {timeout_ms} ms; its process group was killed and the hook is ignored"),
                );
            } else if run.cancelled {
                // The turn was cancelled: nothing to tell beyond the cancellation itself.
            } else if !matches!(out.exit_code, Some(0) | Some(2)) {
                let code = out.exit_code.map_or_else(
                    || "without an exit code".to_owned(),
                    |c| format!("with {c}"),
                );
                let err = if out.stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {}", summary(&out.stderr))
                };
                self.notice(
                    p.key,
                    sid,
                    format!("{what} failed {code} (non-blocking){err}"),
                );
            } else if let StdoutForm::TooLong(max) = &out.stdout_form {
                let then = if event == HookEvent::PreToolUse {
                    "the call is denied"
                } else {
                    "it is ignored"
                };
                self.notice(
                    p.key,
                    sid,
                    format!("{what} printed more than {max} bytes of output; {then}"),
                );
            } else if let StdoutForm::NotOneObject(why) = &out.stdout_form {
                self.notice(
                    p.key,
                    sid,
                    format!("{what} printed output that is not exactly one JSON object ({why}); it is ignored"),
                );
            }
            if let Some(m) = &out.system_message {
                self.notice(p.key, sid, format!("{what}: {m}"));
            }
            if out.updated_input.is_some() {
                tracing::warn!(target: "dsh_hooks", "{what} returned updatedInput, which dsh does not apply (tool arguments are immutable)");
            }
            if out.stop {
                tracing::warn!(target: "dsh_hooks", "{what} returned continue: false, which dsh does not honour");
            }
            outputs.push(out);
        }
        outputs
    }

    fn context_message(&self, contexts: &[String]) -> Option<Message> {
        (!contexts.is_empty()).then(|| {
            Message::user(
                contexts.iter().map(ContentBlock::text).collect(),
                MessageSource::plugin(self.config.dialect.message_plugin()),
            )
        })
    }

    fn text_message(&self, text: String) -> Message {
        Message::user(
            vec![ContentBlock::text(text)],
            MessageSource::plugin(self.config.dialect.message_plugin()),
        )
    }
}

fn append(session: &Session, kind: &str, data: &impl serde::Serialize) {
    let data = match serde_json::to_value(data) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(target: "dsh_hooks", error = %e, "could not encode {kind}");
            return;
        }
    };
    if let Err(e) = session.append_value(kind, data, None, false) {
        tracing::warn!(target: "dsh_hooks", session = session.id(), error = %e, "could not record {kind}");
    }
}

fn summary(stderr: &str) -> String {
    if stderr.chars().count() > STDERR_SUMMARY_MAX_CHARS {
        let cut: String = stderr.chars().take(STDERR_SUMMARY_MAX_CHARS).collect();
        format!("{cut}…")
    } else {
        stderr.to_owned()
    }
}

fn short(command: &str) -> String {
    let one: String = command.replace('\n', " ⏎ ");
    if one.chars().count() > 60 {
        format!("{}…", one.chars().take(59).collect::<String>())
    } else {
        one
    }
}

fn current_turn(session: &Session) -> u64 {
    session.open_turn().map_or(0, |(t, _)| t)
}

fn last_assistant_text(session: &Session) -> Option<String> {
    session
        .derive_messages()
        .iter()
        .rev()
        .find(|m| m.role == dsh_llm::Role::Assistant)
        .map(|m| m.text())
}

/// Loads the hooks of `config` and installs them under `ctx`: declares the typed
/// `hook/invoked` / `hook/result` records ([`records::declare`]), provides the [`HookSet`] as a
/// service named after the dialect (`claude-code` / `codex`) and registers a listener on each
/// extension point that has hooks (see the module table). Every registration is bound to
/// `ctx`'s scope. A refused file is logged (`tracing::warn`) and kept in
/// [`HookSet::problems`] for the host to show; it never fails the boot.
///
/// # Errors
/// Kernel errors (boxed) when `ctx` is inactive or the named service is already provided; a
/// registry that refuses the record types (another plugin owns them).
pub fn install(ctx: &Context, config: BridgeConfig) -> Result<Arc<HookSet>, BoxError> {
    records::declare(ctx)?;
    let mut set = crate::load_set(&config);
    let mut known: Vec<String> = crate::matcher::BUILTIN_TOOL_NAMES
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    if let Some(tools) = ctx.get::<dsh_tools::ToolRegistry>() {
        known.extend(tools.visible(None).iter().map(|t| t.schema().name.clone()));
    }
    set.warn_unmatched(&known);
    let set = Arc::new(set);
    for p in &set.problems {
        tracing::warn!(target: "dsh_hooks", code = dsh_kernel::ErrorCode::code(p), "{p}; none of its hooks are registered");
    }
    for w in &set.warnings {
        tracing::warn!(target: "dsh_hooks", "{w}");
    }
    ctx.provide_named(config.dialect.as_str(), set.clone())?
        .detach();
    let bridge = Arc::new(Bridge {
        ctx: ctx.clone(),
        config,
        set: set.clone(),
        counter: AtomicU64::new(0),
        stop_blocks: Mutex::new(HashMap::new()),
        session_start: Mutex::new(HashMap::new()),
    });
    if set.has(HookEvent::SessionStart) {
        install_session_start(ctx, &bridge)?;
    }
    if set.has(HookEvent::SessionStart) || set.has(HookEvent::UserPromptSubmit) {
        install_pre_step(ctx, &bridge)?;
    }
    if set.has(HookEvent::PreToolUse) {
        install_pre_tool(ctx, &bridge)?;
    }
    if set.has(HookEvent::PostToolUse) {
        install_post_tool(ctx, &bridge)?;
    }
    if set.has(HookEvent::Stop) {
        install_stop(ctx, &bridge)?;
    }
    Ok(set)
}

fn install_session_start(ctx: &Context, bridge: &Arc<Bridge>) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_emit::<AgentSessionStart>(move |start| {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(target: "dsh_hooks", "SessionStart hooks need a tokio runtime; skipped");
            return;
        };
        let b2 = b.clone();
        let agent = start.agent.clone();
        let source = start.source.as_str().to_owned();
        let handle = rt.spawn(async move {
            let session = agent.session().clone();
            let outputs = b2
                .run_point(PointCtx {
                    session: Some(&session),
                    turn: 0,
                    subject: Some(&source),
                    facts: Facts::SessionStart {
                        source: source.clone(),
                    },
                    cancel: CancellationToken::new(),
                    key: Some(agent.key()),
                })
                .await;
            merge(&outputs).contexts
        });
        b.session_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(start.agent.id().to_string(), handle);
    })?
    .detach();
    Ok(())
}

fn install_pre_step(ctx: &Context, bridge: &Arc<Bridge>) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<AgentPreStep, _, _>(move |p, next| {
        let b = b.clone();
        async move {
            let session = p.session.clone();
            let key = p.scope.clone();
            let cancel = p.cancellation.clone();
            let turn = p.turn;
            // SessionStart contexts join the first step that follows them.
            let pending = b
                .session_start
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(session.id());
            let mut start_contexts = Vec::new();
            if let Some(handle) = pending {
                tokio::select! {
                    r = handle => start_contexts = r.unwrap_or_default(),
                    () = cancel.cancelled() => {}
                }
            }
            let prompt: Vec<&Arc<Message>> = p
                .messages
                .iter()
                .filter(|m| matches!(m.source, MessageSource::User))
                .collect();
            let mut merged = None;
            if !prompt.is_empty() && b.set.has(HookEvent::UserPromptSubmit) {
                let text: String = prompt
                    .iter()
                    .flat_map(|m| m.content.iter().filter_map(|c| c.as_text()))
                    .collect();
                let outputs = b
                    .run_point(PointCtx {
                        session: Some(&session),
                        turn,
                        subject: None,
                        facts: Facts::UserPromptSubmit { turn, prompt: text },
                        cancel: cancel.clone(),
                        key: key.as_ref(),
                    })
                    .await;
                let m = merge(&outputs);
                if m.decision == Decision::Deny {
                    let why = m
                        .reason
                        .unwrap_or_else(|| "blocked by UserPromptSubmit hook".to_owned());
                    b.notice(
                        key.as_ref(),
                        Some(session.id()),
                        format!("the prompt was blocked by a UserPromptSubmit hook: {why}"),
                    );
                    return PreStepDecision::Reject;
                }
                merged = Some(m);
            }
            let decision = next.run(p).await;
            match decision {
                PreStepDecision::Enter { mut messages } => {
                    if let Some(m) = b.context_message(&start_contexts) {
                        messages.push(Arc::new(m));
                    }
                    if let Some(m) = merged.and_then(|m| b.context_message(&m.contexts)) {
                        messages.push(Arc::new(m));
                    }
                    PreStepDecision::Enter { messages }
                }
                reject => reject,
            }
        }
    })?
    .detach();
    Ok(())
}

fn tool_facts(event: HookEvent, exec: &dsh_tools::ToolExecution, turn: u64) -> Facts {
    let tool_input = match &exec.arguments {
        Value::String(raw) => serde_json::from_str(raw).unwrap_or_else(|_| exec.arguments.clone()),
        other => other.clone(),
    };
    Facts::Tool {
        event,
        turn,
        tool_name: exec.name.clone(),
        tool_input,
        tool_use_id: exec.call_id.to_string(),
        tool_response: None,
    }
}

fn install_pre_tool(ctx: &Context, bridge: &Arc<Bridge>) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<ToolsPreExecute, _, _>(move |exec, next| {
        let b = b.clone();
        async move {
            let session = exec.caller.as_ref().map(|c| c.session.clone());
            let turn = session.as_deref().map_or(0, current_turn);
            let outputs = b
                .run_point(PointCtx {
                    session: session.as_ref(),
                    turn,
                    subject: Some(&exec.name),
                    facts: tool_facts(HookEvent::PreToolUse, &exec, turn),
                    cancel: exec.signal.clone(),
                    key: exec.key(),
                })
                .await;
            let m: Merged = merge(&outputs);
            match m.decision {
                Decision::Deny => Ok(PreToolDecision::Deny {
                    reason: m.reason.unwrap_or_else(|| PRE_TOOL_FALLBACK.to_owned()),
                }),
                // Codex hooks cannot ask (as upstream): an ask there decides nothing.
                Decision::Ask if b.config.dialect == Dialect::ClaudeCode => {
                    match next.run(exec).await? {
                        deny @ PreToolDecision::Deny { .. } => Ok(deny),
                        _ => Ok(PreToolDecision::Ask { reason: m.reason }),
                    }
                }
                _ => next.run(exec).await,
            }
        }
    })?
    .detach();
    Ok(())
}

/// Whether a tool call failed, as Claude Code counts it for PostToolUse: an error result, or a
/// command (a value with `exitCode` / `signal` / `timedOut`, as `bash` returns) that exited
/// non-zero, died from a signal or timed out.
fn failed(result: &dsh_tools::ToolExecutionResult) -> bool {
    if result.is_error() {
        return true;
    }
    let Some(v) = result.value() else {
        return false;
    };
    v.get("exitCode")
        .and_then(Value::as_i64)
        .is_some_and(|c| c != 0)
        || v.get("signal").is_some_and(|s| !s.is_null())
        || v.get("timedOut") == Some(&Value::Bool(true))
}

fn install_post_tool(ctx: &Context, bridge: &Arc<Bridge>) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<ToolsPostExecute, _, _>(move |ev, next| {
        let b = b.clone();
        async move {
            // Claude Code runs PostToolUse only after a tool succeeded: not for a call a
            // PreToolUse hook or a policy denied, nor for a failed one (docs/upstream/hooks.md,
            // "Mapping"). Codex hooks see every result, as upstream's.
            if b.config.dialect == Dialect::ClaudeCode && failed(&ev.result) {
                return next.run(ev).await;
            }
            let exec = ev.exec.clone();
            let session = exec.caller.as_ref().map(|c| c.session.clone());
            let turn = session.as_deref().map_or(0, current_turn);
            let mut facts = tool_facts(HookEvent::PostToolUse, &exec, turn);
            if let Facts::Tool { tool_response, .. } = &mut facts {
                *tool_response = Some(
                    ev.result
                        .content()
                        .iter()
                        .filter_map(ContentBlock::as_text)
                        .collect(),
                );
            }
            let outputs = b
                .run_point(PointCtx {
                    session: session.as_ref(),
                    turn,
                    subject: Some(&exec.name),
                    facts,
                    cancel: exec.signal.clone(),
                    key: exec.key(),
                })
                .await;
            let m = merge(&outputs);
            let ours: Vec<Message> = b.context_message(&m.contexts).into_iter().collect();
            if m.decision == Decision::Deny {
                return Ok(PostToolDecision::Block {
                    feedback: vec![ContentBlock::text(
                        m.reason.unwrap_or_else(|| POST_TOOL_FALLBACK.to_owned()),
                    )],
                    additional_contexts: ours,
                });
            }
            let mut d = next.run(ev).await?;
            let ctxs = match &mut d {
                PostToolDecision::Accept {
                    additional_contexts,
                }
                | PostToolDecision::ReplaceContent {
                    additional_contexts,
                    ..
                }
                | PostToolDecision::ReplaceValue {
                    additional_contexts,
                    ..
                }
                | PostToolDecision::Block {
                    additional_contexts,
                    ..
                } => additional_contexts,
            };
            let rest = std::mem::take(ctxs);
            ctxs.extend(ours);
            ctxs.extend(rest);
            Ok(d)
        }
    })?
    .detach();
    Ok(())
}

fn install_stop(ctx: &Context, bridge: &Arc<Bridge>) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_serial::<AgentTurnStopping, _, _>(move |p| {
        let b = b.clone();
        async move {
            let session = p.session.clone();
            let sid = session.id().to_owned();
            let blocks = {
                let mut map = b.stop_blocks.lock().unwrap_or_else(PoisonError::into_inner);
                let entry = map.entry(sid.clone()).or_insert((p.turn, 0));
                if entry.0 != p.turn {
                    *entry = (p.turn, 0);
                }
                entry.1
            };
            let outputs = b
                .run_point(PointCtx {
                    session: Some(&session),
                    turn: p.turn,
                    subject: None,
                    facts: Facts::Stop {
                        turn: p.turn,
                        stop_hook_active: blocks > 0,
                        last_assistant_message: last_assistant_text(&session),
                    },
                    cancel: p.cancellation.clone(),
                    key: p.scope.as_ref(),
                })
                .await;
            let m = merge(&outputs);
            if m.decision != Decision::Deny || p.cancellation.is_cancelled() {
                return Ok(None);
            }
            let max = b.config.max_stop_blocks;
            if blocks >= max {
                b.notice(
                    p.scope.as_ref(),
                    Some(&sid),
                    format!(
                        "a Stop hook blocked the end of the turn {} time{} in a row (turn {}); the turn ends here ([hooks] max_stop_blocks = {max})",
                        blocks + 1,
                        if blocks == 0 { "" } else { "s" },
                        p.turn,
                    ),
                );
                return Ok(None);
            }
            let Some(agent) = b.ctx.get::<AgentRegistry>().and_then(|r| r.get(&sid)) else {
                tracing::warn!(target: "dsh_hooks", session = %sid, "a Stop hook blocked, but the agent is not registered; the turn ends");
                return Ok(None);
            };
            let text = m.reason.unwrap_or_else(|| STOP_FALLBACK.to_owned());
            if let Err(e) = agent.steer(b.text_message(text)) {
                tracing::warn!(target: "dsh_hooks", session = %sid, error = %e, "could not send the turn back");
                return Ok(None);
            }
            b.stop_blocks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(sid, (p.turn, blocks + 1));
            Ok(None)
        }
    })?
    .detach();
    Ok(())
}
