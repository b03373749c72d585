//! The background job service (`JobService`, provided as a kernel service): ids
//! `<kind>-<n>` (a per-kind counter), label, owner, status, incremental output reads, kill,
//! bounded waits, and owner-scope disposal (disposing the owner's scope kills and awaits its
//! jobs). The service itself is producer-agnostic: a producer supplies a [`JobWork`] (read /
//! cancel) and a completion future.
//!
//! Behaviour notes: `docs/tools.md` ("Shell and job tools": `JobStart {kind, label,
//! outputLimitBytes?, owner?, run}`, owner disposal cancels and awaits, per-owner limit 10,
//! access fence — an owned job is reachable only by its owner — and the snapshot shape).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dsh_kernel::{Context, Disposer, ScopeKey};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::ShellError;

/// Default maximum of running + stopping jobs per owner (or in the unowned bucket).
pub const DEFAULT_MAX_JOBS_PER_OWNER: usize = 10;

/// Lifecycle status of a job (JSON: lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Work in progress.
    Running,
    /// Kill requested, work not yet stopped.
    Stopping,
    /// Finished on its own (any exit code).
    Completed,
    /// Stopped by a kill or owner disposal.
    Killed,
    /// The producer failed (infrastructure error).
    Failed,
}

impl JobStatus {
    /// True for `completed`, `killed`, `failed`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Killed | Self::Failed)
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopping => "stopping",
            Self::Completed => "completed",
            Self::Killed => "killed",
            Self::Failed => "failed",
        }
    }
}

/// Public state of one job (JSON camelCase; upstream `PublicJobSnapshot`). Times are Unix ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSnapshot {
    /// `<kind>-<n>`.
    pub id: String,
    /// Producer kind (e.g. `bash`).
    pub kind: String,
    /// Human label (for bash: the command).
    pub label: String,
    /// Current status.
    pub status: JobStatus,
    /// Producer detail once settled (e.g. `exit code: 0`, `signal: SIGTERM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Start time (Unix ms).
    pub started_at: u64,
    /// Settle time (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
}

/// How a job's work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    /// `Completed`, `Killed` or `Failed` (a non-terminal status is treated as `Failed`).
    pub status: JobStatus,
    /// Optional detail (e.g. `exit code: 3`).
    pub detail: Option<String>,
}

/// The producer side of a job.
pub trait JobWork: Send + Sync + 'static {
    /// Requests cancellation (must be idempotent and non-blocking).
    fn cancel(&self, reason: Option<&str>);
    /// Consumes the output produced since the previous read.
    fn read_output(&self) -> String;
}

/// What to start.
#[derive(Debug, Clone)]
pub struct JobStart {
    /// Id prefix (non-empty), e.g. `bash`.
    pub kind: String,
    /// Label (non-empty).
    pub label: String,
    /// The owning agent's scope: its key fences access, its disposal kills and awaits the job.
    pub owner: Option<Context>,
}

struct Tracked {
    snapshot: JobSnapshot,
    owner: Option<ScopeKey>,
    work: Arc<dyn JobWork>,
    done: tokio::sync::watch::Receiver<bool>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<String, Tracked>,
    counters: HashMap<String, u64>,
    order: Vec<String>,
    closed: bool,
}

/// The job registry. Provide it with `ctx.provide(Arc::new(JobService::new(..)))`.
pub struct JobService {
    state: Arc<Mutex<State>>,
    max_per_owner: usize,
}

impl std::fmt::Debug for JobService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobService")
            .field("max_per_owner", &self.max_per_owner)
            .finish()
    }
}

