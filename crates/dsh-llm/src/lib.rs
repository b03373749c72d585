//! The LLM vocabulary of dsh: branded ids, messages and content blocks, the stream chunks an
//! adapter yields, token usage and failures (this file's modules), plus the block assembler and
//! the LLM service seam that adapters register with.
//!
//! See docs/upstream/llm.md. Wire form: upstream session log format v0.
//!
//! - [`BlockAssembler`]: the canonical chunk → blocks → assistant [`Message`] algorithm.
//! - [`LlmService`]: provided as `Arc<LlmService>` by this crate's link-time plugin (id
//!   `dsh-llm`); adapters register routes with [`LlmService::register_adapter_in`], callers
//!   stream with [`LlmService::stream`] / [`LlmService::stream_scoped`] (the `llm/stream`
//!   waterfall, [`LlmStream`]) and resolve configs with [`LlmService::resolve_call_config`].
//!   Route changes emit `llm/adapters-updated` ([`AdaptersUpdated`]).
//! - [`LlmError`]: this crate's error enum with stable codes, convertible to [`LlmFailure`].

mod adapter;
mod assembler;
mod chunk;
mod content;
mod error;
mod ids;
pub mod models;
mod request;
mod service;

pub use adapter::{ChunkStream, LlmAdapter, ModelInfo, ProviderInfo};
pub use assembler::{Assembled, BlockAssembler};
pub use chunk::{
    BlockType, FinishReason, LlmFailure, ReplayEnvelope, StreamChunk, TokenUsage, codes,
};
pub use content::{ContentBlock, ContextForm, ContextSection, Message, MessageSource, Role};
pub use error::LlmError;
pub use ids::{CallId, MessageId, ModelId, ProviderId, ReasoningEffortId, SessionId};
pub use request::{
    AdapterDefaults, CallPurpose, EpochHeader, GenerateOptions, LlmCallConfig, ToolSchema,
};

pub use service::{
    AdapterHandle, AdapterRoutes, AdaptersUpdated, LlmService, LlmStream, PLUGIN, PreparedCall,
    ResolvedCallConfig, failure_finish,
};

#[cfg(test)]
mod tests;
