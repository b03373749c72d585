//! Model information: the context window and output limit of each model, from a built-in
//! catalog of DeepSeek's current models, what an adapter reports for its routes, and the
//! user's per-model overrides (`[models."<model id>"] context_window = N,
//! max_output_tokens = N`, tokens).
//!
//! See docs/upstream/compaction.md (Model information): automatic compaction needs the
//! context window of the model in force; with none known it stays off.
//!
//! Precedence, field by field: the user's override, then the adapter's [`ModelInfo`], then the
//! built-in catalog ([`ModelCatalog::resolve`]).
//!
//! Prices: the catalog also knows, per model, whether it thinks and its prices in USD per
//! million tokens (input, cache hit, cache write, output) with the date they were published,
//! for DeepSeek's V4 models and Anthropic's current Claude models ([`ModelCatalog::pricing`];
//! overridable as `[models."<id>"] input_price = 0.14, cached_input_price = 0.0028,
//! cache_write_price = …, output_price = 0.28, thinks = true, prices_published =
//! "2026-04-24"`). [`ModelPricing::cost_usd`] prices a [`crate::TokenUsage`]; a model without
//! prices has no cost (`None`, never 0). See docs/upstream/llm.md (Usage and cost).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::adapter::ModelInfo;

/// Context window of `deepseek-v4-flash` and `deepseek-v4-pro` (tokens): 1M.
pub const DEEPSEEK_V4_CONTEXT_WINDOW: u64 = 1_048_576;
/// Largest output of the DeepSeek V4 models (tokens, reasoning included): 384K.
pub const DEEPSEEK_V4_MAX_OUTPUT_TOKENS: u64 = 393_216;
/// The built-in DeepSeek model ids.
pub const DEEPSEEK_V4_MODELS: [&str; 2] = ["deepseek-v4-flash", "deepseek-v4-pro"];

/// The limits of one model (tokens; `None` = unknown). JSON
/// `{"context_window"?, "max_output_tokens"?}`; in a settings file a `[models."<id>"]` table
/// (unknown keys rejected).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(default, deny_unknown_fields)]
pub struct ModelLimits {
    /// Maximum request + response size (tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Largest output (tokens, reasoning included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    // Pricing and thinking (see [`ModelPricing`]); in the table so one `[models."<id>"]`
    // overrides any of them.
    /// Whether the model produces reasoning (thinking) output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinks: Option<bool>,
    /// USD per million uncached input tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_price: Option<UsdPerMTok>,
    /// USD per million input tokens served from the prompt cache (cache hits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_price: Option<UsdPerMTok>,
    /// USD per million input tokens written to the prompt cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_price: Option<UsdPerMTok>,
    /// USD per million output tokens (reasoning included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_price: Option<UsdPerMTok>,
    /// The date the prices were published (`"YYYY-MM-DD"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices_published: Option<PriceDate>,
}

impl ModelLimits {
    /// Limits with both fields known.
    pub fn new(context_window: u64, max_output_tokens: u64) -> Self {
        Self {
            context_window: Some(context_window),
            max_output_tokens: Some(max_output_tokens),
            ..Self::default()
        }
    }

    /// `self` with every field `over` knows replaced by `over`'s.
    pub fn overlaid(self, over: ModelLimits) -> Self {
        Self {
            context_window: over.context_window.or(self.context_window),
            max_output_tokens: over.max_output_tokens.or(self.max_output_tokens),
            thinks: over.thinks.or(self.thinks),
            input_price: over.input_price.or(self.input_price),
            cached_input_price: over.cached_input_price.or(self.cached_input_price),
            cache_write_price: over.cache_write_price.or(self.cache_write_price),
            output_price: over.output_price.or(self.output_price),
            prices_published: over.prices_published.or(self.prices_published),
        }
    }

    /// The pricing part of these fields.
    pub fn pricing(&self) -> ModelPricing {
        ModelPricing {
            thinks: self.thinks,
            input_price: self.input_price,
            cached_input_price: self.cached_input_price,
            cache_write_price: self.cache_write_price,
            output_price: self.output_price,
            prices_published: self.prices_published,
        }
    }
}

impl From<&ModelInfo> for ModelLimits {
    fn from(info: &ModelInfo) -> Self {
        Self {
            context_window: info.context_window,
            max_output_tokens: info.max_output_tokens,
            ..Self::default()
        }
    }
}

