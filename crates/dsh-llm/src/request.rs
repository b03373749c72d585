//! The request envelope: call configuration, tool schemas, the epoch header, generate options.
//!
//! See docs/upstream/llm.md (Request envelope) and docs/upstream/session.md (Event catalog: the
//! request header).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::content::Message;

/// A tool as the model sees it. JSON: `{"name","description","parameters"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name (`[A-Za-z0-9_-]{1,64}` for DeepSeek).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// The model-call configuration of one request.
/// JSON: `{"provider","model","reasoningEffort"?,"temperature"?,"maxTokens"?,"stop"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCallConfig {
    /// Provider route id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Reasoning effort id as the adapter declares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output-token limit (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

impl LlmCallConfig {
    /// `{provider, model}` with nothing else set.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
        }
    }
}

/// Marks which config fields an adapter materialised from its defaults (not chosen by the user).
/// JSON: `{"reasoningEffort"?:true,"maxTokens"?:true}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterDefaults {
    /// `reasoningEffort` came from the adapter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_effort: bool,
    /// `maxTokens` came from the adapter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_tokens: bool,
}

impl AdapterDefaults {
    /// True when no field is marked.
    pub fn is_empty(&self) -> bool {
        !self.reasoning_effort && !self.max_tokens
    }
}

/// The stable part of a request: config, system prompt and tools. Logged as `request/header`
/// when it changes. Canonical form drops an empty system prompt and an empty tool list.
/// JSON: `{"config":{…},"adapterDefaults"?:{…},"system"?:"…","tools"?:[…]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochHeader {
    /// The call configuration.
    pub config: LlmCallConfig,
    /// Adapter-materialised fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_defaults: Option<AdapterDefaults>,
    /// The rendered system prompt (absent when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tool schemas in request order (absent when empty). Kept as JSON so upstream logs whose
    /// `tools` hold foreign shapes still load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
}

impl EpochHeader {
    /// Builds the canonical header (empty system / empty tools dropped, empty defaults dropped).
    pub fn canonical(
        config: LlmCallConfig,
        adapter_defaults: AdapterDefaults,
        system: Option<String>,
        tools: &[ToolSchema],
    ) -> Self {
        Self {
            config,
            adapter_defaults: (!adapter_defaults.is_empty()).then_some(adapter_defaults),
            system: system.filter(|s| !s.is_empty()),
            tools: if tools.is_empty() {
                None
            } else {
                serde_json::to_value(tools).ok()
            },
        }
    }
}

/// Why a call is made, when it is not an agent step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallPurpose {
    /// Summarising for compaction.
    Compaction,
    /// Generating a session title.
    SessionTitle,
}

/// Everything one provider attempt needs. Built by the agent loop from the session log alone.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Provider route id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Reasoning effort id.
    pub reasoning_effort: Option<String>,
    /// History, oldest first (shared, immutable messages).
    pub messages: Vec<Arc<Message>>,
    /// Rendered system prompt.
    pub system: Option<String>,
    /// Tool schemas.
    pub tools: Vec<ToolSchema>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Output-token limit (tokens).
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    pub stop: Option<Vec<String>>,
    /// Cancellation: when fired, the adapter drops the connection and ends with `finish{aborted}`.
    pub signal: CancellationToken,
    /// The session making the call (for logs and provider-side attribution).
    pub session_id: Option<String>,
    /// Non-step purpose.
    pub purpose: Option<CallPurpose>,
}

impl GenerateOptions {
    /// Options for `config` over `messages`, with a fresh cancellation token.
    pub fn new(config: &LlmCallConfig, messages: Vec<Arc<Message>>) -> Self {
        Self {
            provider: config.provider.clone(),
            model: config.model.clone(),
            reasoning_effort: config.reasoning_effort.clone(),
            messages,
            system: None,
            tools: Vec::new(),
            temperature: config.temperature,
            max_tokens: config.max_tokens,
            stop: config.stop.clone(),
            signal: CancellationToken::new(),
            session_id: None,
            purpose: None,
        }
    }
}
