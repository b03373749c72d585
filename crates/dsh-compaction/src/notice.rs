//! The live (emitted, not logged) compaction events a front end renders for the user.
//!
//! Upstream has no live compaction events (its results go to the logger only); dsh adds two so
//! the CLI can tell the user what automatic compaction did. See docs/upstream/compaction.md
//! (dsh additions: live events). Neither is written to the session log: the durable record is
//! the `compaction/*` bracket and `compaction/prune` events.
//!
//! | event | payload | when |
//! |---|---|---|
//! | [`CompactionNotice`] `emit("compaction/notice")` | [`CompactionNoticePayload`] | something about compaction the user should see: a rejected or failed automatic compaction (the turn goes on uncompacted), automatic compaction being off for want of a context window |
//! | [`CompactionCompleted`] `emit("compaction/completed")` | [`CompactionCompletedPayload`] | after every successful compaction (automatic or manual), and after a pruning pass that alone brought the request under the threshold |
//!
//! Both are dispatched to the agent's scope key when there is one (`ctx.dispatch_to(key)`), so
//! a listener tagged with an agent's key only hears that agent's compactions.

use dsh_kernel::ScopeKey;
use serde::Serialize;

/// What caused a compaction (or the notice about one). JSON: `"pressure"`,
/// `"context-overflow"`, `"manual"`, `"region"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompactionCause {
    /// Before a step, the next request was at or over the policy's threshold
    /// ([`crate::Trigger::Pressure`]).
    Pressure,
    /// The provider refused a request as over its context window
    /// ([`crate::Trigger::ContextOverflow`]).
    ContextOverflow,
    /// `/compact` or `dsh sessions compact` ([`crate::CompactionService::compact_now`]).
    Manual,
    /// An explicit region ([`crate::CompactionService::compact_region`]).
    Region,
}

impl From<crate::Trigger> for CompactionCause {
    fn from(t: crate::Trigger) -> Self {
        match t {
            crate::Trigger::Pressure => Self::Pressure,
            crate::Trigger::ContextOverflow => Self::ContextOverflow,
        }
    }
}

impl CompactionCause {
    /// The JSON name: `pressure`, `context-overflow`, `manual`, `region`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pressure => "pressure",
            Self::ContextOverflow => "context-overflow",
            Self::Manual => "manual",
            Self::Region => "region",
        }
    }
}

/// How serious a [`CompactionNoticePayload`] is. JSON: `"info"`, `"warning"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NoticeLevel {
    /// For information (e.g. automatic compaction is off: no known context window).
    Info,
    /// Something did not work; the session goes on (e.g. a summary was rejected and the turn
    /// goes on uncompacted).
    Warning,
}

/// Payload of [`CompactionNotice`]. JSON (camelCase):
/// `{sessionId, turn: number|null, trigger, level, code, message}`.
///
/// `code` is stable and machine-readable: for a failed attempt the most specific code known —
/// the summary failure's own code (`SUMMARY_NOT_SMALLER`, `MAX_TOKENS`, `UNSUPPORTED_CONTENT`,
/// `EMPTY_SUMMARY`, or the provider failure's code) for a `SUMMARY` error, otherwise the
/// [`crate::CompactionError`] code (`BUSY`, `CHANGED`, `COMMIT`, `CONFIG`, …); `NO_CONTEXT_WINDOW`
/// when automatic compaction is off because the model's context window is unknown.
/// `message` is one human sentence, without a trailing newline, fit to print after `dsh: `.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionNoticePayload {
    /// The session concerned.
    pub session_id: String,
    /// The agent's scope key, if any (not serialised).
    #[serde(skip)]
    pub scope: Option<ScopeKey>,
    /// The open turn, or `None` between turns (manual compaction).
    pub turn: Option<u64>,
    /// What the compaction was for.
    pub trigger: CompactionCause,
    /// How serious.
    pub level: NoticeLevel,
    /// Stable code (see the type's doc).
    pub code: String,
    /// One human sentence.
    pub message: String,
}

/// Payload of [`CompactionCompleted`]. JSON (camelCase): `{sessionId, turn: number|null,
/// trigger, compactionId: string|null, tokensBefore, tokensAfter, shadowedCount, prunedCount}`.
///
/// `tokensBefore` / `tokensAfter` are the token meter's estimates (heuristic tokens, anchored
/// on provider usage where it applies) of the next request before and after, the whole request
/// (system prompt and tool schemas included), so the CLI can print `compacted: N → M tokens`.
/// `compactionId` is `None` when only the tool-result pruner ran (no summary was written);
/// `shadowedCount` is the number of surface nodes the summary replaced (0 then), `prunedCount`
/// the number of tool results the pruner shortened in the same pass.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionCompletedPayload {
    /// The session compacted.
    pub session_id: String,
    /// The agent's scope key, if any (not serialised).
    #[serde(skip)]
    pub scope: Option<ScopeKey>,
    /// The open turn, or `None` between turns (manual compaction).
    pub turn: Option<u64>,
    /// What caused it.
    pub trigger: CompactionCause,
    /// The committed attempt's id; `None` for a pruning-only pass.
    pub compaction_id: Option<String>,
    /// Meter estimate of the request before (tokens).
    pub tokens_before: u64,
    /// Meter estimate of the request after (tokens).
    pub tokens_after: u64,
    /// Surface nodes the summary replaced (0 for a pruning-only pass).
    pub shadowed_count: u64,
    /// Tool results the pruner shortened in this pass.
    pub pruned_count: u64,
}

/// Equality ignores `scope` (a [`ScopeKey`] has no equality).
impl PartialEq for CompactionNoticePayload {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.session_id,
            self.turn,
            self.trigger,
            self.level,
            &self.code,
            &self.message,
        ) == (
            &o.session_id,
            o.turn,
            o.trigger,
            o.level,
            &o.code,
            &o.message,
        )
    }
}

/// Equality ignores `scope` (a [`ScopeKey`] has no equality).
impl PartialEq for CompactionCompletedPayload {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.session_id,
            self.turn,
            self.trigger,
            &self.compaction_id,
            self.tokens_before,
            self.tokens_after,
            self.shadowed_count,
            self.pruned_count,
        ) == (
            &o.session_id,
            o.turn,
            o.trigger,
            &o.compaction_id,
            o.tokens_before,
            o.tokens_after,
            o.shadowed_count,
            o.pruned_count,
        )
    }
}

dsh_kernel::event! {
    /// `compaction/notice` (emit, scope-filtered; not logged): something about compaction the
    /// user should see. `dsh` prints it on stderr. See [`CompactionNoticePayload`].
    pub struct CompactionNotice: emit("compaction/notice") => CompactionNoticePayload;
}

dsh_kernel::event! {
    /// `compaction/completed` (emit, scope-filtered; not logged): a compaction committed.
    /// `dsh` prints `compacted: N → M tokens` on stderr. See [`CompactionCompletedPayload`].
    pub struct CompactionCompleted: emit("compaction/completed") => CompactionCompletedPayload;
}
