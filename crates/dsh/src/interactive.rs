//! The line-mode interactive shell: a prompt, the streamed answer, tool activity on stderr,
//! Ctrl-C cancels the running turn (a second Ctrl-C while idle, or `/exit`, quits), slash
//! commands (`/new`, `/sessions`, `/resume ID`, `/model [PROVIDER/]MODEL`, `/help`, `/exit`),
//! an approval answerer that asks at the prompt (allow once, allow the path or the tool for the
//! rest of the session, deny with a reason; see [`crate::approval_prompt`]). SIGTERM and SIGHUP
//! cancel a running turn, save the session and end the shell (exit 130).
//!
//! A new session is created (and stored) at its first input, so starting and quitting the shell
//! leaves nothing behind. `/resume ID` takes any unambiguous id prefix, restores the session's
//! route and model (unless the command line chose them) and shows its last turns; going back to
//! a session left with `/new` re-attaches to it. Piped input runs one line per turn, in order.

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::Result;
use dsh_agent::{Agent, AgentCancelCause, AgentOptions};
use dsh_approval::{ApprovalAnswer, ApprovalOutcome, ApprovalRequestEvent};
use dsh_kernel::Registration;
use dsh_llm::Message;
use tokio::sync::{mpsc, oneshot};

use crate::app::App;
use crate::approval_prompt;
use crate::render::{self, Format};

/// A question from the approval answerer to the input loop.
struct Ask {
    /// The lines to print.
    lines: Vec<String>,
    /// The call has a target path (`p` is an answer).
    has_path: bool,
    /// Whether `p` / `s` are offered ([`approval_prompt::grantable`]).
    grantable: bool,
    reply: oneshot::Sender<approval_prompt::Answer>,
}

const HELP: &str = "commands: /new (fresh session)  /sessions (stored sessions)  /resume ID  \
/model [PROVIDER/]MODEL  /compact (summarise older history)  /help  /exit — Ctrl-C cancels a running turn; Ctrl-C while idle quits";

