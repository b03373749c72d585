//! The settings service: per-plugin configuration sections as JSON values, run facts, and the
//! settings declaration ([`SettingsSpec`]) a plugin attaches to its [`crate::Plugin`].
//!
//! The kernel does no I/O: a binary (or a test) builds [`Settings`] from whatever layers it
//! reads (TOML files, flags) and provides it in the root scope. A plugin reads its own section
//! (keyed by its plugin id) in its hooks with [`Context::settings_section`], so hooks take no
//! config argument. Run facts ([`Settings::fact`]) are values the host knows about the run
//! rather than settings a user writes: `dsh_home`, `workspace`, `ephemeral`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::error::{KernelError, Result};
use crate::scope::Context;

/// A plugin's settings declaration (written by [`crate::plugin!`] from its `settings`,
/// `aliases` and `top_level` fields).
///
/// The plugin's section is keyed by its plugin id; a host routes `[plugins.<id>]` tables, the
/// alias sections and the top-level keys into it.
#[derive(Debug, Clone, Copy)]
pub struct SettingsSpec {
    /// User-facing section names that are aliases of this plugin's section (e.g.
    /// `"persistence"`). Several plugins may share an alias: each key of such a table goes to
    /// the plugins whose schema declares it.
    pub aliases: &'static [&'static str],
    /// Top-level settings keys (e.g. `"permission_mode"`) this plugin also reads under the
    /// same name in its section.
    pub top_level: &'static [&'static str],
    /// Top-level keys this plugin reads but does not enforce (e.g. a tool plugin that widens its
    /// fence under `permission_mode = "danger-full-access"`): routed to it when set, but a key
    /// no plugin owns through `top_level` stays unknown.
    pub observes: &'static [&'static str],
    /// Keys of this plugin's section (dotted, `*` matching any one segment) that only the
    /// user's own layers may set, never a project's settings file: credentials routing
    /// (`*.base_url`, `*.api_key_env`), permission widening.
    pub restricted: &'static [&'static str],
    /// The JSON Schema of the settings type.
    pub schema: fn() -> serde_json::Value,
    /// Deserializes a section into the settings type, reporting the failing path.
    pub check: fn(&serde_json::Value) -> std::result::Result<(), SettingsCheckError>,
}

impl SettingsSpec {
    /// The top-level property names of the schema (the keys the section accepts), sorted.
    pub fn keys(&self) -> Vec<String> {
        let schema = (self.schema)();
        let mut keys: Vec<String> = schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }
}

/// Why a section does not deserialize into a plugin's settings type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SettingsCheckError {
    /// The dotted path of the offending value inside the section (`.` for the section itself).
    pub path: String,
    /// serde's message, naming the unknown field or the expected type.
    pub message: String,
}

impl SettingsSpec {
    /// Whether the dotted `key` of this plugin's section matches a [`SettingsSpec::restricted`]
    /// pattern (a pattern also covers everything below the key it names).
    pub fn is_restricted(&self, key: &str) -> bool {
        let parts: Vec<&str> = key.split('.').collect();
        self.restricted.iter().any(|pat| {
            let pat: Vec<&str> = pat.split('.').collect();
            pat.len() <= parts.len() && pat.iter().zip(&parts).all(|(p, k)| *p == "*" || p == k)
        })
    }
}

/// An immutable snapshot of configuration sections, keyed by section name (the plugin id, e.g.
/// `"dsh-llm-deepseek"`), plus run facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    sections: BTreeMap<String, serde_json::Value>,
    facts: BTreeMap<String, serde_json::Value>,
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

    /// Adds or replaces one run fact (e.g. `dsh_home` = `"/home/u/.dsh"`).
    pub fn with_fact(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.facts.insert(name.into(), value);
        self
    }

    /// A run fact, if the host set it.
    pub fn fact(&self, name: &str) -> Option<&serde_json::Value> {
        self.facts.get(name)
    }

    /// A run fact that is a string (a path, usually).
    pub fn fact_str(&self, name: &str) -> Option<&str> {
        self.facts.get(name).and_then(serde_json::Value::as_str)
    }

    /// A run fact that is a boolean; `false` when unset.
    pub fn fact_flag(&self, name: &str) -> bool {
        self.facts
            .get(name)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
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

/// A `#[serde(deserialize_with = "dsh_kernel::at_least_one")]` helper for settings keys whose 0
/// would be meaningless or harmful (timeouts in ms: a 0 makes every call time out): a `u64`
/// that is at least 1, else the error "must be at least 1", which the settings check reports
/// with the file and key (exit 2 in the binary).
///
/// # Errors
/// The value is not an unsigned integer, or it is 0.
pub fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = <u64 as serde::Deserialize>::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom("must be at least 1"));
    }
    Ok(n)
}
