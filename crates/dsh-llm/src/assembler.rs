//! [`BlockAssembler`]: the one canonical chunk-to-message assembly algorithm.
//!
//! See docs/upstream/llm.md (Block assembler (exact algorithm)). The agent loop logs raw chunks
//! (all but redundant `block-end`s, see [`BlockAssembler::open_block_is`]) and feeds every chunk
//! here, then reads [`BlockAssembler::blocks`] /
//! [`BlockAssembler::message`] / usage / finish once the stream ends, or
//! [`BlockAssembler::interrupted_blocks`] when cancellation cut it short.
//!
//! Rules, exactly:
//! - state: index → partial `{blockType, text, toolCallId?, toolCallName?, args, block?}` plus
//!   the first-seen index order; `usage`, `finish`, `replayState`;
//! - `block-start` creates the partial if the index is unseen (duplicates ignored);
//! - `text-delta` / `reasoning-delta` ensure a partial (created with that type), are ignored once
//!   the index is closed, else append;
//! - `tool-call-delta` ensures a `tool-call` partial, is ignored once closed, else sets the id,
//!   sets the name when present and appends `argumentsDelta`;
//! - `block-end` ensures a partial (typed by the block) and the **first close wins**;
//! - `usage`: last wins; `finish`: stores reason and replay state;
//! - an unmodelled chunk type (`StreamChunk::Other`) is ignored.
//!
//! Tolerant of delta-only protocols (no block-start/end). Deltas for a closed index are ignored,
//! so a misbehaving adapter cannot grow memory or corrupt a completed block.
//!
//! Performance: index lookup is O(1) (a dense table for indices below 1024, a hash map above);
//! one text delta costs one lookup and one `push_str`. See `benches/assembler.rs`.

use std::collections::HashMap;

use serde_json::Value;

use crate::chunk::{FinishReason, ReplayEnvelope, StreamChunk, TokenUsage};
use crate::content::{ContentBlock, Message, MessageSource};
use crate::error::LlmError;
use crate::ids::{CallId, MessageId};

/// Indices below this bound are looked up in a dense table; larger ones in a hash map.
const DENSE_LIMIT: u32 = 1024;

/// The finish reported when no `finish` chunk arrived.
static DEFAULT_FINISH: FinishReason = FinishReason::Stop;

/// The block type a partial was created with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Text,
    Reasoning,
    ToolCall,
    Other(String),
}

impl Kind {
    fn from_tag(tag: &str) -> Self {
        match tag {
            "text" => Self::Text,
            "reasoning" => Self::Reasoning,
            "tool-call" => Self::ToolCall,
            other => Self::Other(other.to_owned()),
        }
    }

    fn tag(&self) -> &str {
        match self {
            Self::Text => "text",
            Self::Reasoning => "reasoning",
            Self::ToolCall => "tool-call",
            Self::Other(s) => s,
        }
    }
}

/// One block under assembly.
#[derive(Debug, Clone)]
struct Partial {
    index: u32,
    kind: Kind,
    text: String,
    tool_call_id: Option<CallId>,
    tool_call_name: Option<String>,
    args: String,
    /// Set by `block-end`: authoritative, and freezes the partial.
    block: Option<ContentBlock>,
}

impl Partial {
    fn new(index: u32, kind: Kind) -> Self {
        Self {
            index,
            kind,
            text: String::new(),
            tool_call_id: None,
            tool_call_name: None,
            args: String::new(),
            block: None,
        }
    }

    /// The block this partial assembles to (closed ⇒ its block-end block).
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] for an open partial of an unknown type.
    fn assemble(&self) -> Result<ContentBlock, LlmError> {
        if let Some(block) = &self.block {
            return Ok(block.clone());
        }
        match &self.kind {
            Kind::Text => Ok(ContentBlock::Text {
                text: self.text.clone(),
            }),
            Kind::Reasoning => Ok(ContentBlock::Reasoning {
                text: self.text.clone(),
            }),
            Kind::ToolCall => Ok(ContentBlock::ToolCall {
                id: self
                    .tool_call_id
                    .clone()
                    .unwrap_or_else(|| CallId(format!("call-{}", self.index))),
                name: self.tool_call_name.clone().unwrap_or_default(),
                arguments: self.args.clone(),
            }),
            Kind::Other(t) => Err(LlmError::IncompleteBlock {
                index: self.index,
                block_type: t.clone(),
            }),
        }
    }

    /// The effective type: the closing block's tag, else the creation type.
    fn type_tag(&self) -> &str {
        match &self.block {
            Some(b) => b.type_tag(),
            None => self.kind.tag(),
        }
    }
}