/// Prints the prompt; with a session, prefixed by its context use (`[12% ctx] `).
fn prompt(app: &App, agent: Option<&Agent>) {
    let ctx = agent
        .map(|a| crate::compact::context_use(app.kernel.root(), a).prompt_prefix())
        .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{ctx}> ");
    let _ = out.flush();
}

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn register_answerer(app: &App, tx: mpsc::Sender<Ask>) -> Result<Registration> {
    let grants = Arc::new(approval_prompt::Grants::default());
    app.kernel
        .root()
        .on_waterfall::<ApprovalRequestEvent, _, _>(move |q, _next| {
            let tx = tx.clone();
            let grants = grants.clone();
            async move {
                let req = &q.request;
                let session = &req.caller.session;
                let sid = req.caller.session_id.to_string();
                let call = req
                    .call_id
                    .as_ref()
                    .and_then(|c| approval_prompt::call_of(session, c.as_str()));
                let args = call.map(|(_, a)| a).unwrap_or(serde_json::Value::Null);
                let cwd = session
                    .header()
                    .cwd
                    .clone()
                    .map(std::path::PathBuf::from)
                    .unwrap_or_default();
                let path = approval_prompt::target_path(&args, &cwd);
                let grantable = approval_prompt::grantable(req.reason.as_deref());
                if grantable
                    && let Some(by) = grants.covering(&sid, &req.tool_name, path.as_deref())
                {
                    say(&crate::toolview::visible(&format!(
                        "  ✓ allowed: {by} is allowed for this session"
                    )));
                    return Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce));
                }
                let preview = approval_prompt::preview(&req.tool_name, &args, path.as_deref());
                let lines = approval_prompt::question_lines(
                    &req.tool_name,
                    req.reason.as_deref(),
                    path.as_deref(),
                    &preview,
                    approval_prompt::terminal_width(),
                );
                let (reply, rx) = oneshot::channel();
                let ask = Ask {
                    lines,
                    has_path: path.is_some(),
                    grantable,
                    reply,
                };
                if tx.send(ask).await.is_err() {
                    return Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Unavailable));
                }
                let answer = tokio::select! {
                    r = rx => r.unwrap_or(approval_prompt::Answer::Deny(None)),
                    () = req.signal.cancelled() => {
                        return Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Cancelled));
                    }
                };
                use approval_prompt::Answer;
                Ok(match answer {
                    Answer::Once => ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce),
                    Answer::SessionTool => {
                        grants.allow_tool(&sid, &req.tool_name);
                        ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce)
                    }
                    Answer::SessionPath => {
                        if let Some(p) = &path {
                            grants.allow_path(&sid, p);
                        }
                        ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce)
                    }
                    Answer::Deny(Some(why)) => ApprovalAnswer::RejectedBecause(why),
                    Answer::Deny(None) => ApprovalAnswer::Outcome(ApprovalOutcome::Rejected),
                })
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Reads stdin lines on a thread; `first` (the `dsh "prompt"` argument) comes before them.
fn spawn_stdin(first: Option<String>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        if let Some(first) = first
            && tx.blocking_send(first).is_err()
        {
            return;
        }
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until `agent` is idle; never returns without one.
async fn idle(agent: Option<&Agent>) {
    match agent {
        Some(a) => a.when_idle().await,
        None => std::future::pending().await,
    }
}

/// The options a new session of this shell starts with: the settings' route, or what `/model`
/// chose before the first input.
fn fresh_options(app: &App, chosen: Option<&AgentOptions>) -> AgentOptions {
    chosen.cloned().unwrap_or_else(|| app.agent_options())
}

/// Runs the shell; returns the exit code. `resume` is a stored session id (or prefix) to
/// continue; `first` a prompt to send as the first input (`dsh "prompt"`). A new session is
/// created, and so stored, only at its first input: starting and quitting stores nothing.
///
/// # Errors
/// Setup failures (provider, session).
pub async fn run(app: App, resume: Option<String>, first: Option<String>) -> Result<i32> {
    if resume.is_none() {
        app.check_provider()?;
    }
    // `None`: a new session not created yet (no input so far).
    let mut agent: Option<Agent> = None;
    // `/model` before the first input of a new session.
    let mut chosen: Option<AgentOptions> = None;
    let mut renderer: Option<Renderer> = None;
    let mut banner_route = format!("{}/{}", app.config.provider, app.config.model);
    let mut banner_session = "new session (stored at the first input)".to_owned();
    let mut earlier = String::new();
    if let Some(id) = &resume {
        let (a, source) = app.resume(id).await?;
        let o = a.options();
        // the route the session resumes on must be usable, not the settings' one
        app.check_route(o.provider.as_deref().unwrap_or_default())?;
        banner_route = format!(
            "{}/{} ({})",
            o.provider.unwrap_or_default(),
            o.model.unwrap_or_default(),
            source.phrase()
        );
        banner_session = format!("session {}", a.id());
        earlier = crate::resume::last_turns(&a.session().events(), crate::resume::SHOWN_TURNS);
        renderer = Some(attach(&app, &a)?);
        agent = Some(a);
    }
    let (ask_tx, mut ask_rx) = mpsc::channel::<Ask>(4);
    let _answerer = register_answerer(&app, ask_tx)?;
    // Piped input is read one turn at a time: a line waits until the turn before it ended, so
    // each line is its own turn and the answers do not run together. A person at a terminal
    // may type ahead (the line is queued for the next turn).
    let typed_ahead_allowed = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut lines = spawn_stdin(first);
    say(&format!(
        "dsh {} — {banner_route} — {banner_session}\n{HELP}",
        env!("CARGO_PKG_VERSION"),
    ));
    if !earlier.is_empty() {
        say(&earlier);
    }
    let mut running = false;
    let mut turn_from_seq = 0u64;
    let mut pending_ask: Option<(oneshot::Sender<approval_prompt::Answer>, bool, bool)> = None;
    // SIGTERM and SIGHUP (the terminal closed) cancel a running turn, save the session and end
    // the shell with exit 130 (`crate::signals`).
    let mut stops = crate::signals::StopSignals::install()?;
    let mut stopped = false;
    prompt(&app, agent.as_ref());
    loop {
        let read_input = !running || typed_ahead_allowed || pending_ask.is_some();
        tokio::select! {
            line = lines.recv(), if read_input => {
                let Some(line) = line else {
                    // End of input: let a running turn finish (Ctrl-C still cancels it).
                    if running && let Some(a) = &agent {
                        tokio::select! {
                            () = a.when_idle() => {
                                if let Some(r) = &renderer { r.finish_line(); }
                            }
                            _ = tokio::signal::ctrl_c() => a.cancel(AgentCancelCause::User, true),
                            _ = stops.recv() => {
                                stopped = true;
                                a.cancel(AgentCancelCause::User, true);
                            }
                        }
                        a.when_idle().await;
                    }
                    break;
                };
                // The answer to the open question, unless the question is gone (its turn was
                // cancelled): then the line is ordinary input.
                if let Some((reply, has_path, grantable)) = pending_ask.take()
                    && !reply.is_closed()
                {
                    let _ = reply.send(approval_prompt::parse_offered(&line, has_path, grantable));
                    continue;
                }
                let line = line.trim().to_owned();
                if line.is_empty() {
                    if !running { prompt(&app, agent.as_ref()); }
                    continue;
                }
                // Custom commands expand to a prompt, `/skill` goes to the model, an unknown
                // `/name` is reported (crate::commands).
                let (line, builtin) = match crate::commands::shell_input(&app, line) {
                    crate::commands::ShellInput::Builtin(l) => (l, true),
                    crate::commands::ShellInput::Prompt(p) => (p, false),
                    crate::commands::ShellInput::Error(msg) => {
                        say(&msg);
                        if !running { prompt(&app, agent.as_ref()); }
                        continue;
                    }
                };
                if builtin && let Some(cmd) = line.strip_prefix('/') {
                    let mut parts = cmd.splitn(2, ' ');
                    let name = parts.next().unwrap_or_default();
                    let arg = parts.next().map(str::trim).unwrap_or_default();
                    match name {
                        "exit" | "quit" => break,
                        "help" => say(HELP),
                        "new" | "resume" => {
                            if running {
                                say("a turn is running; Ctrl-C it first");
                            } else if name == "new" {
                                if let Some(old) = agent.take()
                                    && let Err(e) = app.leave(&old).await
                                {
                                    say(&format!("error: {e:#}"));
                                }
                                renderer = None;
                                chosen = None;
                                say("new session (stored at the first input)");
                            } else if arg.is_empty() {
                                say("usage: /resume ID (any unambiguous prefix of it; /sessions lists them)");
                            } else {
                                match app.resume(arg).await {
                                    Ok((a, source)) => {
                                        // The session left is released for other processes
                                        // (unless it is the one resumed).
                                        if let Some(old) = agent.take()
                                            && old.id() != a.id()
                                            && let Err(e) = app.leave(&old).await
                                        {
                                            say(&format!("error: {e:#}"));
                                        }
                                        renderer = Some(attach(&app, &a)?);
                                        let o = a.options();
                                        say(&format!(
                                            "session {} — {}/{} ({})",
                                            a.id(),
                                            o.provider.unwrap_or_default(),
                                            o.model.unwrap_or_default(),
                                            source.phrase()
                                        ));
                                        let shown = crate::resume::last_turns(
                                            &a.session().events(),
                                            crate::resume::SHOWN_TURNS,
                                        );
                                        if !shown.is_empty() {
                                            say(&shown);
                                        }
                                        agent = Some(a);
                                    }
                                    Err(e) => say(&format!("error: {e:#}")),
                                }
                            }
                        }
                        "compact" => {
                            if !arg.is_empty() {
                                // As upstream's command: it takes no arguments.
                                say("Usage: /compact (no arguments)");
                            } else if running {
                                say("a turn is running; /compact works between turns (Ctrl-C it first)");
                            } else {
                                match &agent {
                                    None => say("nothing to compact: no session yet"),
                                    Some(a) => match crate::compact::compact_now(&app, a).await {
                                        Ok(m) => say(&m.line()),
                                        Err(e) => say(&format!("error: {e} ({})", e.code())),
                                    },
                                }
                            }
                        }
                        "sessions" => match app.stored_sessions() {
                            Ok(list) => {
                                let current = agent.as_ref().map(|a| a.id().to_string());
                                if list.is_empty() {
                                    say("no stored sessions");
                                }
                                for s in list.iter().take(20) {
                                    say(&session_row(s, current.as_deref()));
                                }
                            }
                            Err(e) => say(&format!("error: {e:#}")),
                        },
                        "model" => {
                            let current = agent
                                .as_ref()
                                .map(Agent::options)
                                .unwrap_or_else(|| fresh_options(&app, chosen.as_ref()));
                            if arg.is_empty() {
                                say(&format!(
                                    "{}/{}",
                                    current.provider.unwrap_or_default(),
                                    current.model.unwrap_or_default()
                                ));
                            } else {
                                match check_model(&app, current, arg) {
                                    Ok((o, warning)) => {
                                        if let Some(w) = warning {
                                            say(&w);
                                        }
                                        match &agent {
                                            Some(a) => a.set_options(o),
                                            None => chosen = Some(o),
                                        }
                                        say(&format!("model set to {arg} (from the next request on)"));
                                    }
                                    Err(msg) => say(&msg),
                                }
                            }
                        }
                        other => say(&format!("unknown command /{other}; {HELP}")),
                    }
                    if !running { prompt(&app, agent.as_ref()); }
                    continue;
                }
                let a = match &agent {
                    Some(a) => a.clone(),
                    None => {
                        // The first input of a new session: create (and so store) it now.
                        let created = match app.new_agent_with(fresh_options(&app, chosen.as_ref())).await {
                            Ok(a) => a,
                            Err(e) => {
                                say(&format!("error: {e:#}"));
                                prompt(&app, agent.as_ref());
                                continue;
                            }
                        };
                        renderer = Some(attach(&app, &created)?);
                        say(&format!("session {}", created.id()));
                        agent = Some(created.clone());
                        created
                    }
                };
                if !running {
                    turn_from_seq = a.session().seq();
                }
                if let Err(e) = a.followup(Message::user_text(line)) {
                    say(&format!("error: {e}"));
                    continue;
                }
                if running {
                    say("(queued for the next turn)");
                }
                running = true;
            }
            ask = ask_rx.recv() => {
                if let Some(ask) = ask {
                    for l in &ask.lines {
                        say(l);
                    }
                    pending_ask = Some((ask.reply, ask.has_path, ask.grantable));
                }
            }
            () = idle(agent.as_ref()), if running => {
                running = false;
                pending_ask = None;
                if let Some(r) = &renderer { r.finish_line(); }
                if let Some(a) = &agent {
                    report_turns(a, turn_from_seq);
                    // usage and cost of the turn
                    let catalog = crate::usage::catalog(app.kernel.root());
                    if let Some(l) = crate::usage::after_turn_line(&a.session().events(), turn_from_seq, &catalog) {
                        say(&l);
                    }
                    if let Err(e) = app.flush(a).await {
                        say(&format!("error: {e:#}"));
                    }
                }
                prompt(&app, agent.as_ref());
            }
            _ = stops.recv() => {
                stopped = true;
                if running && let Some(a) = &agent {
                    a.cancel(AgentCancelCause::User, true);
                    a.when_idle().await;
                }
                break;
            }
            r = tokio::signal::ctrl_c() => {
                if r.is_err() { break; }
                if running && let Some(a) = &agent {
                    // A question of this turn is not answered by the next line.
                    pending_ask = None;
                    say("\ncancelling the turn");
                    a.cancel(AgentCancelCause::User, true);
                } else {
                    break;
                }
            }
        }
    }
    drop(renderer);
    match &agent {
        Some(a) => {
            let _ = app.flush(a).await;
            say(&format!("session {} saved", a.id()));
        }
        None => say("no session stored (nothing was sent)"),
    }
    app.shutdown().await;
    Ok(if stopped { crate::exit::CANCELLED } else { 0 })
}

/// One `/sessions` line: id, last activity (UTC), turns, title, `[fork of <parent>]` for a
/// fork, `(current)` for the shell's own session.
fn session_row(s: &dsh_persistence::SessionSummary, current: Option<&str>) -> String {
    let mut row = format!(
        "{}  {}  {:>3} turn{}  {}",
        s.header.id,
        crate::sessions::fmt_utc(s.last_activity),
        s.turns,
        if s.turns == 1 { " " } else { "s" },
        if s.title.is_empty() {
            "(no prompt)"
        } else {
            s.title.as_str()
        }
    );
    if let Some(p) = &s.header.parent_session {
        row.push_str(&format!("  [fork of {p}]"));
    }
    if current == Some(s.header.id.as_str()) {
        row.push_str("  (current)");
    }
    row
}

/// `/model [PROVIDER/]MODEL` against `current`: the new options, and a warning when the route
/// lists models and `MODEL` is not one of them (it is still used: a route's list is advisory,
/// and a provider may serve models it does not list).
///
/// # Errors
/// The message for an unknown provider route or an empty model name (`/model local/`); the
/// model is not changed.
fn check_model(
    app: &App,
    current: AgentOptions,
    arg: &str,
) -> std::result::Result<(AgentOptions, Option<String>), String> {
    let mut o = current;
    match arg.split_once('/') {
        Some((p, m)) => {
            o.provider = Some(p.to_owned());
            o.model = Some(m.to_owned());
        }
        None => o.model = Some(arg.to_owned()),
    }
    if o.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
        return Err(
            "usage: /model [PROVIDER/]MODEL (the model name is empty); the model was not changed"
                .to_owned(),
        );
    }
    let provider = o.provider.clone().unwrap_or_default();
    let model = o.model.clone().unwrap_or_default();
    let llm = app.kernel.root().get::<dsh_llm::LlmService>();
    let Some(llm) = llm.filter(|l| l.has_provider(&provider)) else {
        return Err(format!(
            "unknown provider `{provider}`; the model was not changed"
        ));
    };
    let listed: Vec<String> = llm
        .models(&provider)
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.id)
        .collect();
    let warning = (!listed.is_empty() && !listed.contains(&model)).then(|| {
        format!(
            "warning: `{model}` is not in the model list of route `{provider}` ({}); using it anyway",
            listed.join(", ")
        )
    });
    Ok((o, warning))
}

