//! The summarisation call: the request, the fixed structured-checkpoint instruction, and the
//! mapping of the model's output to a summary or an error.
//!
//! See docs/upstream/compaction.md (Summarisation call). The request replays the latest
//! request header's system prompt and tools and the shadowed messages in surface order (the
//! same prefix as the agent's own requests, so the provider's prompt cache stays warm), then
//! one user message with [`instruction`]; output is text only.

use std::sync::Arc;

use dsh_compaction::CompactionError;
use dsh_kernel::ScopeKey;
use dsh_llm::{
    BlockAssembler, CallPurpose, ContentBlock, EpochHeader, FinishReason, GenerateOptions,
    LlmService, Message, MessageSource, TokenUsage, ToolSchema,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// The `plugin` of the instruction message's source.
pub const INSTRUCTION_PLUGIN: &str = "dsh-compaction-basic";

/// The checkpoint's section headings, in order.
pub const SECTION_HEADINGS: [&str; 8] = [
    "## Primary Request and Intent",
    "## Key Technical Concepts",
    "## Files and Code",
    "## Errors and Fixes",
    "## Pending Jobs",
    "## Current Work",
    "## Next Step",
    "## Critical Context",
];

/// The fixed instruction (dsh's wording of upstream's): act as a compaction engine and write
/// exactly the Markdown skeleton of [`SECTION_HEADINGS`], with the rules that follow it.
pub fn instruction() -> String {
    let mut s = String::from(
        "You are now acting as a context compaction engine. Write a checkpoint of the \
         conversation above so that work can continue from it alone. Output exactly this \
         Markdown skeleton, keeping every section in this order, with terse bullet points \
         and \"(none)\" for a section with nothing to say:\n\n",
    );
    for h in SECTION_HEADINGS {
        s.push_str(h);
        s.push('\n');
    }
    s.push_str(
        "\nRules:\n\
         - Write concise English.\n\
         - Keep exact file paths, commands, error messages, identifiers, numbers and function \
           signatures.\n\
         - Record the user's feedback and corrections.\n\
         - Never mention summarisation, compaction or this checkpoint.\n\
         - Output only the checkpoint: no preamble and no tool calls.\n\
         - A <compacted-summary> block above is an earlier checkpoint: merge its facts into \
           this one under the same structure instead of copying it.",
    );
    s
}

/// The instruction as the request's last message (source plugin `dsh-compaction-basic`).
pub fn instruction_message() -> Message {
    Message::user(
        vec![ContentBlock::text(instruction())],
        MessageSource::plugin(INSTRUCTION_PLUGIN),
    )
}

/// The marker that stands, at the head of a summarisation request, for the `dropped` oldest
/// history items left out because they did not fit the summarising model's context window
/// (docs/upstream/compaction.md, "Fitting the summarisation request").
pub fn dropped_marker(dropped: usize) -> Message {
    Message::user(
        vec![ContentBlock::text(format!(
            "[{dropped} older history items were dropped here without being summarised: \
             they did not fit the model's context window]"
        ))],
        MessageSource::plugin(INSTRUCTION_PLUGIN),
    )
}

/// How a summarisation request fits a context window of `window` tokens: `fixed` is what
/// every request carries (system prompt, tool schemas, instruction, marker), `costs` the
/// estimated tokens of each shadowed item (oldest first) and `balanced[i]` whether a cut
/// right before item `i` splits no tool call from its result. Returns `(first kept item,
/// max_tokens)`: the output gets `min(max_tokens, window / 8)` set aside, the newest items that fit the rest are kept (the cut moved to a balanced boundary;
/// everything when it all fits), and `max_tokens` is `min(max_tokens, window − input)`, at
/// least 1. With no window the request is unchanged: `(0, max_tokens)`.
pub fn fit_to_window(
    window: Option<u64>,
    fixed: u64,
    costs: &[u64],
    balanced: &[bool],
    max_tokens: u64,
) -> (usize, u64) {
    let Some(window) = window else {
        return (0, max_tokens);
    };
    let reserve = max_tokens.min(window / 8);
    let budget = window.saturating_sub(reserve);
    let total: u64 = costs.iter().sum();
    let mut first = 0;
    let mut input = fixed + total;
    if input > budget {
        // Walk from the newest item while the kept tail still fits, then move the cut
        // toward the newest end until it is balanced.
        let mut acc = fixed;
        first = costs.len();
        for i in (0..costs.len()).rev() {
            if acc + costs[i] > budget {
                break;
            }
            acc += costs[i];
            first = i;
        }
        while first < costs.len() && !balanced.get(first).copied().unwrap_or(true) {
            first += 1;
        }
        input = fixed + costs[first..].iter().sum::<u64>();
    }
    (first, max_tokens.min(window.saturating_sub(input)).max(1))
}

/// The summarisation request: `header`'s system prompt and tools (the config's provider and
/// model replaced by `route`; its reasoning effort kept only on the same route), `shadowed`
/// then [`instruction_message`], `max_tokens`, purpose `compaction`.
///
/// # Errors
/// [`CompactionError::Config`] when the header's `tools` are not a list of tool schemas.
pub fn build_request(
    header: &EpochHeader,
    shadowed: Vec<Arc<Message>>,
    route: (&str, &str),
    max_tokens: u64,
    session_id: Option<String>,
    signal: CancellationToken,
) -> Result<GenerateOptions, CompactionError> {
    let mut config = header.config.clone();
    if (config.provider.as_str(), config.model.as_str()) != route {
        config.reasoning_effort = None;
    }
    config.provider = route.0.to_owned();
    config.model = route.1.to_owned();
    config.max_tokens = Some(max_tokens);
    let mut messages = shadowed;
    messages.push(Arc::new(instruction_message()));
    let mut opts = GenerateOptions::new(&config, messages);
    opts.system.clone_from(&header.system);
    opts.tools = match &header.tools {
        None => Vec::new(),
        Some(v) => Vec::<ToolSchema>::deserialize(v).map_err(|e| CompactionError::Config {
            message: format!("the request header's tools are not tool schemas: {e}"),
        })?,
    };
    opts.signal = signal;
    opts.session_id = session_id;
    opts.purpose = Some(CallPurpose::Compaction);
    Ok(opts)
}

/// The assembled output of one summarisation call.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutput {
    /// Every block, reasoning included.
    pub blocks: Vec<ContentBlock>,
    /// How the call ended.
    pub finish: FinishReason,
    /// Reported usage.
    pub usage: Option<TokenUsage>,
}

