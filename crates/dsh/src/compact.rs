//! What the user sees of compaction: manual compaction (`/compact` in the shell, `dsh sessions
//! compact ID`), the stderr line of an automatic compaction, the context use in the `--json`
//! result line and the interactive prompt, and the one-time note that automatic compaction is
//! off for a model whose context window is unknown.
//!
//! Everything goes through the compaction seam (`dsh_compaction::Compaction`), the llm seam's
//! effective model catalog (`LlmService::model_limits`) and the token meter; behaviour is
//! described in docs/upstream/compaction.md ("dsh: the user surface").

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_agent::Agent;
use dsh_compaction::{
    Compaction, CompactionError, CompactionNotice, CompactionTarget, NOTHING_TO_COMPACT,
    NoticeLevel, events,
};
use dsh_kernel::{Context, ListenOptions, Registration};
use dsh_session::{EventData, Session, SessionEventEmitted};
use dsh_token_meter::TokenMeter;
use tokio_util::sync::CancellationToken;

use crate::app::App;

/// The settings section of the compaction policy plugin (its `auto` key decides whether the
/// "unknown window" note applies).
const POLICY_SECTION: &str = "dsh-compaction-basic";

/// Set once the "automatic compaction is off" note was printed (once per process).
static WINDOW_NOTE_SHOWN: AtomicBool = AtomicBool::new(false);

/// The context use of a session: the meter's estimate of the next request (tokens) and the
/// model's context window (`None` when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextUse {
    /// Estimated tokens of the next request (system prompt, tools and the surface).
    pub tokens: u64,
    /// The context window of the route in force (tokens), if known.
    pub window: Option<u64>,
}

impl ContextUse {
    /// `[12% ctx] ` for the interactive prompt (rounded down, capped at 999 %), empty when the
    /// window is unknown.
    pub fn prompt_prefix(&self) -> String {
        match self.window {
            Some(w) if w > 0 => format!("[{}% ctx] ", (self.tokens * 100 / w).min(999)),
            _ => String::new(),
        }
    }
}

/// `14210` → `14,210`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The `provider`/`model` the next request of `agent` uses: the agent's options, else the
/// latest logged request header's route.
fn route(agent: &Agent) -> (String, String) {
    let o = agent.options();
    let header = agent.session().request_header();
    let from_header = |f: fn(&dsh_llm::LlmCallConfig) -> &String| {
        header
            .as_ref()
            .map(|h| f(&h.config).clone())
            .unwrap_or_default()
    };
    (
        o.provider.unwrap_or_else(|| from_header(|c| &c.provider)),
        o.model.unwrap_or_else(|| from_header(|c| &c.model)),
    )
}

/// The context window of `agent`'s route from the effective catalog.
fn window(ctx: &Context, agent: &Agent) -> Option<u64> {
    let (p, m) = route(agent);
    ctx.get::<dsh_llm::LlmService>()?
        .model_limits(&p, &m)
        .context_window
}

/// The context use of `agent`'s session now (one full measurement of its log).
pub fn context_use(ctx: &Context, agent: &Agent) -> ContextUse {
    ContextUse {
        tokens: TokenMeter::measure_events(&agent.session().events()).total_tokens,
        window: window(ctx, agent),
    }
}

/// Prints, once per process, that automatic compaction is off because the context window of
/// `agent`'s model is unknown — when a compaction engine is booted and its `auto` is on.
pub fn note_unknown_window(ctx: &Context, agent: &Agent) {
    if ctx.get::<Compaction>().is_none() || window(ctx, agent).is_some() {
        return;
    }
    let auto = ctx
        .settings()
        .section(POLICY_SECTION)
        .and_then(|v| v.get("auto").and_then(serde_json::Value::as_bool))
        .unwrap_or(true);
    if !auto || WINDOW_NOTE_SHOWN.swap(true, Ordering::Relaxed) {
        return;
    }
    let (p, m) = route(agent);
    let _ = writeln!(
        std::io::stderr(),
        "note: automatic compaction is off: the context window of {p}/{m} is unknown (set \
         [models.\"{m}\"] context_window in settings)"
    );
}

