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
}

impl ModelLimits {
    /// Limits with both fields known.
    pub fn new(context_window: u64, max_output_tokens: u64) -> Self {
        Self {
            context_window: Some(context_window),
            max_output_tokens: Some(max_output_tokens),
        }
    }

    /// `self` with every field `over` knows replaced by `over`'s.
    pub fn overlaid(self, over: ModelLimits) -> Self {
        Self {
            context_window: over.context_window.or(self.context_window),
            max_output_tokens: over.max_output_tokens.or(self.max_output_tokens),
        }
    }
}

impl From<&ModelInfo> for ModelLimits {
    fn from(info: &ModelInfo) -> Self {
        Self {
            context_window: info.context_window,
            max_output_tokens: info.max_output_tokens,
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

/// The model catalog: built-in entries plus user overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCatalog {
    builtin: BTreeMap<String, ModelLimits>,
    overrides: ModelsTable,
}

impl ModelCatalog {
    /// No entries.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in catalog: `deepseek-v4-flash` and `deepseek-v4-pro`, each
    /// [`DEEPSEEK_V4_CONTEXT_WINDOW`] / [`DEEPSEEK_V4_MAX_OUTPUT_TOKENS`].
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
        Self {
            builtin,
            overrides: ModelsTable::new(),
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