/// The `models` settings table: model id → override. TOML
/// `[models."deepseek-v4-flash"] context_window = 16000`.
pub type ModelsTable = BTreeMap<String, ModelLimits>;

/// The llm seam's settings: the top-level `models` key (declared by the `dsh-llm` plugin; its
/// table becomes the overrides of [`crate::LlmService::catalog`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// Per-model limit overrides: `[models."<model id>"] context_window = N`,
    /// `max_output_tokens = N` (tokens, each at least 1).
    pub models: ModelsTable,
}

/// An invalid `[models."<id>"]` table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum ModelSettingsError {
    /// A limit is 0, or the output limit exceeds the context window. Code
    /// `INVALID_MODEL_SETTINGS`.
    #[error("models.\"{model}\": {message}")]
    #[code("INVALID_MODEL_SETTINGS")]
    Invalid {
        /// The model id.
        model: String,
        /// What is wrong.
        message: String,
    },
}

/// A price in USD per million tokens, held exactly as millionths of a dollar per million tokens
/// (= picodollars per token), so costs add up without rounding. JSON/TOML: a non-negative
/// number (`0.14`); at most six decimals are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsdPerMTok(u64);

impl UsdPerMTok {
    /// From micro-dollars per million tokens (`140_000` = $0.14 / MTok).
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros)
    }

    /// Micro-dollars per million tokens, i.e. picodollars per token.
    pub const fn micros(self) -> u64 {
        self.0
    }

    /// The price in USD per million tokens.
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// From USD per million tokens; `None` for a negative, non-finite or absurd (> $1e9) value.
    pub fn from_usd(usd: f64) -> Option<Self> {
        (usd.is_finite() && (0.0..=1e9).contains(&usd)).then(|| Self((usd * 1e6).round() as u64))
    }
}

impl Serialize for UsdPerMTok {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.usd())
    }
}

impl<'de> Deserialize<'de> for UsdPerMTok {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let usd = f64::deserialize(d)?;
        Self::from_usd(usd).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "a price must be a non-negative number of USD per million tokens, got {usd}"
            ))
        })
    }
}

impl schemars::JsonSchema for UsdPerMTok {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UsdPerMTok".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "number",
            "minimum": 0,
            "description": "USD per million tokens"
        })
    }
}

impl schemars::JsonSchema for PriceDate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PriceDate".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "date",
            "description": "YYYY-MM-DD"
        })
    }
}

/// A calendar date `YYYY-MM-DD` (when a price list was published). JSON/TOML: the string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PriceDate {
    /// Year.
    pub year: u16,
    /// Month, 1..=12.
    pub month: u8,
    /// Day, 1..=31.
    pub day: u8,
}

impl PriceDate {
    /// Parses `YYYY-MM-DD`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.split('-');
        let (y, m, d) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return None;
        }
        let date = Self {
            year: y.parse().ok()?,
            month: m.parse().ok()?,
            day: d.parse().ok()?,
        };
        ((1..=12).contains(&date.month) && (1..=31).contains(&date.day)).then_some(date)
    }
}

impl std::fmt::Display for PriceDate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

impl Serialize for PriceDate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PriceDate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("expected a date YYYY-MM-DD, got {s:?}"))
        })
    }
}

/// Whether a model thinks, and its prices (see the module docs). Every field may be unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelPricing {
    /// The model produces reasoning output.
    pub thinks: Option<bool>,
    /// USD / MTok, uncached input.
    pub input_price: Option<UsdPerMTok>,
    /// USD / MTok, cache hits.
    pub cached_input_price: Option<UsdPerMTok>,
    /// USD / MTok, cache writes.
    pub cache_write_price: Option<UsdPerMTok>,
    /// USD / MTok, output.
    pub output_price: Option<UsdPerMTok>,
    /// When the prices were published.
    pub prices_published: Option<PriceDate>,
}

impl ModelPricing {
    /// `self` with every field `over` knows replaced by `over`'s.
    pub fn overlaid(self, over: ModelPricing) -> Self {
        Self {
            thinks: over.thinks.or(self.thinks),
            input_price: over.input_price.or(self.input_price),
            cached_input_price: over.cached_input_price.or(self.cached_input_price),
            cache_write_price: over.cache_write_price.or(self.cache_write_price),
            output_price: over.output_price.or(self.output_price),
            prices_published: over.prices_published.or(self.prices_published),
        }
    }

