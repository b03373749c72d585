//! The compaction service seam.
//!
//! See docs/upstream/compaction.md (Service API). A policy plugin implements
//! [`CompactionService`] and provides it in the kernel as [`Compaction`]; the agent loop calls
//! [`CompactionService::compact_if_needed`] before a step (trigger `pressure`) and after a
//! context-window failure (trigger `context-overflow`), front ends call
//! [`CompactionService::compact_now`] (`/compact`, `dsh sessions compact`).

use std::sync::Arc;

use dsh_kernel::ScopeKey;
use dsh_llm::ContentBlock;
use dsh_session::{Session, SessionStore};
use futures::future::BoxFuture;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::CompactionError;
use crate::events::SeqRange;

/// Why automatic compaction is considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// Before a step: the next request would be at or over the policy's threshold.
    Pressure,
    /// The provider refused the request as over its context window
    /// (`CONTEXT_WINDOW_EXCEEDED`); the threshold is bypassed.
    ContextOverflow,
}

/// Which session to compact, on behalf of whom.
#[derive(Clone)]
pub struct CompactionTarget {
    /// The session.
    pub session: Arc<Session>,
    /// The agent's scope key (the summarisation call is dispatched with it), if any.
    pub key: Option<ScopeKey>,
    /// The open turn for automatic compaction; `None` for a manual attempt between turns.
    pub turn: Option<u64>,
    /// The store, to flush after a manual compaction (`None`: no flush).
    pub store: Option<Arc<SessionStore>>,
}

impl std::fmt::Debug for CompactionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionTarget")
            .field("session", &self.session.id())
            .field("turn", &self.turn)
            .finish()
    }
}

impl CompactionTarget {
    /// A target without key or store.
    pub fn new(session: Arc<Session>, turn: Option<u64>) -> Self {
        Self {
            session,
            key: None,
            turn,
            store: None,
        }
    }
}

/// One committed compaction. JSON (camelCase): `{compactionId, sourceCommandId?, startSeq,
/// summarySeq, messageSeq, endSeq, summary, shadowedRange, shadowedSeqs, shadowedTokenCount,
/// messageTokens}` (tokens are heuristic estimates).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionResult {
    /// The attempt's id.
    pub compaction_id: String,
    /// The `/compact` invocation, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// Seq of `compaction/start`.
    pub start_seq: u64,
    /// Seq of `compaction/summary`.
    pub summary_seq: u64,
    /// Seq of the replacement `user/message` (dsh addition).
    pub message_seq: u64,
    /// Seq of `compaction/end`.
    pub end_seq: u64,
    /// The summary text blocks.
    pub summary: Vec<ContentBlock>,
    /// The shadowed span.
    pub shadowed_range: SeqRange,
    /// The shadowed surface nodes.
    pub shadowed_seqs: Vec<u64>,
    /// Heuristic tokens of the shadowed messages.
    pub shadowed_token_count: u64,
    /// Heuristic tokens of the replacement message (dsh addition; always less than
    /// `shadowed_token_count`).
    pub message_tokens: u64,
}

impl CompactionResult {
    /// The `/compact` success text: `Compacted <n> history items (~<tokens> tokens).`
    pub fn command_text(&self) -> String {
        format!(
            "Compacted {} history items (~{} tokens).",
            self.shadowed_seqs.len(),
            self.shadowed_token_count
        )
    }
}

/// The `/compact` text when there is nothing to compact.
pub const NOTHING_TO_COMPACT: &str = "No compactable history yet.";

/// Future returned by the service methods.
pub type CompactionFuture<'a, T> = BoxFuture<'a, Result<T, CompactionError>>;

/// A compaction engine. Every entry point first applies the lock rule (`BUSY` while a live
/// `compaction/start` is unmatched).
pub trait CompactionService: Send + Sync + 'static {
    /// Automatic compaction for `trigger`: `Ok(None)` when not needed or nothing is
    /// compactable (nothing written). `target.turn` is the open turn.
    fn compact_if_needed<'a>(
        &'a self,
        target: &'a CompactionTarget,
        trigger: Trigger,
        signal: CancellationToken,
    ) -> CompactionFuture<'a, Option<CompactionResult>>;

    /// Manual compaction of an idle session (keeps only the newest balanced unit):
    /// `Ok(None)` without writing when nothing useful can be compacted.
    ///
    /// Errors: `BUSY` (lock held or a turn is open), `CANCELLED`, `CHANGED`, `SUMMARY`,
    /// `COMMIT`, `PERSISTENCE`.
    fn compact_now<'a>(
        &'a self,
        target: &'a CompactionTarget,
        signal: CancellationToken,
        source_command_id: Option<String>,
    ) -> CompactionFuture<'a, Option<CompactionResult>>;

    /// Compacts the explicit inclusive surface span `[start ..= end]` (seqs of current surface
    /// nodes, surface order) on behalf of the open turn `target.turn`.
    ///
    /// Errors: `INVALID_REGION` (no open turn, missing or reversed edges, unbalanced cuts),
    /// `BUSY`, and the errors of the summarisation and commit.
    fn compact_region<'a>(
        &'a self,
        target: &'a CompactionTarget,
        start: u64,
        end: u64,
        signal: CancellationToken,
    ) -> CompactionFuture<'a, CompactionResult>;
}

/// The kernel service handle of the compaction engine in force (`ctx.require::<Compaction>()`).
#[derive(Clone)]
pub struct Compaction(pub Arc<dyn CompactionService>);

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Compaction(..)")
    }
}