/// The blocks and the pruned replay state, computed together so they cannot disagree.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// One block per seen index in first-seen order, minus tool calls under a `max-tokens`
    /// finish.
    pub blocks: Vec<ContentBlock>,
    /// The finish's replay envelope, pruned in step with `blocks` (see
    /// [`BlockAssembler::replay_state`]).
    pub replay_state: Option<ReplayEnvelope>,
}

/// Incrementally assembles raw [`StreamChunk`]s into complete [`ContentBlock`]s and an assistant
/// [`Message`], following the spec's exact algorithm (see the module docs).
///
/// Feeding never fails; reading ([`BlockAssembler::blocks`], [`BlockAssembler::message`]) fails
/// only with [`LlmError::IncompleteBlock`] when an index of an unknown block type was never closed.
///
/// ```
/// use dsh_llm::{BlockAssembler, CallId, ContentBlock, FinishReason, StreamChunk};
///
/// let mut a = BlockAssembler::new();
/// a.push(&StreamChunk::TextDelta { index: 0, text: "Hel".into() });
/// a.push(&StreamChunk::TextDelta { index: 0, text: "lo".into() });
/// a.push(&StreamChunk::ToolCallDelta {
///     index: 1,
///     id: CallId::new("call_0"),
///     name: Some("bash".into()),
///     arguments_delta: "{}".into(),
/// });
/// a.push(&StreamChunk::Finish { reason: FinishReason::ToolCalls, replay_state: None });
/// assert_eq!(
///     a.blocks().unwrap(),
///     vec![ContentBlock::text("Hello"), ContentBlock::tool_call("call_0", "bash", "{}")]
/// );
/// let m = a.message("deepseek", "deepseek-v4-flash").unwrap();
/// assert_eq!(m.text(), "Hello");
/// ```
#[derive(Debug, Clone, Default)]
pub struct BlockAssembler {
    /// Partials in first-seen order.
    partials: Vec<Partial>,
    /// `index → position + 1` for indices below [`DENSE_LIMIT`] (0 = unseen).
    dense: Vec<usize>,
    /// `index → position` for indices at or above [`DENSE_LIMIT`].
    sparse: HashMap<u32, usize>,
    usage: Option<TokenUsage>,
    finish: Option<FinishReason>,
    replay_state: Option<ReplayEnvelope>,
}

