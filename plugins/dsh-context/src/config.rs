//! The `dsh-context` settings section ([`ContextConfig`]) and the injectable clock ([`Clock`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Deserialize;

/// The wall clock used for the date context (injectable for tests).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The `dsh-context` settings section (snake_case; unknown fields rejected).
///
/// JSON: `{"persona": "…"?, "dsh_home": "/path"?, "include_git": true, "include_date": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Replaces [`PERSONA`](crate::PERSONA) (may use `{{variables}}`, e.g. `{{cwd}}`; `""`
    /// drops the section).
    pub persona: Option<String>,
    /// Where `AGENTS.md` is looked up last; default `$DSH_HOME`, else `~/.dsh`.
    pub dsh_home: Option<PathBuf>,
    /// Contribute the `context:git` runtime context (default true).
    pub include_git: bool,
    /// Contribute the `context:date` runtime context (default true).
    pub include_date: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            persona: None,
            dsh_home: None,
            include_git: true,
            include_date: true,
        }
    }
}

impl ContextConfig {
    /// The effective `$DSH_HOME`: `dsh_home`, else the `DSH_HOME` environment variable (when
    /// non-empty), else `~/.dsh`, else `None` (no home directory).
    pub fn resolved_dsh_home(&self) -> Option<PathBuf> {
        if let Some(h) = &self.dsh_home {
            return Some(h.clone());
        }
        if let Some(h) = std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(h));
        }
        dirs::home_dir().map(|h| h.join(".dsh"))
    }
}