    /// The cost of `usage` in picodollars: input × input price + cache reads × cache-hit price +
    /// cache writes × cache-write price + output × output price (each price in micro-USD per
    /// MTok = picodollars per token). A missing cache-hit or cache-write price is charged at the
    /// input price. `None` when the input or output price is unknown.
    pub fn cost_picos(&self, usage: &crate::TokenUsage) -> Option<u128> {
        let input = self.input_price?.micros();
        let output = self.output_price?.micros();
        let cached = self.cached_input_price.map_or(input, UsdPerMTok::micros);
        let write = self.cache_write_price.map_or(input, UsdPerMTok::micros);
        let t = |n: u64, p: u64| u128::from(n) * u128::from(p);
        Some(
            t(usage.input_tokens, input)
                + t(usage.cache_read_tokens.unwrap_or(0), cached)
                + t(usage.cache_write_tokens.unwrap_or(0), write)
                + t(usage.output_tokens, output),
        )
    }

    /// [`ModelPricing::cost_picos`] in USD.
    pub fn cost_usd(&self, usage: &crate::TokenUsage) -> Option<f64> {
        self.cost_picos(usage).map(picos_to_usd)
    }
}

/// Picodollars as USD (`140_000_000_000` ⇒ `0.14`).
pub fn picos_to_usd(picos: u128) -> f64 {
    picos as f64 / 1e12
}

/// The Claude models of the built-in catalog: `(id, context window, max output)` in tokens.
pub const CLAUDE_LIMITS: [(&str, u64, u64); 5] = [
    ("claude-opus-4-5", 200_000, 64_000),
    ("claude-sonnet-4-5", 200_000, 64_000),
    ("claude-haiku-4-5", 200_000, 64_000),
    ("claude-opus-4-1", 200_000, 32_000),
    ("claude-sonnet-4-0", 200_000, 64_000),
];

/// One row of [`BUILTIN_PRICES`].
pub type BuiltinPrice = (&'static str, bool, u64, u64, Option<u64>, u64, &'static str);

/// The built-in prices: `(model, thinks, input, cache hit, cache write, output, published)`,
/// prices in micro-USD per million tokens. DeepSeek V4 (its price page; no separate
/// cache-write charge): flash $0.14 / $0.0028 hit / $0.28 (2026-04-24), pro $0.435 / $0.003625
/// / $0.87 (the permanent price from 2026-05-31). Claude (Anthropic's price list at each model's
/// release; cache hit 0.1×, 5-minute cache write 1.25× the input price): Opus 4.5 $5 / $25,
/// Sonnet 4.5 $3 / $15, Haiku 4.5 $1 / $5, Opus 4.1 $15 / $75, Sonnet 4 $3 / $15.
pub const BUILTIN_PRICES: [BuiltinPrice; 7] = [
    (
        "deepseek-v4-flash",
        true,
        140_000,
        2_800,
        None,
        280_000,
        "2026-04-24",
    ),
    (
        "deepseek-v4-pro",
        true,
        435_000,
        3_625,
        None,
        870_000,
        "2026-05-31",
    ),
    (
        "claude-opus-4-5",
        true,
        5_000_000,
        500_000,
        Some(6_250_000),
        25_000_000,
        "2025-11-24",
    ),
    (
        "claude-sonnet-4-5",
        true,
        3_000_000,
        300_000,
        Some(3_750_000),
        15_000_000,
        "2025-09-29",
    ),
    (
        "claude-haiku-4-5",
        true,
        1_000_000,
        100_000,
        Some(1_250_000),
        5_000_000,
        "2025-10-15",
    ),
    (
        "claude-opus-4-1",
        true,
        15_000_000,
        1_500_000,
        Some(18_750_000),
        75_000_000,
        "2025-08-05",
    ),
    (
        "claude-sonnet-4-0",
        true,
        3_000_000,
        300_000,
        Some(3_750_000),
        15_000_000,
        "2025-05-22",
    ),
];

fn builtin_pricing() -> BTreeMap<String, ModelPricing> {
    BUILTIN_PRICES
        .iter()
        .map(|(id, thinks, input, hit, write, output, date)| {
            (
                (*id).to_owned(),
                ModelPricing {
                    thinks: Some(*thinks),
                    input_price: Some(UsdPerMTok(*input)),
                    cached_input_price: Some(UsdPerMTok(*hit)),
                    cache_write_price: write.map(UsdPerMTok),
                    output_price: Some(UsdPerMTok(*output)),
                    prices_published: PriceDate::parse(date),
                },
            )
        })
        .collect()
}

