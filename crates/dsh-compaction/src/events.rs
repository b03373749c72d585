//! The durable, log-only compaction events and their payloads (upstream's JSON, camelCase).
//!
//! See docs/upstream/compaction.md (Durable events). dsh-session already knows the four names
//! as opaque upstream-catalog types (so upstream logs load); [`register`] takes them over with
//! typed validation, allowed between turns (manual compaction runs between turns).
//!
//! | type | payload |
//! |---|---|
//! | `compaction/start` | [`CompactionStart`] `{compactionId, sourceCommandId?, turn: number\|null}` |
//! | `compaction/summary` | [`CompactionSummary`] |
//! | `compaction/end` | [`CompactionEnd`] `{compactionId, sourceCommandId?, turn, error?}` |
//! | `compaction/prune` | [`CompactionPrune`] `{shadowedRange, shadowedSeqs, shadowedTokenCount}` |

use dsh_llm::{ContentBlock, TokenUsage};
use dsh_session::{EventData, EventTypeDecl, EventTypeRegistry, SessionError, SessionEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `compaction/start`.
pub const START: &str = "compaction/start";
/// `compaction/summary`.
pub const SUMMARY: &str = "compaction/summary";
/// `compaction/end`.
pub const END: &str = "compaction/end";
/// `compaction/prune`.
pub const PRUNE: &str = "compaction/prune";

/// A surface-position span of seqs, inclusive: `start` is the first shadowed node's seq, `end`
/// the last one's (`start` may be numerically greater than `end`). JSON `{"start","end"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeqRange {
    /// Seq of the first shadowed surface node.
    pub start: u64,
    /// Seq of the last shadowed surface node.
    pub end: u64,
}

/// `compaction/start`: acquires the lock. `turn` is the open turn for automatic compaction
/// (inside `agent/pre-step`) and `null` for a standalone manual attempt between turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionStart {
    /// Random UUID naming this attempt.
    pub compaction_id: String,
    /// The `/compact` command invocation that asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The owning turn, or `null` (always written).
    pub turn: Option<u64>,
}

/// `compaction/summary`: the accepted summary and what it shadows, written right before the
/// replacement `user/message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionSummary {
    /// The attempt.
    pub compaction_id: String,
    /// The `/compact` invocation, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The summary: text blocks only.
    pub summary: Vec<ContentBlock>,
    /// The shadowed surface span.
    pub shadowed_range: SeqRange,
    /// Every shadowed surface node, in surface order.
    pub shadowed_seqs: Vec<u64>,
    /// Heuristic tokens of the shadowed messages (the token meter's estimate).
    pub shadowed_token_count: u64,
    /// Route of the summarisation call.
    pub provider: String,
    /// Model of the summarisation call.
    pub model: String,
    /// Output limit of the summarisation call (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The call's reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// The complete assembled output (reasoning included) before the text-only projection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Vec<ContentBlock>>,
    /// `true` when the summary came from one LLM stream call (then `rawOutput` is required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_stream_call: Option<bool>,
}

/// `compaction/end`: releases the lock; always the bracket's last event. `error` is the failure
/// chain when the attempt failed after its start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionEnd {
    /// The attempt.
    pub compaction_id: String,
    /// The `/compact` invocation, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The owning turn, or `null` (always written).
    pub turn: Option<u64>,
    /// The failure, if the attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `compaction/prune`: precedes each pruned `tool/result` replacement (no start/end bracket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionPrune {
    /// The replaced result: `{start: seq, end: seq}`.
    pub shadowed_range: SeqRange,
    /// `[seq]`.
    pub shadowed_seqs: Vec<u64>,
    /// Heuristic tokens of the original result message.
    pub shadowed_token_count: u64,
}

/// One parsed compaction event.
#[derive(Debug, Clone, PartialEq)]
pub enum CompactionEvent {
    /// `compaction/start`.
    Start(CompactionStart),
    /// `compaction/summary`.
    Summary(Box<CompactionSummary>),
    /// `compaction/end`.
    End(CompactionEnd),
    /// `compaction/prune`.
    Prune(CompactionPrune),
}

impl CompactionEvent {
    /// The event's type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Start(_) => START,
            Self::Summary(_) => SUMMARY,
            Self::End(_) => END,
            Self::Prune(_) => PRUNE,
        }
    }

    /// The payload as JSON.
    pub fn to_value(&self) -> Value {
        let v = match self {
            Self::Start(d) => serde_json::to_value(d),
            Self::Summary(d) => serde_json::to_value(d),
            Self::End(d) => serde_json::to_value(d),
            Self::Prune(d) => serde_json::to_value(d),
        };
        v.unwrap_or(Value::Null)
    }

    /// Parses a logged event: `None` for any other type, `Some(Err)` for a compaction type
    /// whose payload does not have upstream's shape.
    pub fn parse(event: &SessionEvent) -> Option<Result<Self, serde_json::Error>> {
        let EventData::Opaque(v) = &event.data else {
            return None;
        };
        Some(match event.kind.as_str() {
            START => CompactionStart::deserialize(v).map(Self::Start),
            SUMMARY => CompactionSummary::deserialize(v).map(|d| Self::Summary(Box::new(d))),
            END => CompactionEnd::deserialize(v).map(Self::End),
            PRUNE => CompactionPrune::deserialize(v).map(Self::Prune),
            _ => return None,
        })
    }
}

fn summary_rules(v: &Value) -> Result<(), String> {
    let d = CompactionSummary::deserialize(v).map_err(|e| e.to_string())?;
    if d.summary
        .iter()
        .any(|b| !matches!(b, ContentBlock::Text { .. }))
    {
        return Err("summary may hold text blocks only".to_owned());
    }
    if d.llm_stream_call == Some(true) && d.raw_output.is_none() {
        return Err("llmStreamCall: true requires rawOutput".to_owned());
    }
    Ok(())
}

/// The four declarations (typed validation; allowed between turns), owned by `owner`.
pub fn declarations(owner: &str) -> Vec<EventTypeDecl> {
    let summary_typed = EventTypeDecl::new(SUMMARY, owner, true).typed::<CompactionSummary>();
    let typed_check = summary_typed.validate.clone();
    vec![
        EventTypeDecl::new(START, owner, true).typed::<CompactionStart>(),
        summary_typed.with_validator(move |v| {
            if let Some(check) = &typed_check {
                check(v)?;
            }
            summary_rules(v)
        }),
        EventTypeDecl::new(END, owner, true).typed::<CompactionEnd>(),
        EventTypeDecl::new(PRUNE, owner, true).typed::<CompactionPrune>(),
    ]
}

/// Declares the four types in `registry` for `owner` (taking over the upstream-catalog
/// entries).
///
/// # Errors
/// [`SessionError::Registration`] when another plugin already declared one of the names.
pub fn register(registry: &EventTypeRegistry, owner: &str) -> Result<(), SessionError> {
    for d in declarations(owner) {
        registry.register(d)?;
    }
    Ok(())
}
