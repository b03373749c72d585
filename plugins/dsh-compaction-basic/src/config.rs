//! Settings of the basic compaction policy: section `[compaction]` (or
//! `[plugins.dsh-compaction-basic]`).
//!
//! See docs/upstream/compaction.md (Basic engine policy, config defaults).

use serde::{Deserialize, Serialize};

/// Default `threshold_ratio`: compact before a step at 80 % of the context window.
pub const DEFAULT_THRESHOLD_RATIO: f64 = 0.8;
/// Default `retain_ratio`: keep the newest 16 % of the window verbatim.
pub const DEFAULT_RETAIN_RATIO: f64 = 0.16;
/// Default `max_tokens` of the summarisation call.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// `[compaction]`. Keys are snake_case, all optional, unknown keys refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Compact automatically (pressure before a step, and on the provider's context-window
    /// error). Default true. Manual compaction works either way.
    pub auto: bool,
    /// Fraction of the context window at which a step first compacts, in (0, 1). Default 0.8.
    pub threshold_ratio: f64,
    /// Fraction of the context window kept verbatim as the recent tail, in (0, 1). Default
    /// 0.16 when `retain_tokens` is not set; not together with `retain_tokens`.
    pub retain_ratio: Option<f64>,
    /// Tokens kept verbatim as the recent tail (instead of `retain_ratio`), at least 1.
    pub retain_tokens: Option<u64>,
    /// Output limit of the summarisation call (tokens, at least 1). Default 8192.
    pub max_tokens: u64,
    /// Route of the summarisation call (with `summarization_model`); default: the route of the
    /// latest logged request header.
    pub summarization_provider: Option<String>,
    /// Model of the summarisation call (with `summarization_provider`).
    pub summarization_model: Option<String>,
    /// Extra region compactions a pressure trigger may run when one is not enough. Default 1.
    pub compaction_retries: u32,
    /// Context-overflow retries per agent between two assistant messages. Default 1.
    pub max_overflow_retries: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            auto: true,
            threshold_ratio: DEFAULT_THRESHOLD_RATIO,
            retain_ratio: None,
            retain_tokens: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            summarization_provider: None,
            summarization_model: None,
            compaction_retries: 1,
            max_overflow_retries: 1,
        }
    }
}

/// How much recent history is kept verbatim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retain {
    /// A fraction of the context window.
    Ratio(f64),
    /// A number of tokens.
    Tokens(u64),
}

/// An invalid `[compaction]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum ConfigError {
    /// A value is out of range or two keys conflict. Code `INVALID_COMPACTION_SETTINGS`.
    #[error("compaction.{key}: {message}")]
    #[code("INVALID_COMPACTION_SETTINGS")]
    Invalid {
        /// The offending key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn open_unit(key: &'static str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 && v < 1.0 {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            key,
            message: format!("must be greater than 0 and less than 1, got {v}"),
        })
    }
}

impl CompactionConfig {
    /// Checks the ranges: ratios in (0, 1), `retain_ratio` xor `retain_tokens`, token counts at
    /// least 1, summarisation provider and model both set or both unset (and not empty).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        open_unit("threshold_ratio", self.threshold_ratio)?;
        if let Some(r) = self.retain_ratio {
            open_unit("retain_ratio", r)?;
        }
        let bad = |key, message: &str| ConfigError::Invalid {
            key,
            message: message.to_owned(),
        };
        if self.retain_ratio.is_some() && self.retain_tokens.is_some() {
            return Err(bad(
                "retain_tokens",
                "set either retain_ratio or retain_tokens, not both",
            ));
        }
        if self.retain_tokens == Some(0) {
            return Err(bad("retain_tokens", "must be at least 1"));
        }
        if self.max_tokens == 0 {
            return Err(bad("max_tokens", "must be at least 1"));
        }
        match (&self.summarization_provider, &self.summarization_model) {
            (Some(p), Some(m)) if p.is_empty() || m.is_empty() => Err(bad(
                "summarization_model",
                "summarization_provider and summarization_model must not be empty",
            )),
            (Some(_), None) | (None, Some(_)) => Err(bad(
                "summarization_model",
                "set summarization_provider and summarization_model together",
            )),
            _ => Ok(()),
        }
    }

    /// The retain policy in force.
    pub fn retain(&self) -> Retain {
        match (self.retain_tokens, self.retain_ratio) {
            (Some(t), _) => Retain::Tokens(t),
            (None, Some(r)) => Retain::Ratio(r),
            (None, None) => Retain::Ratio(DEFAULT_RETAIN_RATIO),
        }
    }

    /// The configured summarisation route, if any.
    pub fn summarization_route(&self) -> Option<(&str, &str)> {
        Some((
            self.summarization_provider.as_deref()?,
            self.summarization_model.as_deref()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams() {
        let c = CompactionConfig::default();
        assert!(c.auto);
        assert_eq!(c.threshold_ratio, 0.8);
        assert_eq!(c.retain(), Retain::Ratio(0.16));
        assert_eq!(c.max_tokens, 8192);
        assert_eq!(c.summarization_route(), None);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn invalid_values_name_the_key() {
        let msg = |c: CompactionConfig| c.validate().unwrap_err().to_string();
        let base = CompactionConfig::default;
        assert_eq!(
            msg(CompactionConfig {
                threshold_ratio: 1.0,
                ..base()
            }),
            "compaction.threshold_ratio: must be greater than 0 and less than 1, got 1"
        );
        assert_eq!(
            msg(CompactionConfig {
                retain_ratio: Some(0.0),
                ..base()
            }),
            "compaction.retain_ratio: must be greater than 0 and less than 1, got 0"
        );
        assert_eq!(
            msg(CompactionConfig {
                retain_ratio: Some(0.1),
                retain_tokens: Some(100),
                ..base()
            }),
            "compaction.retain_tokens: set either retain_ratio or retain_tokens, not both"
        );
        assert_eq!(
            msg(CompactionConfig {
                max_tokens: 0,
                ..base()
            }),
            "compaction.max_tokens: must be at least 1"
        );
        assert_eq!(
            msg(CompactionConfig {
                summarization_provider: Some("deepseek".into()),
                ..base()
            }),
            "compaction.summarization_model: set summarization_provider and summarization_model together"
        );
        let t = CompactionConfig {
            retain_tokens: Some(2000),
            ..base()
        };
        assert_eq!(t.retain(), Retain::Tokens(2000));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e =
            serde_json::from_value::<CompactionConfig>(serde_json::json!({"treshold_ratio": 0.5}))
                .unwrap_err();
        assert!(
            e.to_string().contains("unknown field `treshold_ratio`"),
            "{e}"
        );
    }
}
