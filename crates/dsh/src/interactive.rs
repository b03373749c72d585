//! The line-mode interactive shell: a prompt, the streamed answer, tool activity on stderr,
//! Ctrl-C cancels the running turn (a second Ctrl-C while idle, or `/exit`, quits), slash
//! commands (`/new`, `/sessions`, `/resume ID`, `/model [PROVIDER/]MODEL`, `/help`, `/exit`),
//! an approval answerer that asks y/n at the prompt. SIGTERM and SIGHUP cancel a running turn,
//! save the session and end the shell (exit 130).

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::Result;
use dsh_agent::{Agent, AgentCancelCause};
use dsh_approval::{ApprovalAnswer, ApprovalOutcome, ApprovalRequestEvent};
use dsh_kernel::Registration;
use dsh_llm::Message;
use tokio::sync::{mpsc, oneshot};

use crate::app::App;
use crate::render::{self, Format};

/// A question from the approval answerer to the input loop.
struct Ask {
    text: String,
    reply: oneshot::Sender<bool>,
}

const HELP: &str = "commands: /new (fresh session)  /sessions (stored sessions)  /resume ID  \
/model [PROVIDER/]MODEL  /help  /exit — Ctrl-C cancels a running turn; Ctrl-C while idle quits";

fn prompt() {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(b"> ");
    let _ = out.flush();
}

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn register_answerer(app: &App, tx: mpsc::Sender<Ask>) -> Result<Registration> {
    app.kernel
        .root()
        .on_waterfall::<ApprovalRequestEvent, _, _>(move |q, _next| {
            let tx = tx.clone();
            async move {
                let (reply, rx) = oneshot::channel();
                let text = format!(
                    "allow tool `{}`{}? [y/N]",
                    q.request.tool_name,
                    q.request
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                );
                if tx.send(Ask { text, reply }).await.is_err() {
                    return Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Unavailable));
                }
                let allowed = tokio::select! {
                    r = rx => r.unwrap_or(false),
                    () = q.request.signal.cancelled() => {
                        return Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Cancelled));
                    }
                };
                Ok(ApprovalAnswer::Outcome(if allowed {
                    ApprovalOutcome::AllowedOnce
                } else {
                    ApprovalOutcome::Rejected
                }))
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
    say(&format!(
        "dsh {} — {}/{} — session {}\n{HELP}",
        env!("CARGO_PKG_VERSION"),
        app.config.provider,
        app.config.model,
        agent.id()
    ));
    let mut running = false;
    let mut turn_from_seq = 0u64;
    let mut pending_ask: Option<oneshot::Sender<bool>> = None;
    // SIGTERM and SIGHUP (the terminal closed) cancel a running turn, save the session and end
    // the shell with exit 130 (`crate::signals`).
    let mut stops = crate::signals::StopSignals::install()?;
    let mut stopped = false;
    prompt();
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
                if let Some(reply) = pending_ask.take() {
                    let yes = matches!(line.trim(), "y" | "Y" | "yes");
                    let _ = reply.send(yes);
                    continue;
                }
                let line = line.trim().to_owned();
                if line.is_empty() {
                    if !running { prompt(); }
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
                    if !running { prompt(); }
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
                    say(&ask.text);
                    pending_ask = Some(ask.reply);
                }
            }
            () = agent.when_idle(), if running => {
                running = false;
                renderer.finish_line();
                report_turns(&agent, turn_from_seq);
                // usage and cost of the turn (issue 16)
                let catalog = crate::usage::catalog(app.kernel.root());
                if let Some(l) = crate::usage::after_turn_line(&agent.session().events(), turn_from_seq, &catalog) {
                    say(&l);
                }
                if let Err(e) = app.flush(&agent).await {
                    say(&format!("error: {e:#}"));
                }
                prompt();
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
    Ok(Renderer {
        _reg: reg,
        mid_line,
    })
}
