//! Provider configuration: the settings section `dsh-llm-deepseek`, routes, quirk flags, the
//! model catalog, timeouts and credential resolution.
//!
//! See docs/upstream/deepseek.md (DeepSeek facts the adapter relies on) and docs/upstream/llm.md
//! (failure code `MISSING_CREDENTIAL`; adapter contract item 5 for the idle watchdog).

use std::collections::BTreeMap;

use dsh_llm_http::{
    ModelEntry, ModelSpec, ProviderFormat, ProviderSettings, RouteTimeouts, Timeouts,
    base_url_problem, redact_url,
};
use serde::{Deserialize, Serialize};

use crate::errors::DeepSeekError;

/// Route ids of the built-in Anthropic-format routes (served by `dsh-llm-anthropic`): a
/// `[providers.<id>]` table with one of these ids tunes that route and is not an
/// OpenAI-compatible route of this plugin.
pub const ANTHROPIC_BUILTIN_ROUTES: [&str; 2] = ["anthropic", "deepseek-anthropic"];

/// Route id of the official DeepSeek endpoint.
pub const DEEPSEEK_ROUTE: &str = "deepseek";
/// Alias the official route also answers to (the upstream provider id in session logs).
pub const DEEPSEEK_OFFICIAL_ALIAS: &str = "deepseek-official";
/// Default base URL of the official route.
pub const DEEPSEEK_BASE_URL: &str = "https://api.deepseek.com";
/// Environment variable holding the official route's API key.
pub const DEEPSEEK_KEY_ENV: &str = "DEEPSEEK_API_KEY";

/// The whole settings section `dsh-llm-deepseek` (TOML/JSON, snake_case, every field defaulted).
///
/// JSON: `{"official":{…},"routes":[{…}],"timeouts":{…}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeepSeekSettings {
    /// The official DeepSeek route (`deepseek`, alias `deepseek-official`).
    pub official: OfficialRoute,
    /// User-defined OpenAI-compatible routes.
    pub routes: Vec<RouteConfig>,
    /// Connect / first-byte / idle timeouts.
    pub timeouts: Timeouts,
}

impl DeepSeekSettings {
    /// Settings whose official route points at `base_url` (e.g. a replay server) and reads its
    /// key from env `DEEPSEEK_API_KEY` (use [`crate::StaticCredentials`] in tests).
    pub fn official_at(base_url: impl Into<String>) -> Self {
        let mut s = Self::default();
        s.official.base_url = base_url.into();
        s
    }

    /// Every configured route, official first (when enabled), then the user routes in order.
    pub fn all_routes(&self) -> Vec<RouteConfig> {
        let mut v = Vec::new();
        if self.official.enabled {
            v.push(self.official.to_route());
        }
        v.extend(self.routes.iter().cloned());
        v
    }
}

/// The official route's overridable fields.
/// JSON: `{"enabled","base_url","api_key_env","timeouts"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OfficialRoute {
    /// Register the route at all (default true).
    pub enabled: bool,
    /// Base URL (default `https://api.deepseek.com`).
    pub base_url: String,
    /// Env var holding the key (default `DEEPSEEK_API_KEY`).
    pub api_key_env: String,
    /// Per-route timeout overrides (unset fields use [`DeepSeekSettings::timeouts`]).
    pub timeouts: RouteTimeouts,
}

impl Default for OfficialRoute {
    fn default() -> Self {
        Self {
            enabled: true,
            base_url: DEEPSEEK_BASE_URL.to_owned(),
            api_key_env: DEEPSEEK_KEY_ENV.to_owned(),
            timeouts: RouteTimeouts::default(),
        }
    }
}

impl OfficialRoute {
    /// The route this expands to: id `deepseek`, alias `deepseek-official`, the V4 catalog,
    /// [`Quirks::deepseek`].
    pub fn to_route(&self) -> RouteConfig {
        RouteConfig {
            id: DEEPSEEK_ROUTE.to_owned(),
            aliases: vec![DEEPSEEK_OFFICIAL_ALIAS.to_owned()],
            display_name: Some("DeepSeek".to_owned()),
            base_url: self.base_url.clone(),
            api_key_env: Some(self.api_key_env.clone()),
            models: deepseek_catalog(),
            quirks: Quirks::deepseek(),
            timeouts: self.timeouts,
        }
    }
}

