//! The checkpoint message and the commit path of one compaction attempt.
//!
//! See docs/upstream/compaction.md (Durable events; Summarisation call). The summary lands as a
//! `user/message` with `surfaceOp {op:'replace', start, end}` over the compacted span,
//! `sourceEventSeqs = [startSeq, summarySeq, ...shadowedSeqs]` and source
//! `{kind:'plugin', plugin:'compact', compactionId, sourceCommandId?}`; its content is
//! [`PREAMBLE`] + `<compacted-summary>`, the summary's text blocks, `</compacted-summary>`.
//!
//! Order on the log: `compaction/start` ([`Bracket::begin`]) → (the summarisation call, async)
//! → `compaction/summary` → replacement `user/message` → `compaction/end`
//! ([`Bracket::commit`], appended back to back without yielding). A failure after the start is
//! closed once with `compaction/end {error}` ([`Bracket::close_failed`]); a crash leaves the
//! start unmatched (see [`crate::lock`]).

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageSource, TokenUsage};
use dsh_session::{EventData, EventType, Session, SessionEvent, SurfaceIntent};
use dsh_token_meter::estimate_message;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::CompactionError;
use crate::events::{self, CompactionEnd, CompactionStart, CompactionSummary, SeqRange};
use crate::lock::active_lock_of;
use crate::pairing::SurfaceView;
use crate::service::CompactionResult;

/// The `plugin` of a checkpoint message's source.
pub const COMPACT_PLUGIN: &str = "compact";

/// Opening tag around the summary text.
pub const OPEN_TAG: &str = "<compacted-summary>";
/// Closing tag around the summary text.
pub const CLOSE_TAG: &str = "</compacted-summary>";

/// The text before the summary (dsh's wording of upstream's preamble).
pub const PREAMBLE: &str = "This message is an automatically generated checkpoint that condenses \
an earlier span of this conversation. Treat it as established background and continue from the \
messages that follow without acknowledging it.";

/// The checkpoint message for `summary` (its text blocks only):
/// `[text(PREAMBLE + "\n\n<compacted-summary>"), ...text blocks, text("</compacted-summary>")]`,
/// source `{kind:'plugin', plugin:'compact', compactionId, sourceCommandId?}`.
pub fn checkpoint_message(
    summary: &[ContentBlock],
    compaction_id: &str,
    source_command_id: Option<&str>,
) -> Message {
    let mut content = vec![ContentBlock::text(format!("{PREAMBLE}\n\n{OPEN_TAG}"))];
    content.extend(
        summary
            .iter()
            .filter(|b| matches!(b, ContentBlock::Text { .. }))
            .cloned(),
    );
    content.push(ContentBlock::text(CLOSE_TAG));
    let mut extra = Map::new();
    extra.insert("compactionId".into(), Value::from(compaction_id));
    if let Some(id) = source_command_id {
        extra.insert("sourceCommandId".into(), Value::from(id));
    }
    Message::user(
        content,
        MessageSource::Plugin {
            plugin: COMPACT_PLUGIN.to_owned(),
            form: None,
            sections: None,
            extra,
        },
    )
}

/// True for a checkpoint message (source plugin `compact`).
pub fn is_checkpoint(message: &Message) -> bool {
    matches!(&message.source, MessageSource::Plugin { plugin, .. } if plugin == COMPACT_PLUGIN)
}

/// A span of current surface nodes to compact: its seqs in surface order and their heuristic
/// tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Region {
    /// The shadowed surface seqs, in surface order (non-empty).
    pub shadowed_seqs: Vec<u64>,
    /// Σ [`estimate_message`] of their derived messages.
    pub shadowed_token_count: u64,
}

