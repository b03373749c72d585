//! Provider configuration: the settings section `dsh-llm-deepseek`, routes, quirk flags, the
//! model catalog, timeouts and credential resolution.
//!
//! See docs/upstream/deepseek.md (DeepSeek facts the adapter relies on) and docs/upstream/llm.md
//! (failure code `MISSING_CREDENTIAL`; adapter contract item 5 for the idle watchdog).

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_llm::ModelInfo;
use serde::{Deserialize, Serialize};

use crate::errors::DeepSeekError;

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
        let url = reqwest::Url::parse(self.base_url.trim()).map_err(|e| bad(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad(format!(
                "the scheme is {:?}; expected http or https",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("it has no host".to_owned()));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad(
                "it has a query or a fragment (dsh appends /chat/completions to the \
                 base URL, so it must end with its path)"
                    .to_owned(),
            ));
        }
        Ok(())
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

/// `url` as dsh shows it in messages, errors and notices: a user-info part (`user:password@`
/// or `token@` before the host) becomes `user:***@` / `***@`; anything else is unchanged, even
/// when `url` does not parse. The request itself still uses the URL as configured (reqwest
/// sends its user info as HTTP Basic credentials). See docs/upstream/deepseek.md (Base URL).
pub fn redact_url(url: &str) -> String {
    match userinfo(url) {
        Some((start, end, shown)) => format!("{}{shown}{}", &url[..start], &url[end..]),
        None => url.to_owned(),
    }
}

/// The byte range of `url`'s user info (without the `@`) and its redacted form.
fn userinfo(url: &str) -> Option<(usize, usize, String)> {
    let start = url.find("://")? + 3;
    let authority_len = url[start..]
        .find(['/', '?', '#'])
        .unwrap_or(url.len() - start);
    let at = url[start..start + authority_len].rfind('@')? + start;
    let info = &url[start..at];
    let shown = match info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    Some((start, at, shown))
}

/// `text` with the user info of `base_url` (as configured) replaced by its redacted form, and
/// its password (when at least 4 bytes long) by `***` wherever else it appears.
pub(crate) fn scrub_userinfo(text: &str, base_url: &str) -> String {
    let Some((start, end, shown)) = userinfo(base_url) else {
        return text.to_owned();
    };
    let raw = &base_url[start..end];
    let mut out = text.replace(&format!("{raw}@"), &format!("{shown}@"));
    if let Some((_, password)) = raw.split_once(':')
        && password.len() >= 4
    {
        out = out.replace(password, "***");
    }
    out
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
/// every other entry adds an OpenAI-compatible route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ProviderTable(pub BTreeMap<String, ProviderSettings>);

/// One `[providers.<id>]` table (snake_case, every key optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderSettings {
    /// Base URL up to (not including) `/chat/completions`, e.g. `http://127.0.0.1:8080/v1`.
    /// Required for a new route; for `deepseek` it replaces the official endpoint.
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
    fn entry(&self) -> ModelEntry {
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
            if p.enabled == Some(false) {
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
/// ([`DeepSeekSettings::timeouts`]). JSON: `{"connect_ms"?,"first_byte_ms"?,"idle_ms"?}`.
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