/// The summary text blocks of an output.
///
/// # Errors
/// [`CompactionError::Summary`] with the failure's code for a finish `error`/`aborted`,
/// `MAX_TOKENS` for an incomplete checkpoint, `UNSUPPORTED_CONTENT` for image output, and
/// `EMPTY_SUMMARY` when no text block has non-blank text.
pub fn summary_blocks(out: &SummaryOutput) -> Result<Vec<ContentBlock>, CompactionError> {
    match &out.finish {
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            return Err(CompactionError::summary(
                failure.code.clone(),
                failure.message.clone(),
            ));
        }
        FinishReason::MaxTokens => {
            return Err(CompactionError::summary(
                "MAX_TOKENS",
                "the summarisation call hit its output limit (incomplete checkpoint)",
            ));
        }
        _ => {}
    }
    if out
        .blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::Image { .. }))
    {
        return Err(CompactionError::summary(
            "UNSUPPORTED_CONTENT",
            "the summarisation call produced an image",
        ));
    }
    let text: Vec<ContentBlock> = out
        .blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text { .. }))
        .cloned()
        .collect();
    if text
        .iter()
        .all(|b| b.as_text().is_none_or(|t| t.trim().is_empty()))
    {
        return Err(CompactionError::summary(
            "EMPTY_SUMMARY",
            "the summarisation call produced no text",
        ));
    }
    Ok(text)
}

/// Something that runs a summarisation request (the LLM service, or a test double).
pub trait Summarizer: Send + Sync + 'static {
    /// Runs `opts` once (no retry), dispatched with the agent's `key`.
    fn summarize(
        &self,
        opts: GenerateOptions,
        key: Option<ScopeKey>,
    ) -> BoxFuture<'static, SummaryOutput>;
}

/// [`Summarizer`] over the kernel's [`LlmService`] (`llm/stream`, so retry and logging
/// listeners see the call with purpose `compaction`).
pub struct LlmSummarizer(pub Arc<LlmService>);

impl Summarizer for LlmSummarizer {
    fn summarize(
        &self,
        opts: GenerateOptions,
        key: Option<ScopeKey>,
    ) -> BoxFuture<'static, SummaryOutput> {
        let mut stream = self.0.stream_scoped(key.as_ref(), opts);
        Box::pin(async move {
            let mut asm = BlockAssembler::new();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(chunk) => asm.push_owned(chunk),
                    Err(failure) => {
                        return SummaryOutput {
                            blocks: Vec::new(),
                            finish: FinishReason::Error { failure },
                            usage: None,
                        };
                    }
                }
            }
            let usage = asm.usage().copied();
            match asm.blocks() {
                Ok(blocks) => SummaryOutput {
                    blocks,
                    finish: asm.finish().clone(),
                    usage,
                },
                Err(e) => SummaryOutput {
                    blocks: Vec::new(),
                    finish: FinishReason::Error { failure: e.into() },
                    usage,
                },
            }
        })
    }
}