impl Region {
    /// The nodes at positions `first..=last` of `view` (clamped to the view).
    pub fn from_view(view: &SurfaceView, first: usize, last: usize) -> Self {
        let nodes = view.nodes.get(first..=last).unwrap_or(&[]);
        Self {
            shadowed_seqs: nodes.iter().map(|e| e.seq).collect(),
            shadowed_token_count: nodes
                .iter()
                .filter_map(|e| dsh_session::derive_event_message(e))
                .map(|m| estimate_message(&m))
                .sum(),
        }
    }

    /// `{start: first seq, end: last seq}`, `None` when empty.
    pub fn range(&self) -> Option<SeqRange> {
        Some(SeqRange {
            start: *self.shadowed_seqs.first()?,
            end: *self.shadowed_seqs.last()?,
        })
    }
}

/// What the summariser produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryInput {
    /// The summary blocks (only text blocks are kept).
    pub summary: Vec<ContentBlock>,
    /// Route of the summarisation call.
    pub provider: String,
    /// Model of the summarisation call.
    pub model: String,
    /// Its output limit (tokens).
    pub max_tokens: Option<u64>,
    /// Its reported usage.
    pub usage: Option<TokenUsage>,
    /// Its complete output before the text-only projection (then `llmStreamCall: true`).
    pub raw_output: Option<Vec<ContentBlock>>,
}

/// An open compaction bracket (a logged `compaction/start`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bracket {
    /// The attempt's id.
    pub compaction_id: String,
    /// The `/compact` invocation, if any.
    pub source_command_id: Option<String>,
    /// The owning turn (`None` = manual, between turns).
    pub turn: Option<u64>,
    /// Seq of the `compaction/start`.
    pub start_seq: u64,
}

fn append_opaque(
    session: &Session,
    kind: &'static str,
    v: impl Serialize,
) -> Result<Arc<SessionEvent>, CompactionError> {
    let v = serde_json::to_value(v)
        .map_err(|e| CompactionError::summary("UNSERIALIZABLE", e.to_string()))?;
    session
        .append_opts(
            EventType::from_static(kind),
            EventData::Opaque(v),
            None,
            false,
        )
        .map_err(CompactionError::Commit)
}

impl Bracket {
    /// Takes the lock: refuses when a live `compaction/start` is unmatched, else appends
    /// `compaction/start {compactionId: <random UUID>, sourceCommandId?, turn}`.
    ///
    /// # Errors
    /// [`CompactionError::Busy`] (lock held); [`CompactionError::Commit`] when the append is
    /// refused.
    pub fn begin(
        session: &Session,
        turn: Option<u64>,
        source_command_id: Option<String>,
    ) -> Result<Self, CompactionError> {
        if let Some(lock) = active_lock_of(session) {
            return Err(CompactionError::Busy {
                reason: format!(
                    "compaction {} (seq {}) has not ended",
                    lock.compaction_id, lock.seq
                ),
            });
        }
        let compaction_id = uuid::Uuid::new_v4().to_string();
        let start = CompactionStart {
            compaction_id: compaction_id.clone(),
            source_command_id: source_command_id.clone(),
            turn,
        };
        let e = append_opaque(session, events::START, &start)?;
        Ok(Self {
            compaction_id,
            source_command_id,
            turn,
            start_seq: e.seq,
        })
    }

