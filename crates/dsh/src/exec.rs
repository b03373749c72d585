//! `dsh exec`: one headless turn on a fresh (or resumed) persisted session.
//!
//! Streams the answer to stdout (tool activity on stderr), or with `--json` every session event
//! as a JSON line followed by a mandatory terminal `result` line written after the final flush.
//! Exit codes (decided in [`exit`]): 0 completed, 1 turn error, 2 usage/config error, 3
//! output-token limit, 4 blocked by policy, 5 step limit, 130 cancelled (Ctrl-C, SIGTERM or
//! SIGHUP cancel the turn cleanly).

use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use dsh_llm::Message;
use serde_json::json;

use crate::app::App;
use crate::render::{self, Format};

use crate::exit;

/// What to run.
pub struct ExecRequest {
    /// The prompt.
    pub prompt: String,
    /// Output format.
    pub format: Format,
    /// `--resume ID`.
    pub resume: Option<String>,
    /// `--continue`.
    pub continue_last: bool,
}

/// Runs one exec and returns the process exit code.
///
/// # Errors
/// Setup failures (the caller maps them to exit 2 or 1).
pub async fn run(app: App, req: ExecRequest) -> Result<i32> {
    let started = Instant::now();
    app.check_provider()?;
    let agent = if let Some(id) = &req.resume {
        app.resume(id).await?
    } else if req.continue_last {
        let id = app.last_session_id()?;
        app.resume(&id).await?
    } else {
        app.new_agent().await?
    };
    let _headless = deny_instead_of_asking(&app)?;
    let from_seq = agent.session().seq();
    let (renderer, mid_line) =
        render::attach(app.kernel.root(), agent.id().to_string(), req.format)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let fresh = req.resume.is_none() && !req.continue_last;
    if fresh && req.format == Format::Json {
        // Events the session wrote while it was being created (before the renderer could
        // subscribe; nothing else runs until the prompt is sent): `--json` streams the whole
        // log of a fresh session.
        let mut out = std::io::stdout().lock();
        for e in agent.session().events() {
            let _ = writeln!(out, "{}", e.to_json());
        }
        let _ = out.flush();
    }
    agent
        .followup(Message::user_text(req.prompt))
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let mut interrupted = false;
    // SIGTERM (a supervisor stopping dsh) and SIGHUP (the terminal closed) cancel the turn like
    // Ctrl-C, so tool process groups are killed and the log closes the turn, instead of
    // orphaning the running tool.
    let mut stops = crate::signals::StopSignals::install()?;
    loop {
        tokio::select! {
            () = agent.when_idle() => break,
            r = tokio::signal::ctrl_c() => {
                if r.is_err() || interrupted {
                    // A second Ctrl-C: stop waiting for the turn to wind down.
                    break;
                }
                interrupted = true;
                let _ = writeln!(std::io::stderr(), "\ninterrupted — cancelling the turn (Ctrl-C again to quit now)");
                agent.cancel(dsh_agent::AgentCancelCause::User, false);
            }
            _ = stops.recv() => {
                if interrupted {
                    break;
                }
                interrupted = true;
                agent.cancel(dsh_agent::AgentCancelCause::User, false);
            }
        }
    }
    let flushed = app.flush(&agent).await;
    drop(renderer);
    let events = agent.session().events();
    let summary = render::summarize_run(&events, from_seq);
    let mut code = exit::for_turn_end(summary.reason.as_ref());
    if let Err(e) = &flushed {
        let _ = writeln!(std::io::stderr(), "{}", exit::error_line(e));
        code = exit::for_error(e);
    }
    match req.format {
        Format::Text => {
            if *mid_line.lock().unwrap_or_else(|e| e.into_inner()) {
                let _ = writeln!(std::io::stdout());
            }
            // usage and cost of the run (issue 16), before the turn's end line
            let catalog = crate::usage::catalog(app.kernel.root());
            if let Some(line) = crate::usage::exec_line(&events, from_seq, &catalog) {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            if let Some(line) = exit::turn_end_line(summary.reason.as_ref()) {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
        Format::Json => {
            let reason = summary
                .reason
                .as_ref()
                .map_or_else(|| json!("none"), |r| json!(r.kind()));
            let mut line = json!({
                "type": "result",
                "sessionId": agent.id().as_str(),
                "reason": reason,
                "text": summary.text,
                "usage": summary.usage,
                "durationMs": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
            if let Some(dsh_session::TurnEndReason::Error { error }) = &summary.reason {
                line["error"] = json!({"message": error.message, "code": error.code});
            }
            // usage and cost: this run and the whole session (issue 16)
            let catalog = crate::usage::catalog(app.kernel.root());
            crate::usage::add_result_fields(&mut line, &events, from_seq, &catalog);
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
    app.shutdown().await;
    Ok(code)
}

/// Nobody can answer an approval question in `exec`: a policy's `ask` becomes a denial whose
/// text keeps the policy's reason (which names the flag that allows the call).
fn deny_instead_of_asking(app: &App) -> Result<dsh_kernel::Registration> {
    use dsh_tools::{PreToolDecision, ToolsPreExecute};
    app.kernel
        .root()
        .on_waterfall_with::<ToolsPreExecute, _, _>(
            dsh_kernel::ListenOptions::prepend(),
            |exec, next| async move {
                let name = exec.name.clone();
                match next.run(exec).await {
                    Ok(PreToolDecision::Ask { reason }) => Ok(PreToolDecision::Deny {
                        reason: format!(
                            "{} (dsh exec cannot ask for approval)",
                            reason.unwrap_or_else(|| format!(
                                "tool \"{name}\" requires approval; rerun with --permission-mode danger-full-access to allow it"
                            ))
                        ),
                    }),
                    other => other,
                }
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}"))
}