/// One OpenAI-compatible route.
///
/// JSON: `{"id","aliases"?,"display_name"?,"base_url","api_key_env"?,"models"?,"quirks"?,
/// "timeouts"?}`.
/// `base_url` is the prefix before `/chat/completions` (include `/v1` when the server wants it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Provider id the route answers to.
    pub id: String,
    /// Further provider ids it answers to.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Human name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Base URL (no trailing `/chat/completions`).
    pub base_url: String,
    /// Env var holding the API key; `None` = no `Authorization` header (local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Advisory model catalog.
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    /// Wire quirks.
    #[serde(default)]
    pub quirks: Quirks,
    /// Per-route timeout overrides (unset fields use [`DeepSeekSettings::timeouts`]).
    #[serde(default)]
    pub timeouts: RouteTimeouts,
}

impl RouteConfig {
    /// A plain OpenAI-compatible route with default quirks and no key.
    pub fn openai_compatible(id: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            aliases: Vec::new(),
            display_name: None,
            base_url: base_url.into(),
            api_key_env: None,
            models: Vec::new(),
            quirks: Quirks::default(),
            timeouts: RouteTimeouts::default(),
        }
    }

    /// Whether the route answers to `provider` (its id or an alias).
    pub fn answers_to(&self, provider: &str) -> bool {
        self.id == provider || self.aliases.iter().any(|a| a == provider)
    }

    /// Catalog entry of `model`, if listed.
    pub fn model(&self, model: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == model)
    }

    /// `{base_url}/{path}` with exactly one slash between.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path)
    }

    /// Checks that `base_url` is an absolute `http://` or `https://` URL with a host, so a
    /// typo is a configuration error at start-up instead of a transport failure per request.
    ///
    /// # Errors
    /// [`DeepSeekError::InvalidBaseUrl`] naming the route, the URL and what is wrong.
    pub fn validate_base_url(&self) -> Result<(), DeepSeekError> {
        let bad = |reason: String| DeepSeekError::InvalidBaseUrl {
            route: self.id.clone(),
            url: redact_url(&self.base_url),
            reason,
        };
        match base_url_problem(&self.base_url, "/chat/completions") {
            Some(reason) => Err(bad(reason)),
            None => Ok(()),
        }
    }

    /// Checks that no timeout in force for this route (its overrides over `defaults`) is 0,
    /// which would fail every attempt at once.
    ///
    /// # Errors
    /// [`DeepSeekError::InvalidSettings`] naming the key: `[providers.<id>] connect_timeout_ms`
    /// / `first_byte_timeout_ms` / `stream_idle_timeout_ms` for a route override, else
    /// `timeouts.connect_ms` / `first_byte_ms` / `idle_ms` of [`DeepSeekSettings::timeouts`].
    pub fn validate_timeouts(&self, defaults: Timeouts) -> Result<(), DeepSeekError> {
        let o = self.timeouts;
        let keys = [
            (
                o.connect_ms,
                defaults.connect_ms,
                "connect_timeout_ms",
                "connect_ms",
            ),
            (
                o.first_byte_ms,
                defaults.first_byte_ms,
                "first_byte_timeout_ms",
                "first_byte_ms",
            ),
            (
                o.idle_ms,
                defaults.idle_ms,
                "stream_idle_timeout_ms",
                "idle_ms",
            ),
        ];
        for (over, default, route_key, default_key) in keys {
            let key = match over {
                Some(0) => format!("[providers.{}] {route_key}", self.id),
                None if default == 0 => format!("timeouts.{default_key}"),
                _ => continue,
            };
            return Err(DeepSeekError::InvalidSettings(format!(
                "{key} must be at least 1 (milliseconds); 0 would time out every request at once"
            )));
        }
        Ok(())
    }
}