    /// Commits an accepted summary over `region`: checks that the checkpoint is smaller than
    /// the region and that the region's nodes are still current and contiguous, then appends
    /// `compaction/summary`, the replacement `user/message` and `compaction/end`.
    ///
    /// # Errors
    /// [`CompactionError::Summary`] (no text, or `SUMMARY_NOT_SMALLER`) and
    /// [`CompactionError::Changed`] before anything is written (the caller closes the bracket);
    /// [`CompactionError::Commit`] when an append is refused.
    pub fn commit(
        &self,
        session: &Session,
        region: &Region,
        input: SummaryInput,
    ) -> Result<CompactionResult, CompactionError> {
        let summary: Vec<ContentBlock> = input
            .summary
            .into_iter()
            .filter(|b| matches!(b, ContentBlock::Text { .. }))
            .collect();
        if summary
            .iter()
            .all(|b| b.as_text().is_none_or(|t| t.trim().is_empty()))
        {
            return Err(CompactionError::summary(
                "EMPTY_SUMMARY",
                "the summary has no text",
            ));
        }
        let range = region
            .range()
            .ok_or_else(|| CompactionError::region("the region is empty"))?;
        let message = checkpoint_message(
            &summary,
            &self.compaction_id,
            self.source_command_id.as_deref(),
        );
        let message_tokens = estimate_message(&message);
        if message_tokens >= region.shadowed_token_count {
            return Err(CompactionError::summary(
                "SUMMARY_NOT_SMALLER",
                format!(
                    "the checkpoint (~{message_tokens} tokens) is not smaller than what it replaces (~{} tokens)",
                    region.shadowed_token_count
                ),
            ));
        }
        let view = SurfaceView::of(session);
        let current = view
            .position(range.start)
            .and_then(|a| view.nodes.get(a..a + region.shadowed_seqs.len()))
            .is_some_and(|nodes| {
                nodes
                    .iter()
                    .map(|e| e.seq)
                    .eq(region.shadowed_seqs.iter().copied())
            });
        if !current {
            return Err(CompactionError::Changed {
                reason: "the compacted span is no longer the same current surface nodes".into(),
            });
        }
        let llm_stream_call = input.raw_output.as_ref().map(|_| true);
        let data = CompactionSummary {
            compaction_id: self.compaction_id.clone(),
            source_command_id: self.source_command_id.clone(),
            summary: summary.clone(),
            shadowed_range: range,
            shadowed_seqs: region.shadowed_seqs.clone(),
            shadowed_token_count: region.shadowed_token_count,
            provider: input.provider,
            model: input.model,
            max_tokens: input.max_tokens,
            usage: input.usage,
            raw_output: input.raw_output,
            llm_stream_call,
        };
        let summary_ev = append_opaque(session, events::SUMMARY, &data)?;
        let mut sources = vec![self.start_seq, summary_ev.seq];
        sources.extend(region.shadowed_seqs.iter().copied());
        let msg_ev = session
            .append(
                EventType::USER_MESSAGE,
                EventData::UserMessage(Arc::new(message)),
                Some(SurfaceIntent::replace(range.start, range.end, sources)),
            )
            .map_err(CompactionError::Commit)?;
        let end = CompactionEnd {
            compaction_id: self.compaction_id.clone(),
            source_command_id: self.source_command_id.clone(),
            turn: self.turn,
            error: None,
        };
        let end_ev = append_opaque(session, events::END, &end)?;
        Ok(CompactionResult {
            compaction_id: self.compaction_id.clone(),
            source_command_id: self.source_command_id.clone(),
            start_seq: self.start_seq,
            summary_seq: summary_ev.seq,
            message_seq: msg_ev.seq,
            end_seq: end_ev.seq,
            summary,
            shadowed_range: range,
            shadowed_seqs: region.shadowed_seqs.clone(),
            shadowed_token_count: region.shadowed_token_count,
            message_tokens,
        })
    }

    /// Closes a failed attempt: appends `compaction/end {compactionId, sourceCommandId?, turn,
    /// error}` with the error's display text and returns its seq.
    ///
    /// # Errors
    /// [`CompactionError::Commit`] when the append is refused (the start then stays unmatched
    /// and holds the lock until the next end-seed).
    pub fn close_failed(
        &self,
        session: &Session,
        error: &CompactionError,
    ) -> Result<u64, CompactionError> {
        let end = CompactionEnd {
            compaction_id: self.compaction_id.clone(),
            source_command_id: self.source_command_id.clone(),
            turn: self.turn,
            error: Some(error.to_string()),
        };
        Ok(append_opaque(session, events::END, &end)?.seq)
    }
}