/// The model catalog: built-in entries plus user overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCatalog {
    builtin: BTreeMap<String, ModelLimits>,
    overrides: ModelsTable,
    /// Built-in pricing and thinking facts (kept apart from the limits, so
    /// [`ModelCatalog::resolve`] reports limits only unless the user overrides more).
    builtin_pricing: BTreeMap<String, ModelPricing>,
}

impl ModelCatalog {
    /// No entries.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in catalog: `deepseek-v4-flash` and `deepseek-v4-pro`, each
    /// [`DEEPSEEK_V4_CONTEXT_WINDOW`] / [`DEEPSEEK_V4_MAX_OUTPUT_TOKENS`]; the Claude models of
    /// [`CLAUDE_LIMITS`]; and the prices of [`BUILTIN_PRICES`].
    pub fn builtin() -> Self {
        let builtin = DEEPSEEK_V4_MODELS
            .iter()
            .map(|id| {
                (
                    (*id).to_owned(),
                    ModelLimits::new(DEEPSEEK_V4_CONTEXT_WINDOW, DEEPSEEK_V4_MAX_OUTPUT_TOKENS),
                )
            })
            .collect();
        let mut c = Self {
            builtin,
            overrides: ModelsTable::new(),
            builtin_pricing: BTreeMap::new(),
        };
        for (id, window, output) in CLAUDE_LIMITS {
            c.builtin
                .insert(id.to_owned(), ModelLimits::new(window, output));
        }
        c.builtin_pricing = builtin_pricing();
        c
    }

    /// The pricing and thinking facts of `model`: the built-in entry overlaid field by field by
    /// the user's `[models."<id>"]` override. A dated snapshot id takes its alias's built-in
    /// prices (Anthropic prices a snapshot as its alias): `claude-sonnet-4-5-20250929` ⇒
    /// `claude-sonnet-4-5`, `claude-sonnet-4-20250514` and `claude-sonnet-4` ⇒
    /// `claude-sonnet-4-0`; an override is looked up by the id as written.
    pub fn pricing(&self, model: &str) -> ModelPricing {
        let base = self
            .builtin_pricing
            .get(model)
            .or_else(|| {
                let (head, tail) = model.rsplit_once('-')?;
                let undated = if tail.len() == 8 && tail.bytes().all(|b| b.is_ascii_digit()) {
                    head
                } else {
                    model
                };
                self.builtin_pricing
                    .get(undated)
                    .or_else(|| self.builtin_pricing.get(&format!("{undated}-0")))
            })
            .copied()
            .unwrap_or_default();
        match self.overrides.get(model) {
            Some(over) => base.overlaid(over.pricing()),
            None => base,
        }
    }

    /// Adds or replaces a built-in entry.
    pub fn insert(&mut self, model: impl Into<String>, limits: ModelLimits) {
        self.builtin.insert(model.into(), limits);
    }

    /// The catalog with the user's overrides merged in (a later call's entries replace an
    /// earlier one's field by field).
    ///
    /// # Errors
    /// [`ModelSettingsError::Invalid`] when a limit is 0 or the override itself sets a
    /// `max_output_tokens` above its `context_window`.
    pub fn with_overrides(mut self, table: &ModelsTable) -> Result<Self, ModelSettingsError> {
        for (model, over) in table {
            let bad = |message: &str| ModelSettingsError::Invalid {
                model: model.clone(),
                message: message.to_owned(),
            };
            if over.context_window == Some(0) {
                return Err(bad("context_window must be at least 1"));
            }
            if over.max_output_tokens == Some(0) {
                return Err(bad("max_output_tokens must be at least 1"));
            }
            let merged = self
                .overrides
                .get(model)
                .copied()
                .unwrap_or_default()
                .overlaid(*over);
            if let (Some(w), Some(o)) = (merged.context_window, merged.max_output_tokens)
                && o > w
            {
                return Err(bad(&format!(
                    "max_output_tokens ({o}) exceeds context_window ({w})"
                )));
            }
            self.overrides.insert(model.clone(), merged);
        }
        Ok(self)
    }

