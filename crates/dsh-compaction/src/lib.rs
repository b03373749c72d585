//! dsh-compaction: the compaction seam — replacing an old span of a session's surface with a
//! model-written checkpoint so the session outlives the context window.
//!
//! - [`CompactionService`] (provided in the kernel as [`Compaction`]): compact if needed for a
//!   [`Trigger`], compact now (manual), compact an explicit region; [`CompactionResult`].
//! - [`CompactionError`]: stable codes `BUSY`, `CANCELLED`, `CHANGED`, `SUMMARY`, `COMMIT`,
//!   `PERSISTENCE` (upstream's lowercase names via [`CompactionError::kind`]) plus
//!   `INVALID_REGION` and `CONFIG`.
//! - [`events`]: the durable log-only events `compaction/start|summary|end|prune` with
//!   upstream's payloads, and their typed registration in the session's event-type registry.
//! - [`lock`]: the lock rule (a live unmatched `compaction/start` blocks every entry point; one
//!   before the latest `session/end-seed` is stale).
//! - Live events (emitted, not logged) for front ends: [`CompactionNotice`]
//!   (`compaction/notice`, a warning such as a rejected summary) and [`CompactionCompleted`]
//!   (`compaction/completed`, tokens before → after).
//! - [`pairing`]: which cuts are safe (no cut separates a tool call from its result or ends
//!   inside a still-open step), over the session surface.
//! - [`checkpoint`]: the `user/message` that replaces the compacted span, and the commit path
//!   (`compaction/start` → … → `compaction/summary` → replacement → `compaction/end`) through
//!   [`dsh_session::Session::append`].
//!
//! Policy (when, how much, the summarisation call) lives in plugins (`dsh-compaction-basic`).
//! See docs/upstream/compaction.md.

pub mod checkpoint;
mod error;
pub mod events;
pub mod lock;
mod notice;
pub mod pairing;
mod service;

pub use checkpoint::{Bracket, Region, SummaryInput, checkpoint_message, is_checkpoint};
pub use error::CompactionError;
pub use events::{
    CompactionEnd, CompactionEvent, CompactionPrune, CompactionStart, CompactionSummary, SeqRange,
};
pub use lock::{ActiveLock, active_lock, active_lock_of};
pub use notice::{
    CompactionCause, CompactionCompleted, CompactionCompletedPayload, CompactionNotice,
    CompactionNoticePayload, NoticeLevel,
};
pub use pairing::{SurfaceView, tool_pairing_balanced_after, tool_pairing_balanced_before};
pub use service::{
    Compaction, CompactionFuture, CompactionResult, CompactionService, CompactionTarget,
    NOTHING_TO_COMPACT, Trigger,
};

#[cfg(test)]
mod tests;
