//! The adapter seam: what a provider plugin implements.
//!
//! See docs/upstream/llm.md (Adapter contract; Runtime and adapter seam).

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::chunk::{LlmFailure, StreamChunk};
use crate::request::GenerateOptions;

/// The stream one adapter call yields. An `Err` item is the "throw" error path; the service
/// normalises it into a terminal `finish {error|aborted}`.
pub type ChunkStream = BoxStream<'static, Result<StreamChunk, LlmFailure>>;

/// Catalog facts about one model on one route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// Model id.
    pub id: String,
    /// Context window (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Largest allowed output (tokens, reasoning included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Default `max_tokens` the adapter sends when the config sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
    /// Reasoning-effort ids the model accepts (first = default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning_efforts: Vec<String>,
}

impl ModelInfo {
    /// A model with only an id.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            context_window: None,
            max_output_tokens: None,
            default_max_tokens: None,
            reasoning_efforts: Vec::new(),
        }
    }
}

/// Facts about a provider route an adapter serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    /// Route id.
    pub id: String,
    /// Human name.
    pub display_name: String,
    /// Whether it is usable now (e.g. its credential resolves).
    pub configured: bool,
    /// What to set when it is not configured (one paragraph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_hint: Option<String>,
}

/// A provider adapter: one call = one provider attempt (no library retries), yields chunks per
/// the adapter contract, honours `opts.signal` by dropping the connection and finishing
/// `aborted`.
pub trait LlmAdapter: Send + Sync + 'static {
    /// Starts one attempt.
    fn stream(&self, opts: GenerateOptions) -> ChunkStream;

    /// Facts about a route this adapter serves.
    fn provider_info(&self, provider: &str) -> Option<ProviderInfo> {
        let _ = provider;
        None
    }

    /// The advisory model catalog of a route.
    fn models(&self, provider: &str) -> Vec<ModelInfo> {
        let _ = provider;
        Vec::new()
    }

    /// Exact-route model metadata (context window, default max tokens, reasoning efforts) for
    /// `model` on `provider`; `None` when the adapter knows nothing about it (catalog membership
    /// is advisory: the adapter may still accept the model). Default: the entry of
    /// [`LlmAdapter::models`] whose `id` equals `model`.
    fn resolve_model(&self, provider: &str, model: &str) -> Option<ModelInfo> {
        self.models(provider).into_iter().find(|m| m.id == model)
    }

    /// Live model discovery (e.g. `GET /models`).
    fn discover_models(
        &self,
        provider: &str,
    ) -> BoxFuture<'static, Result<Vec<ModelInfo>, LlmFailure>> {
        let models = self.models(provider);
        Box::pin(async move { Ok(models) })
    }
}
