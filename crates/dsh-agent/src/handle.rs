//! The [`Agent`] handle: identity, options, session, inbox, status, agent scope, and the
//! idle/running state machine (wake latch, cancellation, maintenance, disposal drain).
//!
//! See docs/upstream/agent-loop.md (Agent handle). The turn algorithm itself is supplied by the loop through
//! [`TurnRunner`]; this module only decides *when* a turn runs.

use std::sync::{Arc, Mutex};

use dsh_kernel::{CancellationToken, Context, ScopeKey};
use dsh_llm::{Message, SessionId};
use dsh_session::Session;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::events::{AgentStatus as AgentStatusEvent, AgentStatusPayload, StatusKind};
use crate::inbox::{Inbox, InboxError, InboxTarget};
use crate::lifecycle::{InboxDiscarded, InboxInserted, InboxNotice};

/// Per-agent request defaults (`AgentOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentOptions {
    /// Provider route id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Output-token limit per request (tokens, positive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Why an active turn was cancelled. JSON `{"kind":"user"}`, `{"kind":"hook","reason":…}`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AgentCancelCause {
    /// The person cancelled.
    User,
    /// The parent agent cancelled.
    Parent,
    /// A hook cancelled.
    Hook {
        /// The hook's reason.
        reason: String,
    },
    /// The agent is being disposed.
    Disposed,
}

/// Runs one turn of an agent; implemented by the agent loop.
pub trait TurnRunner: Send + Sync + 'static {
    /// Runs one whole turn (claims its own input, appends `turn/start` … `turn/end`). `signal`
    /// fires on cancellation; the first cause is readable with [`Agent::cancel_cause`].
    fn run_turn(&self, agent: Agent, signal: CancellationToken) -> BoxFuture<'static, ()>;
}

#[derive(Default)]
struct Activity {
    running: bool,
    maintenance: bool,
    disposed: bool,
    wake_latched: bool,
    turn: Option<(CancellationToken, Option<AgentCancelCause>)>,
    driver: Option<tokio::task::JoinHandle<()>>,
}

struct Inner {
    id: SessionId,
    key: ScopeKey,
    ctx: Context,
    session: Arc<Session>,
    inbox: Inbox,
    options: Mutex<AgentOptions>,
    runner: Arc<dyn TurnRunner>,
    activity: Mutex<Activity>,
    idle_tx: watch::Sender<bool>,
}

/// The public live-agent handle (cheap to clone; compares by identity).
#[derive(Clone)]
pub struct Agent(Arc<Inner>);

impl PartialEq for Agent {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Agent {}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.0.id)
            .field("status", &self.status())
            .finish()
    }
}

/// Errors of the handle's methods.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum AgentError {
    /// Inbox failure (duplicate id, log failure). Code: the inbox error's ([`dsh_kernel::ErrorCode`]).
    #[error(transparent)]
    #[code(transparent)]
    Inbox(#[from] InboxError),
    /// `run_maintenance` while a turn or another maintenance task owns the agent.
    /// Code `AGENT_BUSY`.
    #[error("agent `{0}` is busy")]
    #[code("AGENT_BUSY")]
    Busy(String),
    /// The agent was disposed. Code `AGENT_DISPOSED`.
    #[error("agent `{0}` is disposed")]
    #[code("AGENT_DISPOSED")]
    Disposed(String),
}

impl Agent {
    /// Builds a handle. `ctx` must be the agent's tagged scope (`parent.tagged(key, …)`);
    /// `inbox` is usually [`Inbox::restore`] of the session.
    pub fn new(
        key: ScopeKey,
        ctx: Context,
        session: Arc<Session>,
        inbox: Inbox,
        options: AgentOptions,
        runner: Arc<dyn TurnRunner>,
    ) -> Self {
        let (idle_tx, _) = watch::channel(true);
        Self(Arc::new(Inner {
            id: SessionId::new(session.id()),
            key,
            ctx,
            session,
            inbox,
            options: Mutex::new(options),
            runner,
            activity: Mutex::new(Activity::default()),
            idle_tx,
        }))
    }