impl Default for JobService {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_JOBS_PER_OWNER)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl JobService {
    /// A service allowing `max_per_owner` active jobs per owner.
    pub fn new(max_per_owner: usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            max_per_owner,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a job whose work is already running: `work` reads/cancels it, `done` resolves
    /// with its outcome. Must be called inside a tokio runtime (a watcher task is spawned).
    ///
    /// # Errors
    /// [`ShellError::InvalidRequest`] for an empty kind/label; [`ShellError::JobLimit`] when the
    /// owner already has `max_per_owner` active jobs; [`ShellError::JobsClosed`] when the
    /// service or the owner scope is shutting down. On error `work` is cancelled.
    pub fn start(
        &self,
        spec: JobStart,
        work: Arc<dyn JobWork>,
        done: BoxFuture<'static, JobOutcome>,
    ) -> Result<String, ShellError> {
        let res = self.admit(&spec, work.clone(), done);
        if res.is_err() {
            work.cancel(Some("job was not admitted"));
        }
        res
    }

    fn admit(
        &self,
        spec: &JobStart,
        work: Arc<dyn JobWork>,
        done: BoxFuture<'static, JobOutcome>,
    ) -> Result<String, ShellError> {
        if spec.kind.is_empty() || spec.label.is_empty() {
            return Err(ShellError::InvalidRequest(
                "job kind and label must be non-empty".into(),
            ));
        }
        let owner_key = spec.owner.as_ref().and_then(|c| c.key().cloned());
        let (tx, rx) = tokio::sync::watch::channel(false);
        let id = {
            let mut st = self.lock();
            if st.closed {
                return Err(ShellError::JobsClosed("service disposed".into()));
            }
            let active = st
                .jobs
                .values()
                .filter(|j| j.owner == owner_key && !j.snapshot.status.is_terminal())
                .count();
            if active >= self.max_per_owner {
                return Err(ShellError::JobLimit(self.max_per_owner));
            }
            let n = st.counters.entry(spec.kind.clone()).or_insert(0);
            *n += 1;
            let id = format!("{}-{}", spec.kind, n);
            st.jobs.insert(
                id.clone(),
                Tracked {
                    snapshot: JobSnapshot {
                        id: id.clone(),
                        kind: spec.kind.clone(),
                        label: spec.label.clone(),
                        status: JobStatus::Running,
                        detail: None,
                        started_at: now_ms(),
                        finished_at: None,
                    },
                    owner: owner_key,
                    work: work.clone(),
                    done: rx,
                },
            );
            st.order.push(id.clone());
            id
        };
        if let Some(owner) = &spec.owner {
            let (state, jid, w) = (self.state.clone(), id.clone(), work.clone());
            let reg = owner.effect(
                format!("job:{id}"),
                vec![Disposer::future(move || async move {
                    w.cancel(Some("owner disposed"));
                    let rx = state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .jobs
                        .get(&jid)
                        .map(|j| j.done.clone());
                    if let Some(rx) = rx {
                        wait_done(rx).await;
                    }
                    Ok(())
                })],
            );
            match reg {
                Ok(r) => r.detach(),
                Err(e) => {
                    self.lock().jobs.remove(&id);
                    return Err(ShellError::JobsClosed(e.to_string()));
                }
            }
        }
        let (state, jid) = (self.state.clone(), id.clone());
        tokio::spawn(async move {
            let outcome = done.await;
            {
                let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(j) = st.jobs.get_mut(&jid) {
                    let status = if outcome.status.is_terminal() {
                        outcome.status
                    } else {
                        JobStatus::Failed
                    };
                    j.snapshot.status = status;
                    j.snapshot.detail = outcome.detail;
                    j.snapshot.finished_at = Some(now_ms());
                }
            }
            let _ = tx.send(true);
        });
        Ok(id)
    }

    fn check<'a>(
        st: &'a State,
        id: &str,
        caller: Option<&ScopeKey>,
    ) -> Result<&'a Tracked, ShellError> {
        let j = st
            .jobs
            .get(id)
            .ok_or_else(|| ShellError::UnknownJob(id.to_string()))?;
        match &j.owner {
            Some(o) if caller.is_none_or(|c| !c.is_self_or_descendant_of(o)) => {
                Err(ShellError::JobAccess(id.to_string()))
            }
            _ => Ok(j),
        }
    }

    /// Snapshot of one job.
    ///
    /// # Errors
    /// [`ShellError::UnknownJob`]; [`ShellError::JobAccess`] when the job is owned by another
    /// agent (a caller sees its own jobs, its sub-scopes' jobs are reachable through key
    /// ancestry, and unowned jobs are open).
    pub fn get(&self, id: &str, caller: Option<&ScopeKey>) -> Result<JobSnapshot, ShellError> {
        let st = self.lock();
        Ok(Self::check(&st, id, caller)?.snapshot.clone())
    }

    /// The caller's jobs (its own plus unowned ones) in start order.
    pub fn list(&self, caller: Option<&ScopeKey>) -> Vec<JobSnapshot> {
        let st = self.lock();
        st.order
            .iter()
            .filter_map(|id| Self::check(&st, id, caller).ok())
            .map(|j| j.snapshot.clone())
            .collect()
    }

    /// Consumes the job's new output and returns it with the current snapshot. The status is
    /// taken before the read, so output read with a terminal status is complete.
    ///
    /// # Errors
    /// As [`JobService::get`].
    pub fn read(
        &self,
        id: &str,
        caller: Option<&ScopeKey>,
    ) -> Result<(String, JobSnapshot), ShellError> {
        let (work, snap) = {
            let st = self.lock();
            let j = Self::check(&st, id, caller)?;
            (j.work.clone(), j.snapshot.clone())
        };
        Ok((work.read_output(), snap))
    }

    /// Requests cancellation. Returns `false` when the job had already finished (no-op).
    ///
    /// # Errors
    /// As [`JobService::get`].
    pub fn kill(
        &self,
        id: &str,
        caller: Option<&ScopeKey>,
        reason: Option<&str>,
    ) -> Result<bool, ShellError> {
        let work = {
            let mut st = self.lock();
            Self::check(&st, id, caller)?;
            let Some(j) = st.jobs.get_mut(id) else {
                return Err(ShellError::UnknownJob(id.into()));
            };
            if j.snapshot.status.is_terminal() {
                return Ok(false);
            }
            j.snapshot.status = JobStatus::Stopping;
            j.work.clone()
        };
        work.cancel(reason);
        Ok(true)
    }

    /// Waits until the job settles, `timeout` passes or `cancel` fires; returns the snapshot
    /// (still `running` after a timed-out wait).
    ///
    /// # Errors
    /// As [`JobService::get`]; [`ShellError::WaitAborted`] when `cancel` fired first.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        caller: Option<&ScopeKey>,
        cancel: &CancellationToken,
    ) -> Result<JobSnapshot, ShellError> {
        let rx = {
            let st = self.lock();
            Self::check(&st, id, caller)?.done.clone()
        };
        tokio::select! {
            () = wait_done(rx) => {}
            () = tokio::time::sleep(timeout) => {}
            () = cancel.cancelled() => return Err(ShellError::WaitAborted),
        }
        self.get(id, caller)
    }

    /// Stops accepting jobs, cancels every running job and waits for all to settle.
    pub async fn shutdown(&self) {
        let pending: Vec<_> = {
            let mut st = self.lock();
            st.closed = true;
            st.jobs
                .values()
                .map(|j| (j.work.clone(), j.done.clone()))
                .collect()
        };
        for (w, _) in &pending {
            w.cancel(Some("job service disposed"));
        }
        for (_, rx) in pending {
            wait_done(rx).await;
        }
    }
}

async fn wait_done(mut rx: tokio::sync::watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// `[status: <s>]` or `[status: <s>, <detail>]` (upstream `statusLine`).
pub fn status_line(s: &JobSnapshot) -> String {
    match &s.detail {
        Some(d) => format!("[status: {}, {d}]", s.status.as_str()),
        None => format!("[status: {}]", s.status.as_str()),
    }
}