/// Listens for automatic compactions of session `id` and prints one stderr line each:
/// `  ⇣ compacted context: 14,210 → 3,950 tokens` when one commits (from the durable
/// `compaction/start` … `compaction/end` bracket, measured with the token meter), `  ! automatic
/// compaction failed: <why>; the turn goes on uncompacted` when one fails after its start, and
/// `  ! <message>` for a warning `compaction/notice` that no failed bracket already reported
/// (a notice about a failed bracket follows that bracket's `compaction/end`). The notice
/// `NO_CONTEXT_WINDOW` is left to [`note_unknown_window`]. Manual compactions (no owning turn)
/// are reported by their command instead. Dropping the registrations stops it.
///
/// # Errors
/// The kernel refused a listener (root disposed).
pub fn attach_notices(
    ctx: &Context,
    id: String,
) -> Result<(Registration, Registration), dsh_kernel::KernelError> {
    #[derive(Default)]
    struct Seen {
        before: Option<u64>,
        /// Failed brackets printed whose notice has not arrived yet.
        failed_unnoticed: usize,
    }
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let s = seen.clone();
    let notice_id = id.clone();
    let notices = ctx.on_emit_with::<CompactionNotice>(ListenOptions::global(), move |n| {
        if n.session_id != notice_id
            || n.level != NoticeLevel::Warning
            || n.code == "NO_CONTEXT_WINDOW"
        {
            return;
        }
        let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
        if seen.failed_unnoticed > 0 {
            seen.failed_unnoticed -= 1;
            return;
        }
        let _ = writeln!(std::io::stderr(), "  ! {}", n.message);
    })?;
    let brackets = ctx.on_emit_with::<SessionEventEmitted>(ListenOptions::global(), move |n| {
        if n.session.id() != id {
            return;
        }
        let EventData::Opaque(payload) = &n.event.data else {
            return;
        };
        let kind = n.event.kind.as_str();
        let automatic = payload.get("turn").is_some_and(|t| !t.is_null());
        if !automatic {
            return;
        }
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        if kind == events::START {
            seen.before = Some(measure(&n.session));
        } else if kind == events::END {
            let was = seen.before.take();
            let mut err = std::io::stderr().lock();
            match payload.get("error").and_then(serde_json::Value::as_str) {
                Some(why) => {
                    seen.failed_unnoticed += 1;
                    let _ = writeln!(
                        err,
                        "  ! automatic compaction failed: {why}; the turn goes on uncompacted"
                    );
                }
                None => {
                    let after = measure(&n.session);
                    let _ = writeln!(
                        err,
                        "  ⇣ compacted context: {} → {} tokens",
                        thousands(was.unwrap_or(after)),
                        thousands(after)
                    );
                }
            }
        }
    })?;
    Ok((brackets, notices))
}

fn measure(session: &Arc<Session>) -> u64 {
    TokenMeter::measure_events(&session.events()).total_tokens
}

/// The outcome of a manual compaction, as the user reads it.
#[derive(Debug)]
pub enum Manual {
    /// Compacted: context tokens before and after, and the number of history items replaced.
    Compacted {
        /// Tokens before.
        before: u64,
        /// Tokens after.
        after: u64,
        /// Surface items the summary replaced.
        items: usize,
    },
    /// Nothing could be compacted (nothing written).
    Nothing,
}

impl Manual {
    /// `compacted context: 14,210 → 3,950 tokens (12 history items)` or
    /// [`NOTHING_TO_COMPACT`].
    pub fn line(&self) -> String {
        match self {
            Self::Compacted {
                before,
                after,
                items,
            } => format!(
                "compacted context: {} → {} tokens ({items} history items)",
                thousands(*before),
                thousands(*after)
            ),
            Self::Nothing => NOTHING_TO_COMPACT.to_owned(),
        }
    }
}

/// A manual compaction failed (its [`CompactionError`], code e.g. `BUSY`), or no compaction
/// engine is booted.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum ManualError {
    /// The engine refused or failed.
    #[error("{0}")]
    #[code("COMPACTION_FAILED")]
    Compaction(#[from] CompactionError),
    /// No `dsh_compaction::Compaction` service (the policy plugin is disabled).
    #[error(
        "no compaction engine: the dsh-compaction-basic plugin is disabled or not in this harness"
    )]
    #[code("NO_COMPACTION")]
    Unavailable,
}