    /// The agent id (equals the session id).
    pub fn id(&self) -> &SessionId {
        &self.0.id
    }

    /// The agent's scope key (dispatches about this agent carry it).
    pub fn key(&self) -> &ScopeKey {
        &self.0.key
    }

    /// The agent scope: registrations through it are agent-local and unwind on disposal.
    pub fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// The live session this agent drives.
    pub fn session(&self) -> &Arc<Session> {
        &self.0.session
    }

    /// The inbox projection.
    pub fn inbox(&self) -> &Inbox {
        &self.0.inbox
    }

    /// A copy of the current options.
    pub fn options(&self) -> AgentOptions {
        self.0
            .options
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the options (e.g. `/model`); used from the next request on.
    pub fn set_options(&self, options: AgentOptions) {
        *self.0.options.lock().unwrap_or_else(|e| e.into_inner()) = options;
    }

    fn activity(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.0.activity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `running` while the driver drains turns, else `idle` (maintenance keeps `idle`).
    pub fn status(&self) -> StatusKind {
        if self.activity().running {
            StatusKind::Running
        } else {
            StatusKind::Idle
        }
    }

    /// The first cancellation cause of the active turn, if it was cancelled.
    pub fn cancel_cause(&self) -> Option<AgentCancelCause> {
        self.activity().turn.as_ref().and_then(|(_, c)| c.clone())
    }

    /// Routes `message` to `target` and optionally wakes the driver.
    ///
    /// # Errors
    /// [`AgentError::Inbox`] for a duplicate pending id or a log failure;
    /// [`AgentError::Disposed`] after disposal.
    pub fn send(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), AgentError> {
        if self.activity().disposed {
            return Err(AgentError::Disposed(self.0.id.to_string()));
        }
        let message = Arc::new(message);
        self.0.inbox.push(target, message.clone())?;
        self.0
            .ctx
            .dispatch_to(Some(&self.0.key))
            .emit::<InboxInserted>(&InboxNotice {
                agent: self.clone(),
                message,
                turn: None,
            });
        if wakeup {
            self.wake();
        }
        Ok(())
    }

    /// Queues a follow-up turn and wakes the driver (`send(next-turn, wake)`).
    ///
    /// # Errors
    /// As [`Agent::send`].
    pub fn followup(&self, message: Message) -> Result<(), AgentError> {
        self.send(message, InboxTarget::NextTurn, true)
    }

    /// Steers the nearest step and wakes the driver (`send(next-step, wake)`).
    ///
    /// # Errors
    /// As [`Agent::send`].
    pub fn steer(&self, message: Message) -> Result<(), AgentError> {
        self.send(message, InboxTarget::NextStep, true)
    }

    /// Queues model-facing context for the next step without waking (`send(next-step, no wake)`).
    ///
    /// # Errors
    /// As [`Agent::send`].
    pub fn inject(&self, message: Message) -> Result<(), AgentError> {
        self.send(message, InboxTarget::NextStep, false)
    }

    fn set_running(&self, running: bool) {
        let _ = self.0.idle_tx.send(!running);
        self.0
            .ctx
            .dispatch_to(Some(&self.0.key))
            .emit::<AgentStatusEvent>(&AgentStatusPayload {
                session: self.0.session.clone(),
                scope: Some(self.0.key.clone()),
                status: if running {
                    StatusKind::Running
                } else {
                    StatusKind::Idle
                },
            });
    }

    /// Wakes the driver: starts a turn when idle; otherwise latches the wake so another turn
    /// runs when the current activity converges.
    pub fn wake(&self) {
        let mut act = self.activity();
        if act.disposed {
            return;
        }
        if act.running || act.maintenance {
            act.wake_latched = true;
            return;
        }
        act.running = true;
        act.wake_latched = false;
        let agent = self.clone();
        act.driver = Some(tokio::spawn(async move { agent.drive().await }));
        drop(act);
        self.set_running(true);
    }

    async fn drive(self) {
        loop {
            let token = self.0.ctx.cancellation().child_token();
            {
                let mut act = self.activity();
                act.turn = Some((token.clone(), None));
                act.wake_latched = false;
            }
            self.0.runner.run_turn(self.clone(), token).await;
            let mut act = self.activity();
            act.turn = None;
            // A latched wake only matters while its input is still pending: steering that the
            // finished turn already consumed must not open an empty turn.
            let again = !act.disposed
                && (self.0.inbox.has_next_turn()
                    || (act.wake_latched && self.0.inbox.has_next_step()));
            if !again {
                act.running = false;
                drop(act);
                self.set_running(false);
                return;
            }
        }
    }

    /// Cancels the active turn (the first cause wins) and, unless `keep_inbox`, discards
    /// pending inbox input (logged with `outcome: "canceled"`). A no-op while idle.
    pub fn cancel(&self, cause: AgentCancelCause, keep_inbox: bool) {
        let mut act = self.activity();
        let Some((token, first)) = act.turn.as_mut() else {
            return;
        };
        if first.is_none() {
            *first = Some(cause);
        }
        token.cancel();
        act.wake_latched = false;
        drop(act);
        if !keep_inbox {
            match self.0.inbox.clear() {
                Ok(discarded) => {
                    for message in discarded {
                        self.0
                            .ctx
                            .dispatch_to(Some(&self.0.key))
                            .emit::<InboxDiscarded>(&InboxNotice {
                                agent: self.clone(),
                                message,
                                turn: None,
                            });
                    }
                }
                Err(e) => {
                    tracing::error!(agent = %self.0.id, error = %e, "could not clear inbox on cancel");
                }
            }
        }
    }

    /// Resolves once no turn and no maintenance task is active.
    pub async fn when_idle(&self) {
        let mut rx = self.0.idle_tx.subscribe();
        loop {
            {
                let act = self.activity();
                if !act.running && !act.maintenance {
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Runs one maintenance task from the idle phase (status stays `idle`; waking input waits
    /// until it settles). The task receives a token that [`Agent::cancel`] does not reach —
    /// it is cancelled when the agent scope is disposed.
    ///
    /// # Errors
    /// [`AgentError::Busy`] when a turn or another maintenance task owns the agent.
    pub async fn run_maintenance<T, F, Fut>(&self, task: F) -> Result<T, AgentError>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        {
            let mut act = self.activity();
            if act.disposed {
                return Err(AgentError::Disposed(self.0.id.to_string()));
            }
            if act.running || act.maintenance {
                return Err(AgentError::Busy(self.0.id.to_string()));
            }
            act.maintenance = true;
        }
        let _ = self.0.idle_tx.send(false);
        let out = task(self.0.ctx.cancellation().child_token()).await;
        let relatch = {
            let mut act = self.activity();
            act.maintenance = false;
            act.wake_latched || self.0.inbox.has_next_turn()
        };
        let _ = self.0.idle_tx.send(true);
        if relatch {
            self.wake();
        }
        Ok(out)
    }

    /// Stops the driver for disposal: cancels with cause `disposed` (inbox kept, no new turns)
    /// and waits for the active turn to finish (drained, never abandoned).
    pub async fn shutdown(&self) {
        let driver = {
            let mut act = self.activity();
            act.disposed = true;
            act.wake_latched = false;
            act.driver.take()
        };
        self.cancel(AgentCancelCause::Disposed, true);
        if let Some(d) = driver {
            let _ = d.await;
        }
    }

    /// True after [`Agent::shutdown`].
    pub fn is_disposed(&self) -> bool {
        self.activity().disposed
    }
}