    /// The limits of `model`: the built-in entry, overlaid by the adapter's report for the
    /// route in force (`adapter`), overlaid by the user's override; an output limit above the
    /// resulting window is clamped to the window (a user who shrinks the window to 16,000
    /// tokens gets at most 16,000 output tokens).
    pub fn resolve(&self, model: &str, adapter: Option<&ModelInfo>) -> ModelLimits {
        let mut limits = self.builtin.get(model).copied().unwrap_or_default();
        if let Some(info) = adapter {
            limits = limits.overlaid(ModelLimits::from(info));
        }
        if let Some(over) = self.overrides.get(model) {
            limits = limits.overlaid(*over);
        }
        if let (Some(w), Some(o)) = (limits.context_window, limits.max_output_tokens) {
            limits.max_output_tokens = Some(o.min(w));
        }
        limits
    }

    /// The context window of `model` (see [`ModelCatalog::resolve`]), `None` when unknown.
    pub fn context_window(&self, model: &str, adapter: Option<&ModelInfo>) -> Option<u64> {
        self.resolve(model, adapter).context_window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_knows_deepseek_v4() {
        let c = ModelCatalog::builtin();
        assert_eq!(
            c.resolve("deepseek-v4-flash", None),
            ModelLimits::new(1_048_576, 393_216)
        );
        assert_eq!(c.context_window("deepseek-v4-pro", None), Some(1_048_576));
        assert_eq!(c.resolve("qwen2.5-coder", None), ModelLimits::default());
    }

    #[test]
    fn settings_override_adapter_over_builtin() {
        let table: ModelsTable = serde_json::from_value(serde_json::json!({
            "deepseek-v4-flash": {"context_window": 16000},
            "qwen2.5-coder": {"context_window": 32768, "max_output_tokens": 4096}
        }))
        .unwrap();
        let c = ModelCatalog::builtin().with_overrides(&table).unwrap();
        // Only the window is overridden: the built-in output limit is clamped to it.
        assert_eq!(
            c.resolve("deepseek-v4-flash", None),
            ModelLimits::new(16_000, 16_000)
        );
        let table: ModelsTable = serde_json::from_value(serde_json::json!({
            "deepseek-v4-flash": {"context_window": 16000, "max_output_tokens": 8000},
            "qwen2.5-coder": {"context_window": 32768, "max_output_tokens": 4096}
        }))
        .unwrap();
        let c = ModelCatalog::builtin().with_overrides(&table).unwrap();
        assert_eq!(
            c.resolve("deepseek-v4-flash", None),
            ModelLimits::new(16_000, 8_000)
        );
        let mut info = ModelInfo::new("local-model");
        info.context_window = Some(8192);
        info.max_output_tokens = Some(2048);
        assert_eq!(
            c.resolve("local-model", Some(&info)),
            ModelLimits::new(8192, 2048)
        );
        let mut over_info = ModelInfo::new("qwen2.5-coder");
        over_info.context_window = Some(131_072);
        assert_eq!(
            c.resolve("qwen2.5-coder", Some(&over_info)),
            ModelLimits::new(32_768, 4096)
        );
        // Field by field: the adapter's output limit survives an override of the window only.
        let only_window: ModelsTable =
            serde_json::from_value(serde_json::json!({"local-model": {"context_window": 4096}}))
                .unwrap();
        let c = ModelCatalog::empty().with_overrides(&only_window).unwrap();
        assert_eq!(
            c.resolve("local-model", Some(&info)),
            ModelLimits::new(4096, 2048)
        );
    }

    #[test]
    fn builtin_prices_cost_exactly_and_unknown_models_cost_nothing_known() {
        let c = ModelCatalog::builtin();
        let flash = c.pricing("deepseek-v4-flash");
        assert_eq!(flash.thinks, Some(true));
        assert_eq!(
            flash.prices_published.map(|d| d.to_string()).as_deref(),
            Some("2026-04-24")
        );
        let usage = crate::TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cache_read_tokens: Some(2_000_000),
            ..crate::TokenUsage::default()
        };
        // 1M × $0.14 + 2M × $0.0028 + 0.5M × $0.28 = 0.14 + 0.0056 + 0.14
        assert_eq!(flash.cost_picos(&usage), Some(285_600_000_000));
        assert_eq!(flash.cost_usd(&usage), Some(0.2856));
        let sonnet = c.pricing("claude-sonnet-4-5");
        let u = crate::TokenUsage {
            input_tokens: 1000,
            output_tokens: 200,
            cache_read_tokens: Some(10_000),
            cache_write_tokens: Some(4000),
            ..crate::TokenUsage::default()
        };
        // 1000 × 3 + 10000 × 0.30 + 4000 × 3.75 + 200 × 15 = 3000 + 3000 + 15000 + 3000 µ$
        assert_eq!(sonnet.cost_picos(&u), Some(24_000_000_000));
        assert_eq!(sonnet.cost_usd(&u), Some(0.024));
        assert_eq!(c.pricing("qwen2.5-coder").cost_usd(&u), None);
        // dated snapshots and the short alias take the alias's prices
        for id in [
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-20250514",
            "claude-sonnet-4",
        ] {
            assert_eq!(c.pricing(id).cost_picos(&u), Some(24_000_000_000), "{id}");
        }
        assert_eq!(
            c.pricing("claude-opus-4-1-20250805").input_price,
            Some(UsdPerMTok(15_000_000))
        );
        assert_eq!(c.pricing("claude-sonnet-4-5-2025").cost_usd(&u), None);
        assert_eq!(
            c.resolve("claude-opus-4-5", None),
            ModelLimits::new(200_000, 64_000)
        );
    }