/// Per-route wire quirks. JSON (snake_case, all defaulted): see the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quirks {
    /// Send the system prompt with role `system` (default true); false ⇒ role `developer`.
    pub no_developer_role: bool,
    /// Replay recorded reasoning as `reasoning_content` on assistant tool-call messages
    /// (default false: generic OpenAI-compatible servers do not take it; true on the DeepSeek
    /// route, whose thinking mode needs it back). See docs/upstream/deepseek.md (BC-04).
    pub send_reasoning_content: bool,
    /// Send `reasoning_content: ""` on an assistant tool-call message that has no recorded
    /// reasoning (DeepSeek thinking mode answers 400 without it).
    pub empty_reasoning_for_tool_calls: bool,
    /// Send DeepSeek's `thinking` / `reasoning_effort` fields (and omit `temperature` while
    /// thinking is enabled).
    pub deepseek_thinking: bool,
    /// Send `stream_options.include_usage: true` (default true).
    pub include_usage: bool,
}

impl Default for Quirks {
    fn default() -> Self {
        Self {
            no_developer_role: true,
            send_reasoning_content: false,
            empty_reasoning_for_tool_calls: false,
            deepseek_thinking: false,
            include_usage: true,
        }
    }
}

impl Quirks {
    /// The official DeepSeek endpoint's quirks.
    pub fn deepseek() -> Self {
        Self {
            send_reasoning_content: true,
            empty_reasoning_for_tool_calls: true,
            deepseek_thinking: true,
            ..Self::default()
        }
    }
}

/// The plugin's settings section as a user writes it: the `[providers]` table, route id →
/// [`ProviderSettings`]. The entry `deepseek` (or `deepseek-official`) tunes the built-in route;
/// every other entry adds an OpenAI-compatible route, except those with `format = "anthropic"`
/// and the built-in Anthropic routes ([`ANTHROPIC_BUILTIN_ROUTES`]), which the Anthropic plugin
/// serves from the same table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ProviderTable(pub BTreeMap<String, ProviderSettings>);

impl ProviderTable {
    /// The adapter settings these tables describe. `base_url_env` is the value of
    /// `DEEPSEEK_BASE_URL` (when set and not empty it replaces the official base URL unless the
    /// `deepseek` table sets one).
    pub fn to_settings(&self, base_url_env: Option<String>) -> DeepSeekSettings {
        let mut settings = DeepSeekSettings::default();
        if let Some(url) = base_url_env.filter(|u| !u.is_empty()) {
            settings.official.base_url = url;
        }
        for (id, p) in &self.0 {
            if id == DEEPSEEK_ROUTE || id == DEEPSEEK_OFFICIAL_ALIAS {
                if let Some(url) = &p.base_url {
                    settings.official.base_url.clone_from(url);
                }
                if let Some(env) = &p.api_key_env {
                    settings.official.api_key_env.clone_from(env);
                }
                if let Some(enabled) = p.enabled {
                    settings.official.enabled = enabled;
                }
                settings.official.timeouts = p.timeouts();
                continue;
            }
            if p.enabled == Some(false)
                || p.format() == ProviderFormat::Anthropic
                || ANTHROPIC_BUILTIN_ROUTES.contains(&id.as_str())
            {
                continue;
            }
            let mut route =
                RouteConfig::openai_compatible(id, p.base_url.clone().unwrap_or_default());
            route.display_name.clone_from(&p.display_name);
            route.api_key_env.clone_from(&p.api_key_env);
            route.models = p.models.iter().map(ModelSpec::entry).collect();
            route.quirks.send_reasoning_content =
                p.send_reasoning_content == Some(true) && p.omit_reasoning_content != Some(true);
            route.timeouts = p.timeouts();
            settings.routes.push(route);
        }
        settings
    }
}

/// The DeepSeek V4 catalog: `deepseek-v4-flash` and `deepseek-v4-pro`, 1,048,576-token context,
/// 393,216 max output (reasoning included), default `max_tokens` 256,000 (as upstream session
/// logs show), efforts `high` (default, thinking on), `max`, `off` (thinking disabled).
pub fn deepseek_catalog() -> Vec<ModelEntry> {
    ["deepseek-v4-flash", "deepseek-v4-pro"]
        .into_iter()
        .map(|id| ModelEntry {
            id: id.to_owned(),
            context_window: Some(1_048_576),
            max_output_tokens: Some(393_216),
            default_max_tokens: Some(256_000),
            reasoning_efforts: vec!["high".to_owned(), "max".to_owned(), "off".to_owned()],
        })
        .collect()
}
