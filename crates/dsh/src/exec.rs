//! `dsh exec`: one headless turn on a fresh (or resumed) persisted session.
//!
//! Text mode: when stdout is not a terminal it holds only the final answer (the text of the
//! turn's last assistant message, as the `--json` result's `text`), written when the run ends;
//! narration and tool activity go to stderr. On a terminal the answer streams as it arrives.
//! With `--json`, every session event as a JSON line followed by a mandatory terminal `result`
//! line written after the final flush. `--output-last-message FILE` also writes the final
//! answer to FILE (exactly its text), in both formats.
//! Exit codes (decided in [`exit`]): 0 completed, 1 turn error, 2 usage/config error, 3
//! output-token limit, 4 blocked by policy, 5 step limit, 130 cancelled (Ctrl-C, SIGTERM or
//! SIGHUP cancel the turn cleanly).

use std::io::{IsTerminal, Write};
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
    /// `--output-last-message FILE`: where the final answer is also written.
    pub output_last_message: Option<std::path::PathBuf>,
}

/// Runs one exec and returns the process exit code.
///
/// # Errors
/// Setup failures (the caller maps them to exit 2 or 1).
pub async fn run(app: App, req: ExecRequest) -> Result<i32> {
    let started = Instant::now();
    let agent = if let Some(id) = &req.resume {
        resumed(&app, id).await?
    } else if req.continue_last {
        let id = app.last_session_id()?;
        resumed(&app, &id).await?
    } else {
        app.check_provider()?;
        app.new_agent().await?
    };
    let _headless = deny_instead_of_asking(&app)?;
    let from_seq = agent.session().seq();
    let final_only = !std::io::stdout().is_terminal();
    let (renderer, mid_line) =
        render::attach_final_only(app.kernel.root(), agent.id().to_string(), req.format)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let compaction_notices =
        crate::compact::attach_notices(app.kernel.root(), agent.id().to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::compact::note_unknown_window(app.kernel.root(), &agent);
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
    drop(compaction_notices);
    let events = agent.session().events();
    let summary = render::summarize_run(&events, from_seq);
    let mut code = exit::for_turn_end(summary.reason.as_ref());
    if let Err(e) = &flushed {
        let _ = writeln!(std::io::stderr(), "{}", exit::error_line(e));
        code = exit::for_error(e);
    }
    if let Some(path) = &req.output_last_message
        && let Err(e) = std::fs::write(path, &summary.text)
    {
        let _ = writeln!(
            std::io::stderr(),
            "error: --output-last-message {}: {e}",
            path.display()
        );
        if code == 0 {
            code = 1;
        }
    }
    match req.format {
        Format::Text => {
            if final_only {
                if !summary.text.is_empty() {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(summary.text.as_bytes());
                    if !summary.text.ends_with('\n') {
                        let _ = out.write_all(b"\n");
                    }
                    let _ = out.flush();
                }
            } else if *mid_line.lock().unwrap_or_else(|e| e.into_inner()) {
                let _ = writeln!(std::io::stdout());
            }
            let catalog = crate::usage::catalog(app.kernel.root());
            let (usage, cost) = crate::usage::exec_cost(&events, from_seq, &catalog);
            if let Some(line) = exit::turn_end_line(summary.reason.as_ref()) {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            let _ = writeln!(
                std::io::stderr(),
                "{}",
                end_line(
                    agent.id().as_str(),
                    app.config.persist,
                    started.elapsed(),
                    &usage,
                    cost.as_deref(),
                )
            );
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
            let used = crate::compact::context_use(app.kernel.root(), &agent);
            line["contextTokens"] = json!(used.tokens);
            line["contextWindow"] = json!(used.window);
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

/// The last stderr line of a text-mode `exec`: `session <id> · <secs> s · <in> in / <out> out
/// tokens`, with `(cached <n>)` after the input when the provider served some from its cache
/// (`(cached <n>, written <m>)` when it also wrote `m` to it, `(written <m>)` for writes
/// alone), `(estimated)` when the provider sent no usage, and `(not saved)` after the id under
/// `--ephemeral`. Seconds have one decimal; the token counts are this run's dsh-usage figures,
/// failed attempts included, the same figures its cost is priced from (input = uncached + cache
/// read + cache write, as the `--json` result's `usage`). Then ` · <cost>` when the run made a
/// model call (see `usage::exec_cost`).
fn end_line(
    id: &str,
    persisted: bool,
    elapsed: std::time::Duration,
    usage: &dsh_usage::Usage,
    cost: Option<&str>,
) -> String {
    let cache: Vec<String> = [
        (usage.cached_input_tokens, "cached"),
        (usage.cache_write_tokens, "written"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{what} {n}"))
    .collect();
    let cache = if cache.is_empty() {
        String::new()
    } else {
        format!(" ({})", cache.join(", "))
    };
    format!(
        "session {id}{} · {:.1} s · {} in{cache} / {} out tokens{}{}",
        if persisted { "" } else { " (not saved)" },
        elapsed.as_secs_f64(),
        usage.total_input(),
        usage.output_tokens,
        if usage.estimated { " (estimated)" } else { "" },
        cost.map(|c| format!(" · {c}")).unwrap_or_default()
    )
}

/// The stored session `id` resumed on its route, which must be usable (its key set): the
/// route the session last used, not the settings' one, unless the command line chose another.
async fn resumed(app: &App, id: &str) -> Result<dsh_agent::Agent> {
    let agent = app.resume(id).await?.0;
    app.check_route(&agent.options().provider.unwrap_or_default())?;
    Ok(agent)
}

/// Nobody can answer an approval question in `exec`: a policy's `ask` becomes a denial whose
/// text keeps the policy's reason (which names the flag that allows the call), without the
/// permission preset's offer to approve the call.
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
                            // The preset offers approving the call, which exec cannot do: keep
                            // only the flag that allows it.
                            reason.map(|r| r.replace(
                                "; approve this call to allow it once, or rerun with",
                                "; rerun with",
                            )).unwrap_or_else(|| format!(
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
