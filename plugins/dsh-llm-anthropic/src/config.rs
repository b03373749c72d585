//! Route configuration: the built-in routes `anthropic` and `deepseek-anthropic`, user routes
//! with `format = "anthropic"` from the shared `[providers]` table, their model catalogs and
//! timeouts.
//!
//! See docs/upstream/anthropic.md (Routes).

use dsh_llm_http::{
    ModelEntry, ModelSpec, ProviderFormat, ProviderTableMap, RouteTimeouts, Timeouts,
    base_url_problem, redact_url,
};

use crate::error::AnthropicError;

/// Route id of Anthropic's own endpoint.
pub const ANTHROPIC_ROUTE: &str = "anthropic";
/// Default base URL of [`ANTHROPIC_ROUTE`] (the part before `/v1/messages`).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Environment variable holding Anthropic's API key.
pub const ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// Environment variable overriding [`ANTHROPIC_BASE_URL`] (as Anthropic's SDKs read it).
pub const ANTHROPIC_BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";
/// Route id of DeepSeek's Anthropic-compatible endpoint.
pub const DEEPSEEK_ANTHROPIC_ROUTE: &str = "deepseek-anthropic";
/// Base URL of [`DEEPSEEK_ANTHROPIC_ROUTE`].
pub const DEEPSEEK_ANTHROPIC_BASE_URL: &str = "https://api.deepseek.com/anthropic";
/// Environment variable holding DeepSeek's API key.
pub const DEEPSEEK_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The current Claude models of the built-in `anthropic` route (ids as the API takes them).
pub const CLAUDE_MODELS: [&str; 5] = [
    "claude-opus-4-5",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "claude-opus-4-1",
    "claude-sonnet-4-0",
];

/// One Anthropic-format route.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicRoute {
    /// Provider id the route answers to.
    pub id: String,
    /// Human name.
    pub display_name: String,
    /// Base URL, the part before `/v1/messages`.
    pub base_url: String,
    /// Env var holding the API key (sent as `x-api-key`); `None` = no key header.
    pub api_key_env: Option<String>,
    /// Advisory model catalog (context window, output limit, reasoning efforts).
    pub models: Vec<ModelEntry>,
    /// Per-route timeout overrides.
    pub timeouts: RouteTimeouts,
}

impl AnthropicRoute {
    /// `{base_url}/v1/messages`.
    pub fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.base_url.trim_end_matches('/'))
    }

    /// Catalog entry of `model`, if listed.
    pub fn model(&self, model: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == model)
    }

    /// Checks the base URL (absolute http(s), no query or fragment) and that no timeout in
    /// force is 0.
    ///
    /// # Errors
    /// [`AnthropicError::InvalidBaseUrl`] or [`AnthropicError::InvalidSettings`].
    pub fn validate(&self, defaults: Timeouts) -> Result<(), AnthropicError> {
        if let Some(reason) = base_url_problem(&self.base_url, "/v1/messages") {
            return Err(AnthropicError::InvalidBaseUrl {
                route: self.id.clone(),
                url: redact_url(&self.base_url),
                reason,
            });
        }
        let t = self.timeouts.resolve(defaults);
        for (v, key) in [
            (t.connect_ms, "connect_timeout_ms"),
            (t.first_byte_ms, "first_byte_timeout_ms"),
            (t.idle_ms, "stream_idle_timeout_ms"),
        ] {
            if v == 0 {
                return Err(AnthropicError::InvalidSettings(format!(
                    "[providers.{}] {key} must be at least 1 (milliseconds); 0 would time out \
                     every request at once",
                    self.id
                )));
            }
        }
        Ok(())
    }
}

/// The Claude catalog: 200,000-token windows; output limits 64,000 (Opus 4.5, Sonnet 4.5,
/// Haiku 4.5, Sonnet 4), 32,000 (Opus 4.1); default `max_tokens` 32,000; efforts `medium`
/// (default, an 8,192-token thinking budget), `low`, `high`, `off`.
pub fn claude_catalog() -> Vec<ModelEntry> {
    CLAUDE_MODELS
        .iter()
        .map(|id| ModelEntry {
            id: (*id).to_owned(),
            context_window: Some(200_000),
            max_output_tokens: Some(if *id == "claude-opus-4-1" {
                32_000
            } else {
                64_000
            }),
            default_max_tokens: Some(32_000),
            reasoning_efforts: ["medium", "low", "high", "off"].map(str::to_owned).to_vec(),
        })
        .collect()
}

/// DeepSeek's models on its Anthropic endpoint: `deepseek-v4-flash`, `deepseek-v4-pro`
/// (1,048,576-token window, 393,216 output, default `max_tokens` 256,000), efforts `high`
/// (default), `max`, `off`.
pub fn deepseek_anthropic_catalog() -> Vec<ModelEntry> {
    ["deepseek-v4-flash", "deepseek-v4-pro"]
        .into_iter()
        .map(|id| ModelEntry {
            id: id.to_owned(),
            context_window: Some(1_048_576),
            max_output_tokens: Some(393_216),
            default_max_tokens: Some(256_000),
            reasoning_efforts: ["high", "max", "off"].map(str::to_owned).to_vec(),
        })
        .collect()
}

