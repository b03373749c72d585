//! The line-mode interactive shell: a prompt, the streamed answer, tool activity on stderr,
//! Ctrl-C cancels the running turn (a second Ctrl-C while idle, or `/exit`, quits), slash
//! commands (`/new`, `/sessions`, `/resume ID`, `/model [PROVIDER/]MODEL`, `/help`, `/exit`),
//! an approval answerer that asks at the prompt (allow once, allow the path or the tool for the
//! rest of the session, deny with a reason; see [`crate::approval_prompt`]). SIGTERM and SIGHUP
//! cancel a running turn, save the session and end the shell (exit 130).

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::Result;
use dsh_agent::{Agent, AgentCancelCause};
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
    reply: oneshot::Sender<approval_prompt::Answer>,
}

const HELP: &str = "commands: /new (fresh session)  /sessions (stored sessions)  /resume ID  \
/model [PROVIDER/]MODEL  /compact (summarise older history)  /help  /exit — Ctrl-C cancels a running turn; Ctrl-C while idle quits";

fn prompt(app: &App, agent: &Agent) {
    let ctx = crate::compact::context_use(app.kernel.root(), agent).prompt_prefix();
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
                if let Some(by) = grants.covering(&sid, &req.tool_name, path.as_deref()) {
                    say(&format!("  ✓ allowed: {by} is allowed for this session"));
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

fn spawn_stdin() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
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

/// Runs the shell; returns the exit code.
///
/// # Errors
/// Setup failures (provider, session).
pub async fn run(app: App, resume: Option<String>) -> Result<i32> {
    app.check_provider()?;
    let mut agent = match &resume {
        Some(id) => app.resume(id).await?,
        None => app.new_agent().await?,
    };
    let (ask_tx, mut ask_rx) = mpsc::channel::<Ask>(4);
    let _answerer = register_answerer(&app, ask_tx)?;
    let mut lines = spawn_stdin();
    let mut renderer = attach(&app, &agent)?;
    crate::compact::note_unknown_window(app.kernel.root(), &agent);
    say(&format!(
        "dsh {} — {}/{} — session {}\n{HELP}",
        env!("CARGO_PKG_VERSION"),
        app.config.provider,
        app.config.model,
        agent.id()
    ));
    let mut running = false;
    let mut turn_from_seq = 0u64;
    let mut pending_ask: Option<(oneshot::Sender<approval_prompt::Answer>, bool)> = None;
    // SIGTERM and SIGHUP (the terminal closed) cancel a running turn, save the session and end
    // the shell with exit 130 (`crate::signals`).
    let mut stops = crate::signals::StopSignals::install()?;
    let mut stopped = false;
    prompt(&app, &agent);
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else {
                    // End of input: let a running turn finish (Ctrl-C still cancels it).
                    if running {
                        tokio::select! {
                            () = agent.when_idle() => renderer.finish_line(),
                            _ = tokio::signal::ctrl_c() => agent.cancel(AgentCancelCause::User, true),
                            _ = stops.recv() => {
                                stopped = true;
                                agent.cancel(AgentCancelCause::User, true);
                            }
                        }
                        agent.when_idle().await;
                    }
                    break;
                };
                if let Some((reply, has_path)) = pending_ask.take() {
                    let _ = reply.send(approval_prompt::parse_answer(&line, has_path));
                    continue;
                }
                let line = line.trim().to_owned();
                if line.is_empty() {
                    if !running { prompt(&app, &agent); }
                    continue;
                }
                if let Some(cmd) = line.strip_prefix('/') {
                    let mut parts = cmd.splitn(2, ' ');
                    let name = parts.next().unwrap_or_default();
                    let arg = parts.next().map(str::trim).unwrap_or_default();
                    match name {
                        "exit" | "quit" => break,
                        "help" => say(HELP),
                        "new" | "resume" => {
                            if running {
                                say("a turn is running; Ctrl-C it first");
                            } else {
                                let next = if name == "new" {
                                    app.new_agent().await
                                } else if arg.is_empty() {
                                    Err(anyhow::anyhow!("usage: /resume ID"))
                                } else {
                                    app.resume(arg).await
                                };
                                match next {
                                    Ok(a) => {
                                        let _ = app.flush(&agent).await;
                                        agent = a;
                                        renderer = attach(&app, &agent)?;
                                        say(&format!("session {}", agent.id()));
                                    }
                                    Err(e) => say(&format!("error: {e:#}")),
                                }
                            }
                        }
                        "compact" => {
                            if running {
                                say("a turn is running; /compact works between turns (Ctrl-C it first)");
                            } else {
                                match crate::compact::compact_now(&app, &agent).await {
                                    Ok(m) => say(&m.line()),
                                    Err(e) => say(&format!("error: {e} ({})", e.code())),
                                }
                            }
                        }
                        "sessions" => match app.stored_headers() {
                            Ok(list) => {
                                for h in list.iter().take(20) {
                                    say(&format!("{}  {}", h.id, h.cwd.as_deref().unwrap_or("-")));
                                }
                            }
                            Err(e) => say(&format!("error: {e:#}")),
                        },
                        "model" => {
                            if arg.is_empty() {
                                let o = agent.options();
                                say(&format!(
                                    "{}/{}",
                                    o.provider.unwrap_or_default(),
                                    o.model.unwrap_or_default()
                                ));
                            } else {
                                let mut o = agent.options();
                                match arg.split_once('/') {
                                    Some((p, m)) => {
                                        o.provider = Some(p.to_owned());
                                        o.model = Some(m.to_owned());
                                    }
                                    None => o.model = Some(arg.to_owned()),
                                }
                                let provider = o.provider.clone().unwrap_or_default();
                                let known = app
                                    .kernel
                                    .root()
                                    .get::<dsh_llm::LlmService>()
                                    .is_some_and(|l| l.has_provider(&provider));
                                if known {
                                    agent.set_options(o);
                                    say(&format!("model set to {arg} (from the next request on)"));
                                } else {
                                    say(&format!("unknown provider `{provider}`; the model was not changed"));
                                }
                            }
                        }
                        other => say(&format!("unknown command /{other}; {HELP}")),
                    }
                    if !running { prompt(&app, &agent); }
                    continue;
                }
                if !running {
                    turn_from_seq = agent.session().seq();
                }
                if let Err(e) = agent.followup(Message::user_text(line)) {
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
                    pending_ask = Some((ask.reply, ask.has_path));
                }
            }
            () = agent.when_idle(), if running => {
                running = false;
                renderer.finish_line();
                report_turns(&agent, turn_from_seq);
                if let Err(e) = app.flush(&agent).await {
                    say(&format!("error: {e:#}"));
                }
                prompt(&app, &agent);
            }
            _ = stops.recv() => {
                stopped = true;
                if running {
                    agent.cancel(AgentCancelCause::User, true);
                    agent.when_idle().await;
                }
                break;
            }
            r = tokio::signal::ctrl_c() => {
                if r.is_err() { break; }
                if running {
                    say("\ncancelling the turn");
                    agent.cancel(AgentCancelCause::User, true);
                } else {
                    break;
                }
            }
        }
    }
    let _ = app.flush(&agent).await;
    drop(renderer);
    say(&format!("session {} saved", agent.id()));
    app.shutdown().await;
    Ok(if stopped { crate::exit::CANCELLED } else { 0 })
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
