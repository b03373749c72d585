//! Route configuration shared by the provider plugins: the `[providers.<id>]` table shape (with
//! its wire `format`), model entries, timeouts and credential resolution.
//!
//! See docs/upstream/deepseek.md (Timeouts) and docs/upstream/anthropic.md (Routes).

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_llm::ModelInfo;
use serde::{Deserialize, Serialize};

/// The wire format a `[providers.<id>]` route speaks (`format = "openai" | "anthropic"`,
/// default `openai`): OpenAI-style `POST {base_url}/chat/completions` (plugin
/// `dsh-llm-deepseek`) or Anthropic Messages `POST {base_url}/v1/messages` (plugin
/// `dsh-llm-anthropic`). Each plugin serves only the routes of its format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderFormat {
    /// OpenAI-compatible chat completions (the default).
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// The id of the plugin that declares the `[providers]` settings section (one owner: the
/// OpenAI-format plugin, whose settings type holds every route's keys, `format` included).
/// Other provider plugins read the same section through this id, read-only.
pub const PROVIDERS_SECTION: &str = "dsh-llm-deepseek";

/// The `[providers]` table as every provider plugin reads it: route id → [`ProviderSettings`].
pub type ProviderTableMap = BTreeMap<String, ProviderSettings>;

/// One `[providers.<id>]` table (snake_case, every key optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderSettings {
    /// The wire format (`"openai"`, the default, or `"anthropic"`); see [`ProviderFormat`].
    pub format: Option<ProviderFormat>,
    /// Base URL up to (not including) `/chat/completions` (format `openai`, e.g.
    /// `http://127.0.0.1:8080/v1`) or `/v1/messages` (format `anthropic`, e.g.
    /// `https://api.anthropic.com`). Required for a new route; for a built-in route it replaces
    /// the built-in endpoint.
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key (omit for local servers).
    pub api_key_env: Option<String>,
    /// Models this route serves: ids, or catalog entries with limits.
    pub models: Vec<ModelSpec>,
    /// Human name.
    pub display_name: Option<String>,
    /// Send recorded reasoning back as `reasoning_content` on assistant tool-call messages
    /// (default false for a new route, true for `deepseek`): for gateways in front of a
    /// DeepSeek-style thinking model that needs it back.
    pub send_reasoning_content: Option<bool>,
    /// Deprecated: `true` is the default now (a new route never receives `reasoning_content`
    /// unless `send_reasoning_content = true`); `true` here overrides that.
    pub omit_reasoning_content: Option<bool>,
    /// Register the route at all (default true; `false` on `deepseek` drops the built-in route).
    pub enabled: Option<bool>,
    /// TCP/TLS connect timeout in milliseconds (default 10,000).
    pub connect_timeout_ms: Option<u64>,
    /// From sending the request to the response headers, in milliseconds (default 180,000).
    pub first_byte_timeout_ms: Option<u64>,
    /// Longest silence while the body streams, in milliseconds (default 300,000); SSE
    /// keep-alive comments count as data.
    pub stream_idle_timeout_ms: Option<u64>,
}

impl ProviderSettings {
    /// The format in force: `format`, else `openai`.
    pub fn format(&self) -> ProviderFormat {
        self.format.unwrap_or_default()
    }

    /// This table's timeout keys as route overrides.
    pub fn timeouts(&self) -> RouteTimeouts {
        RouteTimeouts {
            connect_ms: self.connect_timeout_ms,
            first_byte_ms: self.first_byte_timeout_ms,
            idle_ms: self.stream_idle_timeout_ms,
        }
    }
}

/// A model as listed under `[providers.<id>] models`: an id or a full catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    /// Just the id.
    Id(String),
    /// An entry with limits.
    Entry(ModelEntry),
}

impl ModelSpec {
    /// The entry this spec stands for (an id alone: no limits known).
    pub fn entry(&self) -> ModelEntry {
        match self {
            Self::Id(id) => ModelEntry {
                id: id.clone(),
                context_window: None,
                max_output_tokens: None,
                default_max_tokens: None,
                reasoning_efforts: Vec::new(),
            },
            Self::Entry(e) => e.clone(),
        }
    }
}

/// One catalog model. JSON: `{"id","context_window"?,"max_output_tokens"?,
/// "default_max_tokens"?,"reasoning_efforts"?}` (tokens).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Model id.
    pub id: String,
    /// Context window (tokens).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Largest output (tokens, reasoning included).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// `max_tokens` materialised when the call sets none (tokens).
    #[serde(default)]
    pub default_max_tokens: Option<u64>,
    /// Accepted reasoning efforts, first = default.
    #[serde(default)]
    pub reasoning_efforts: Vec<String>,
}

impl ModelEntry {
    /// As the shared [`ModelInfo`].
    pub fn to_info(&self) -> ModelInfo {
        ModelInfo {
            id: self.id.clone(),
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            default_max_tokens: self.default_max_tokens,
            reasoning_efforts: self.reasoning_efforts.clone(),
        }
    }
}

/// Timeouts in milliseconds. JSON: `{"connect_ms","first_byte_ms","idle_ms"}`.
///
/// The defaults every route starts from (see docs/upstream/deepseek.md, Timeouts): connect
/// 10 s, first byte (the response headers) 180 s, stream idle 300 s. An elapsed timeout is the
/// retryable failure `TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// TCP/TLS connect (default 10,000 ms).
    pub connect_ms: u64,
    /// From sending the request to the response headers (default 180,000 ms).
    pub first_byte_ms: u64,
    /// Idle watchdog between body reads (default 300,000 ms = 5 min); received bytes of any
    /// kind, SSE keep-alive comments included, count as activity.
    pub idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect_ms: 10_000,
            first_byte_ms: 180_000,
            idle_ms: 300_000,
        }
    }
}

/// One route's timeout overrides in milliseconds; `None` keeps the adapter-wide default
/// (the adapter's settings). JSON: `{"connect_ms"?,"first_byte_ms"?,"idle_ms"?}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteTimeouts {
    /// Connect timeout override (ms).
    pub connect_ms: Option<u64>,
    /// First-byte timeout override (ms).
    pub first_byte_ms: Option<u64>,
    /// Stream-idle timeout override (ms).
    pub idle_ms: Option<u64>,
}

impl RouteTimeouts {
    /// The timeouts in force: each override, else the field of `defaults`.
    pub fn resolve(&self, defaults: Timeouts) -> Timeouts {
        Timeouts {
            connect_ms: self.connect_ms.unwrap_or(defaults.connect_ms),
            first_byte_ms: self.first_byte_ms.unwrap_or(defaults.first_byte_ms),
            idle_ms: self.idle_ms.unwrap_or(defaults.idle_ms),
        }
    }
}

/// Resolves credential references (env var names) to secrets, at call time.
pub trait CredentialSource: Send + Sync + 'static {
    /// The secret named `name`; `None` when unset or empty.
    fn resolve(&self, name: &str) -> Option<String>;
}

/// Reads credentials from the process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvCredentials;

impl CredentialSource for EnvCredentials {
    fn resolve(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

/// A fixed map of credentials (tests, embedding).
#[derive(Clone, Default)]
pub struct StaticCredentials(BTreeMap<String, String>);

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl StaticCredentials {
    /// From `(name, secret)` pairs.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Arc<Self> {
        Arc::new(Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ))
    }
}

impl CredentialSource for StaticCredentials {
    fn resolve(&self, name: &str) -> Option<String> {
        self.0.get(name).filter(|v| !v.is_empty()).cloned()
    }
}