/// A `models` entry of a `[providers.<id>]` table, with what it leaves out taken from the
/// built-in catalogs ([`claude_catalog`], [`deepseek_anthropic_catalog`]) when they know its
/// id: a Claude model listed on a gateway route gets the thinking defaults (efforts, default
/// `max_tokens`) and limits of the built-in `anthropic` route unless the entry sets them.
pub fn listed_entry(spec: &ModelSpec) -> ModelEntry {
    let mut e = spec.entry();
    let known = claude_catalog()
        .into_iter()
        .chain(deepseek_anthropic_catalog())
        .find(|k| k.id == e.id);
    if let Some(k) = known {
        e.context_window = e.context_window.or(k.context_window);
        e.max_output_tokens = e.max_output_tokens.or(k.max_output_tokens);
        e.default_max_tokens = e.default_max_tokens.or(k.default_max_tokens);
        if e.reasoning_efforts.is_empty() {
            e.reasoning_efforts = k.reasoning_efforts;
        }
    }
    e
}

/// Every Anthropic-format route and the adapter-wide timeouts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AnthropicSettings {
    /// The routes, built-in first.
    pub routes: Vec<AnthropicRoute>,
    /// Defaults of every route's timeouts.
    pub timeouts: Timeouts,
}

impl AnthropicSettings {
    /// One route `id` at `base_url` with no key, the Claude catalog and default timeouts (tests
    /// and embedding).
    pub fn single(id: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            routes: vec![AnthropicRoute {
                id: id.into(),
                display_name: "Anthropic".to_owned(),
                base_url: base_url.into(),
                api_key_env: None,
                models: claude_catalog(),
                timeouts: RouteTimeouts::default(),
            }],
            timeouts: Timeouts::default(),
        }
    }

    /// The routes the `[providers]` table describes: the built-in `anthropic` (base URL
    /// `base_url_env` when set and non-empty — the value of `ANTHROPIC_BASE_URL` — else
    /// [`ANTHROPIC_BASE_URL`]; key env `ANTHROPIC_API_KEY`) and `deepseek-anthropic`, each
    /// tuned (or dropped with `enabled = false`) by a table of its id, then every other table
    /// with `format = "anthropic"`. A table's `models` replace a built-in catalog.
    pub fn from_table(table: &ProviderTableMap, base_url_env: Option<String>) -> Self {
        let mut routes = vec![
            AnthropicRoute {
                id: ANTHROPIC_ROUTE.to_owned(),
                display_name: "Anthropic".to_owned(),
                base_url: base_url_env
                    .filter(|u| !u.trim().is_empty())
                    .unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned()),
                api_key_env: Some(ANTHROPIC_KEY_ENV.to_owned()),
                models: claude_catalog(),
                timeouts: RouteTimeouts::default(),
            },
            AnthropicRoute {
                id: DEEPSEEK_ANTHROPIC_ROUTE.to_owned(),
                display_name: "DeepSeek (Anthropic format)".to_owned(),
                base_url: DEEPSEEK_ANTHROPIC_BASE_URL.to_owned(),
                api_key_env: Some(DEEPSEEK_KEY_ENV.to_owned()),
                models: deepseek_anthropic_catalog(),
                timeouts: RouteTimeouts::default(),
            },
        ];
        let mut dropped = Vec::new();
        for (id, p) in table {
            let builtin = routes.iter_mut().find(|r| &r.id == id);
            if let Some(r) = builtin {
                if p.enabled == Some(false) {
                    dropped.push(id.clone());
                    continue;
                }
                if let Some(url) = &p.base_url {
                    r.base_url.clone_from(url);
                }
                if let Some(env) = &p.api_key_env {
                    r.api_key_env = Some(env.clone());
                }
                if let Some(name) = &p.display_name {
                    r.display_name.clone_from(name);
                }
                if !p.models.is_empty() {
                    r.models = p.models.iter().map(listed_entry).collect();
                }
                r.timeouts = p.timeouts();
                continue;
            }
            if p.format() != ProviderFormat::Anthropic || p.enabled == Some(false) {
                continue;
            }
            routes.push(AnthropicRoute {
                id: id.clone(),
                display_name: p.display_name.clone().unwrap_or_else(|| id.clone()),
                base_url: p.base_url.clone().unwrap_or_default(),
                api_key_env: p.api_key_env.clone(),
                models: p.models.iter().map(listed_entry).collect(),
                timeouts: p.timeouts(),
            });
        }
        routes.retain(|r| !dropped.contains(&r.id));
        Self {
            routes,
            timeouts: Timeouts::default(),
        }
    }
}