/// Says how the turns since `from_seq` ended when it was not a plain completion.
fn report_turns(agent: &Agent, from_seq: u64) {
    let summary = render::summarize_run(&agent.session().events(), from_seq);
    match &summary.reason {
        Some(dsh_session::TurnEndReason::Error { error }) => {
            say(&format!("error: {} ({})", error.message, error.code));
        }
        Some(dsh_session::TurnEndReason::MaxTokens) => say("stopped at the output-token limit"),
        Some(dsh_session::TurnEndReason::Aborted { .. }) => say("(turn cancelled)"),
        Some(dsh_session::TurnEndReason::Blocked) => say("(turn blocked by a policy)"),
        Some(r) => {
            if let Some(line) = crate::exit::turn_end_line(Some(r)) {
                say(&line);
            }
        }
        None => {}
    }
}

struct Renderer {
    _reg: render::Attached,
    _compaction: (Registration, Registration),
    mid_line: Arc<std::sync::Mutex<bool>>,
}

impl Renderer {
    fn finish_line(&self) {
        let mut mid = self.mid_line.lock().unwrap_or_else(|e| e.into_inner());
        if *mid {
            let _ = writeln!(std::io::stdout());
            *mid = false;
        }
    }
}

fn attach(app: &App, agent: &Agent) -> Result<Renderer> {
    crate::compact::note_unknown_window(app.kernel.root(), agent);
    let (reg, mid_line) = render::attach(app.kernel.root(), agent.id().to_string(), Format::Text)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let compaction = crate::compact::attach_notices(app.kernel.root(), agent.id().to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Renderer {
        _reg: reg,
        _compaction: compaction,
        mid_line,
    })
}