impl ManualError {
    /// The stable code the user sees: the engine's (`BUSY`, `SUMMARY`, …) or `NO_COMPACTION`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Compaction(e) => dsh_kernel::ErrorCode::code(e),
            Self::Unavailable => "NO_COMPACTION",
        }
    }
}

/// Compacts `agent`'s idle session now and flushes it (`/compact`, `dsh sessions compact`).
///
/// # Errors
/// [`ManualError`]: `BUSY` while a turn runs or a compaction holds the lock, the summarisation
/// and commit failures, or no engine.
pub async fn compact_now(app: &App, agent: &Agent) -> Result<Manual, ManualError> {
    let ctx = app.kernel.root();
    let engine = ctx.get::<Compaction>().ok_or(ManualError::Unavailable)?;
    let session = agent.session().clone();
    let before = measure(&session);
    let target = CompactionTarget {
        session: session.clone(),
        key: Some(agent.key().clone()),
        turn: None,
        store: Some(app.sessions.clone()),
    };
    match engine
        .0
        .compact_now(&target, CancellationToken::new(), None)
        .await?
    {
        Some(r) => Ok(Manual::Compacted {
            before,
            after: measure(&session),
            items: r.shadowed_seqs.len(),
        }),
        None => Ok(Manual::Nothing),
    }
}

/// `dsh sessions compact ID`: resumes the stored session (taking its writer lock), compacts it
/// and saves it. Exit 0 with the before → after line on stdout, or [`NOTHING_TO_COMPACT`] on
/// stderr with exit 1 when there is nothing to compact; `error: compaction is busy: … (BUSY)`
/// and exit 1 when another process holds the session or a compaction is unfinished.
///
/// # Errors
/// Setup failures (unknown id: usage, exit 2; provider not configured: exit 2).
pub async fn run_sessions_compact(app: App, id: &str) -> anyhow::Result<i32> {
    app.check_provider()?;
    let agent = match app.resume(id).await {
        Ok((a, _source)) => a,
        Err(e) if is_locked(&e) => {
            let busy = CompactionError::Busy {
                reason: format!("another process holds session {id} ({e:#})"),
            };
            let _ = writeln!(std::io::stderr(), "error: {busy} (BUSY)");
            app.shutdown().await;
            return Ok(crate::exit::FAILURE);
        }
        Err(e) => return Err(e),
    };
    let result = compact_now(&app, &agent).await;
    let code = match result {
        Ok(m @ Manual::Compacted { .. }) => {
            let _ = writeln!(std::io::stdout(), "{}", m.line());
            crate::exit::COMPLETED
        }
        Ok(Manual::Nothing) => {
            let _ = writeln!(std::io::stderr(), "{NOTHING_TO_COMPACT}");
            crate::exit::FAILURE
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e} ({})", e.code());
            crate::exit::FAILURE
        }
    };
    let _ = app.flush(&agent).await;
    app.shutdown().await;
    Ok(code)
}

/// Whether a resume failed because another writer holds the session's lock.
fn is_locked(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<dsh_persistence::PersistenceError>()
            .is_some_and(|p| matches!(p, dsh_persistence::PersistenceError::Locked { .. }))
    }) || format!("{e:#}").contains("locked by another writer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(14_210), "14,210");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }

    #[test]
    fn prompt_prefix_is_the_rounded_down_share() {
        let u = |tokens, window| ContextUse { tokens, window };
        assert_eq!(u(1_920, Some(16_000)).prompt_prefix(), "[12% ctx] ");
        assert_eq!(u(0, Some(16_000)).prompt_prefix(), "[0% ctx] ");
        assert_eq!(u(1_920, None).prompt_prefix(), "");
        assert_eq!(
            Manual::Compacted {
                before: 14_210,
                after: 3_950,
                items: 12
            }
            .line(),
            "compacted context: 14,210 → 3,950 tokens (12 history items)"
        );
    }
}
