//! The settings service: per-plugin configuration sections as JSON values.
//!
//! The kernel does no I/O: a binary (or a test) builds [`Settings`] from whatever layers it
//! reads (TOML files, flags) and provides it in the root scope. A plugin reads its own section
//! in `apply` with [`Context::settings_section`], so `apply` takes no config argument.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::error::{KernelError, Result};
use crate::scope::Context;

/// An immutable snapshot of configuration sections, keyed by section name (by convention the
/// plugin id, e.g. `"dsh-llm-deepseek"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    sections: BTreeMap<String, serde_json::Value>,
}

impl Settings {
    /// Empty settings: every plugin uses its defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces one section.
    pub fn with_section(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.sections.insert(name.into(), value);
        self
    }

    /// The raw section, if present.
    pub fn section(&self, name: &str) -> Option<&serde_json::Value> {
        self.sections.get(name)
    }

    /// Every section name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sections.keys().map(String::as_str)
    }
}

impl Context {
    /// Reads section `name` of the nearest [`Settings`] service into `T`; `T::default()` when
    /// there is no settings service or no such section.
    ///
    /// # Errors
    /// [`KernelError::InvalidSettings`] when the section does not deserialize into `T` (the
    /// message names the offending field).
    pub fn settings_section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        let Some(settings) = self.get::<Settings>() else {
            return Ok(T::default());
        };
        match settings.section(name) {
            None => Ok(T::default()),
            Some(v) => T::deserialize(v).map_err(|e| KernelError::InvalidSettings {
                section: name.to_owned(),
                message: e.to_string(),
            }),
        }
    }

    /// The nearest [`Settings`] service, or empty settings.
    pub fn settings(&self) -> Arc<Settings> {
        self.get::<Settings>().unwrap_or_default()
    }
}