impl BlockAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn position(&self, index: u32) -> Option<usize> {
        if index < DENSE_LIMIT {
            match self.dense.get(index as usize) {
                Some(&p) if p != 0 => Some(p - 1),
                _ => None,
            }
        } else {
            self.sparse.get(&index).copied()
        }
    }

    fn insert(&mut self, index: u32, kind: Kind) -> usize {
        let pos = self.partials.len();
        self.partials.push(Partial::new(index, kind));
        if index < DENSE_LIMIT {
            let i = index as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, 0);
            }
            self.dense[i] = pos + 1;
        } else {
            self.sparse.insert(index, pos);
        }
        pos
    }

    /// The partial at `index`, created with `kind()` if unseen.
    #[inline]
    fn ensure(&mut self, index: u32, kind: impl FnOnce() -> Kind) -> &mut Partial {
        let pos = match self.position(index) {
            Some(p) => p,
            None => self.insert(index, kind()),
        };
        &mut self.partials[pos]
    }

    /// Feeds one chunk (borrowed; text is copied, a `block-end` block / finish is cloned).
    pub fn push(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::BlockStart { index, block_type } => {
                if self.position(*index).is_none() {
                    self.insert(*index, Kind::from_tag(block_type));
                }
            }
            StreamChunk::TextDelta { index, text } => {
                let p = self.ensure(*index, || Kind::Text);
                if p.block.is_none() {
                    p.text.push_str(text);
                }
            }
            StreamChunk::ReasoningDelta { index, text } => {
                let p = self.ensure(*index, || Kind::Reasoning);
                if p.block.is_none() {
                    p.text.push_str(text);
                }
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let p = self.ensure(*index, || Kind::ToolCall);
                if p.block.is_none() {
                    if p.tool_call_id.as_ref() != Some(id) {
                        p.tool_call_id = Some(id.clone());
                    }
                    if let Some(name) = name
                        && p.tool_call_name.as_deref() != Some(name.as_str())
                    {
                        p.tool_call_name = Some(name.clone());
                    }
                    p.args.push_str(arguments_delta);
                }
            }
            StreamChunk::BlockEnd { index, block } => {
                self.close(*index, || block.clone(), block.type_tag());
            }
            StreamChunk::Usage { usage } => self.usage = Some(*usage),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(reason.clone());
                self.replay_state = replay_state.clone();
            }
            StreamChunk::Other(_) => {}
        }
    }

    /// Feeds one chunk by value (moves a `block-end` block and a finish instead of cloning).
    pub fn push_owned(&mut self, chunk: StreamChunk) {
        match chunk {
            StreamChunk::BlockEnd { index, block } => {
                let tag = block.type_tag().to_owned();
                self.close(index, move || block, &tag);
            }
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(reason);
                self.replay_state = replay_state;
            }
            other => self.push(&other),
        }
    }

    /// `block-end`: ensure (typed by the block), first close wins.
    fn close(&mut self, index: u32, block: impl FnOnce() -> ContentBlock, tag: &str) {
        let p = self.ensure(index, || Kind::from_tag(tag));
        if p.block.is_none() {
            p.block = Some(block());
        }
    }

    /// Feeds every chunk of `chunks` in order.
    pub fn extend<'a>(&mut self, chunks: impl IntoIterator<Item = &'a StreamChunk>) {
        for c in chunks {
            self.push(c);
        }
    }

    /// True when block `index` is still open (seen, not yet closed by a `block-end`) and the
    /// chunks fed so far assemble it to exactly `block` — that is, a `block-end {index, block}`
    /// arriving now would change nothing: an assembler fed the same chunks without that
    /// `block-end` returns the same blocks. False for an unseen or closed index, and for an open
    /// block of a type the assembler cannot build from deltas. The agent loop uses it to leave
    /// such redundant `block-end` chunks out of the session log (`docs/formats.md`, "Copies of
    /// the content").
    pub fn open_block_is(&self, index: u32, block: &ContentBlock) -> bool {
        self.position(index)
            .map(|p| &self.partials[p])
            .is_some_and(|p| {
                p.block.is_none()
                    && p.type_tag() == block.type_tag()
                    && p.assemble().is_ok_and(|b| &b == block)
            })
    }

    /// Number of distinct block indices seen so far (before any max-tokens drop).
    pub fn seen_blocks(&self) -> usize {
        self.partials.len()
    }

    /// Usage from the last `usage` chunk; `None` until one arrives.
    pub fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// The finish reason from the `finish` chunk; `stop` when none arrived.
    pub fn finish(&self) -> &FinishReason {
        self.finish.as_ref().unwrap_or(&DEFAULT_FINISH)
    }

    /// True once a `finish` chunk arrived.
    pub fn has_finish(&self) -> bool {
        self.finish.is_some()
    }

    /// The one shared keep/drop decision: every seen index assembled in first-seen order
    /// (closed ⇒ its `block-end` block; open text/reasoning ⇒ accumulated text; open tool call ⇒
    /// `{id ?? "call-<index>", name ?? "", arguments}`), then under a `max-tokens` finish every
    /// block whose `type` is `tool-call` is dropped. The replay envelope is `None` when its
    /// `blocks` length differs from the number of assembled blocks before dropping, otherwise it
    /// is pruned at the dropped positions (and returned unchanged when nothing was dropped or it
    /// has no `blocks`).
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] when an open index has a type other than text, reasoning or
    /// tool-call.
    pub fn assembled(&self) -> Result<Assembled, LlmError> {
        let all = self
            .partials
            .iter()
            .map(Partial::assemble)
            .collect::<Result<Vec<_>, _>>()?;
        let total = all.len();
        let kept: Option<Vec<bool>> = matches!(self.finish, Some(FinishReason::MaxTokens))
            .then(|| all.iter().map(|b| b.type_tag() != "tool-call").collect());
        let blocks = match &kept {
            None => all,
            Some(k) => all
                .into_iter()
                .zip(k.iter())
                .filter_map(|(b, keep)| keep.then_some(b))
                .collect(),
        };
        let replay_state = match &self.replay_state {
            None => None,
            Some(env) => match &env.blocks {
                None => Some(env.clone()),
                Some(entries) if entries.len() != total => None,
                Some(entries) => match &kept {
                    Some(k) if blocks.len() != total => Some(ReplayEnvelope {
                        response: env.response.clone(),
                        blocks: Some(
                            entries
                                .iter()
                                .zip(k.iter())
                                .filter(|(_, keep)| **keep)
                                .map(|(e, _)| e.clone())
                                .collect(),
                        ),
                    }),
                    _ => Some(env.clone()),
                },
            },
        };
        Ok(Assembled {
            blocks,
            replay_state,
        })
    }

    /// Every seen block in first-seen order (see [`BlockAssembler::assembled`]).
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] as [`BlockAssembler::assembled`].
    pub fn blocks(&self) -> Result<Vec<ContentBlock>, LlmError> {
        self.assembled().map(|a| a.blocks)
    }

    /// The finish's replay state pruned in step with [`BlockAssembler::blocks`]: `None` when no
    /// finish carried one, or when its `blocks` do not align 1:1 with the assembled blocks.
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] as [`BlockAssembler::assembled`].
    pub fn replay_state(&self) -> Result<Option<ReplayEnvelope>, LlmError> {
        self.assembled().map(|a| a.replay_state)
    }

    /// The prefix an interrupted stream can safely keep: text and reasoning blocks (open or
    /// closed) whose text contains a non-whitespace character (JavaScript `trim` whitespace), in
    /// first-seen order. Tool calls and unknown blocks are omitted; never fails.
    pub fn interrupted_blocks(&self) -> Vec<ContentBlock> {
        self.partials
            .iter()
            .filter(|p| matches!(p.type_tag(), "text" | "reasoning"))
            .filter_map(|p| p.assemble().ok())
            .filter(|b| match b {
                ContentBlock::Text { text } | ContentBlock::Reasoning { text } => {
                    !text.chars().all(is_js_whitespace)
                }
                _ => false,
            })
            .collect()
    }

    /// The assembled assistant message produced by `provider`/`model`: content = `blocks()`,
    /// source `{kind:"model", provider, model, replayState?}` with the pruned replay state, a
    /// fresh id.
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] as [`BlockAssembler::assembled`].
    pub fn message(
        &self,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Result<Message, LlmError> {
        let Assembled {
            blocks,
            replay_state,
        } = self.assembled()?;
        let replay = replay_state.map(envelope_value);
        Ok(Message::assistant(blocks, provider, model, replay))
    }

    /// An assistant message over `blocks()` with an explicit `source` (upstream's default source
    /// is `{kind:"plugin", plugin:"dsh-llm/assembler"}`), a fresh id.
    ///
    /// # Errors
    /// [`LlmError::IncompleteBlock`] as [`BlockAssembler::assembled`].
    pub fn message_with_source(&self, source: MessageSource) -> Result<Message, LlmError> {
        Ok(Message {
            id: MessageId::fresh(),
            role: crate::content::Role::Assistant,
            content: self.blocks()?,
            source,
        })
    }
}

/// A replay envelope as the JSON value stored in `MessageSource::Model.replay_state`.
fn envelope_value(env: ReplayEnvelope) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("response".to_owned(), env.response);
    if let Some(blocks) = env.blocks {
        map.insert("blocks".to_owned(), Value::Array(blocks));
    }
    Value::Object(map)
}

/// Whitespace as JavaScript's `String.prototype.trim` defines it (WhiteSpace + LineTerminator).
fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'
            | '\u{000A}'
            | '\u{000B}'
            | '\u{000C}'
            | '\u{000D}'
            | '\u{0020}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}