    #[test]
    fn every_pricing_field_is_overridable() {
        let table: ModelsTable = serde_json::from_value(serde_json::json!({
            "deepseek-v4-flash": {"output_price": 1.0},
            "local": {"input_price": 0.5, "output_price": 2, "thinks": false,
                      "cached_input_price": 0.05, "cache_write_price": 0.6,
                      "prices_published": "2026-12-01"}
        }))
        .unwrap();
        let c = ModelCatalog::builtin().with_overrides(&table).unwrap();
        let flash = c.pricing("deepseek-v4-flash");
        assert_eq!(flash.output_price, Some(UsdPerMTok::from_micros(1_000_000)));
        assert_eq!(flash.input_price, Some(UsdPerMTok::from_micros(140_000)));
        let local = c.pricing("local");
        assert_eq!(
            local,
            ModelPricing {
                thinks: Some(false),
                input_price: Some(UsdPerMTok::from_micros(500_000)),
                cached_input_price: Some(UsdPerMTok::from_micros(50_000)),
                cache_write_price: Some(UsdPerMTok::from_micros(600_000)),
                output_price: Some(UsdPerMTok::from_micros(2_000_000)),
                prices_published: PriceDate::parse("2026-12-01"),
            }
        );
        // without a cache price, hits are charged at the input price
        let only = ModelPricing {
            input_price: Some(UsdPerMTok::from_micros(1_000_000)),
            output_price: Some(UsdPerMTok::from_micros(1_000_000)),
            ..ModelPricing::default()
        };
        let u = crate::TokenUsage {
            input_tokens: 1,
            output_tokens: 1,
            cache_read_tokens: Some(1),
            cache_write_tokens: Some(1),
            ..crate::TokenUsage::default()
        };
        assert_eq!(only.cost_picos(&u), Some(4_000_000));
        for bad in [
            serde_json::json!({"m": {"input_price": -1}}),
            serde_json::json!({"m": {"prices_published": "Dec 1"}}),
        ] {
            assert!(serde_json::from_value::<ModelsTable>(bad).is_err());
        }
        let back = serde_json::to_value(table["local"]).unwrap();
        assert_eq!(back["input_price"], serde_json::json!(0.5));
        assert_eq!(back["prices_published"], "2026-12-01");
    }

    #[test]
    fn invalid_overrides_are_refused_with_the_model_named() {
        let t = |v: serde_json::Value| -> ModelsTable { serde_json::from_value(v).unwrap() };
        let err = ModelCatalog::builtin()
            .with_overrides(&t(serde_json::json!({"m": {"context_window": 0}})))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "models.\"m\": context_window must be at least 1"
        );
        assert_eq!(dsh_kernel::ErrorCode::code(&err), "INVALID_MODEL_SETTINGS");
        let err = ModelCatalog::builtin()
            .with_overrides(&t(serde_json::json!({
                "deepseek-v4-flash": {"context_window": 16000, "max_output_tokens": 20000}
            })))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "models.\"deepseek-v4-flash\": max_output_tokens (20000) exceeds context_window (16000)"
        );
        let unknown =
            serde_json::from_value::<ModelsTable>(serde_json::json!({"m": {"context_windows": 5}}))
                .unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("unknown field `context_windows`"),
            "{unknown}"
        );
        let s: LlmSettings = serde_json::from_value(serde_json::json!({
            "models": {"m": {"max_output_tokens": 10}}
        }))
        .unwrap();
        assert_eq!(s.models["m"].max_output_tokens, Some(10));
    }
}
