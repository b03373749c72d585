//! The tool-result pruner: shortens old oversized tool results (head + marker + tail) before
//! anything is summarised. Model-free; no `compaction/start` bracket.
//!
//! See docs/upstream/compaction.md (Tool-result pruner). Sizes are Unicode code points of the
//! text blocks (non-text blocks are kept and cost nothing). Each pruned result is logged as
//! `compaction/prune {shadowedRange {start: seq, end: seq}, shadowedSeqs: [seq],
//! shadowedTokenCount}` followed by a `tool/result` with the same data but the pruned content,
//! `surfaceOp {op:'replace', start: seq, end: seq}` and `sourceEventSeqs: [seq]`.

use std::sync::Arc;

use dsh_compaction::{CompactionError, CompactionPrune, SeqRange, SurfaceView, events};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{EventData, EventType, Session, SurfaceIntent, ToolResultData};
use dsh_token_meter::estimate_message;

/// Default budget: results over 8192 code points of text are pruned.
pub const DEFAULT_THRESHOLD_CHARS: usize = 8192;
/// Default head kept: 4096 code points.
pub const DEFAULT_HEAD_CHARS: usize = 4096;
/// Default tail kept: 1024 code points.
pub const DEFAULT_TAIL_CHARS: usize = 1024;
/// Inserted once between head and tail.
pub const MARKER: &str = "\n\n[... tool result middle pruned ...]\n\n";

/// The pruner's budgets (code points; head + marker + tail ≤ threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunerConfig {
    /// Prune results whose text is longer than this.
    pub threshold_chars: usize,
    /// Keep this many code points from the start.
    pub head_chars: usize,
    /// Keep this many code points from the end.
    pub tail_chars: usize,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        Self {
            threshold_chars: DEFAULT_THRESHOLD_CHARS,
            head_chars: DEFAULT_HEAD_CHARS,
            tail_chars: DEFAULT_TAIL_CHARS,
        }
    }
}

/// The pruned form of `blocks` (the content of a tool result), or `None` when its text is
/// within the threshold. Keeps the first `head_chars` and the last `tail_chars` code points
/// across the text blocks, inserts [`MARKER`] once where the head ends, drops text blocks left
/// empty and keeps every non-text block in place.
pub fn prune_content(blocks: &[ContentBlock], cfg: &PrunerConfig) -> Option<Vec<ContentBlock>> {
    let total: usize = blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.chars().count())
        .sum();
    if total <= cfg.threshold_chars {
        return None;
    }
    let head = cfg.head_chars.min(total);
    let tail_from = total - cfg.tail_chars.min(total - head);
    let mut out = Vec::with_capacity(blocks.len());
    let mut off = 0usize;
    let mut marked = false;
    for b in blocks {
        let Some(text) = b.as_text() else {
            out.push(b.clone());
            continue;
        };
        let len = text.chars().count();
        let mut kept = String::new();
        for (i, c) in text.chars().enumerate() {
            let g = off + i;
            if g == head && !marked {
                kept.push_str(MARKER);
                marked = true;
            }
            if g < head || g >= tail_from {
                kept.push(c);
            }
        }
        off += len;
        if !kept.is_empty() {
            out.push(ContentBlock::text(kept));
        }
    }
    if !marked {
        out.push(ContentBlock::text(MARKER));
    }
    Some(out)
}

/// One planned prune: the result at `seq`, the tokens of its original message, and its
/// replacement payload.
#[derive(Debug, Clone, PartialEq)]
pub struct PrunePlan {
    /// Seq of the current `tool/result` node.
    pub seq: u64,
    /// [`estimate_message`] of the original message.
    pub original_tokens: u64,
    /// The replacement: the same data with the pruned content.
    pub replacement: ToolResultData,
}

/// The prunes the current surface calls for, oldest first (results of the still-open step are
/// left alone).
pub fn plan(view: &SurfaceView, cfg: &PrunerConfig) -> Vec<PrunePlan> {
    let mut out = Vec::new();
    for e in &view.nodes {
        let EventData::ToolResult(d) = &e.data else {
            continue;
        };
        if view.open_step == Some((d.turn, d.step)) {
            continue;
        }
        let mut changed = false;
        let content: Vec<ContentBlock> = d
            .message
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult {
                    tool_call_id,
                    content,
                    is_error,
                } => match prune_content(content, cfg) {
                    Some(pruned) => {
                        changed = true;
                        ContentBlock::ToolResult {
                            tool_call_id: tool_call_id.clone(),
                            content: pruned,
                            is_error: *is_error,
                        }
                    }
                    None => b.clone(),
                },
                other => other.clone(),
            })
            .collect();
        if !changed {
            continue;
        }
        let message = Message {
            content,
            ..(*d.message).clone()
        };
        out.push(PrunePlan {
            seq: e.seq,
            original_tokens: estimate_message(&d.message),
            replacement: ToolResultData {
                message: Arc::new(message),
                ..d.clone()
            },
        });
    }
    out
}

/// Appends the planned prunes (`compaction/prune`, then the replacement `tool/result`, for
/// each) and returns how many results were pruned.
///
/// # Errors
/// [`CompactionError::Commit`] when an append is refused (earlier prunes stay applied).
pub fn apply(session: &Session, plans: Vec<PrunePlan>) -> Result<usize, CompactionError> {
    let mut n = 0;
    for p in plans {
        let prune = CompactionPrune {
            shadowed_range: SeqRange {
                start: p.seq,
                end: p.seq,
            },
            shadowed_seqs: vec![p.seq],
            shadowed_token_count: p.original_tokens,
        };
        let v = serde_json::to_value(&prune)
            .map_err(|e| CompactionError::summary("UNSERIALIZABLE", e.to_string()))?;
        session
            .append_opts(
                EventType::from_static(events::PRUNE),
                EventData::Opaque(v),
                None,
                false,
            )
            .map_err(CompactionError::Commit)?;
        session
            .append(
                EventType::TOOL_RESULT,
                EventData::ToolResult(p.replacement),
                Some(SurfaceIntent::replace(p.seq, p.seq, vec![p.seq])),
            )
            .map_err(CompactionError::Commit)?;
        n += 1;
    }
    Ok(n)
}
