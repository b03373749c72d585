//! The `dsh-context` settings section ([`ContextConfig`]) and the injectable clock ([`Clock`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::{DEFAULT_GIT_STATUS_MAX_FILES, DEFAULT_GIT_TIMEOUT_MS, GitOptions};

/// The wall clock used for the date context (injectable for tests).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// How the `persona` setting combines with the built-in working method ([`PERSONA`](crate::PERSONA)).
/// JSON `"add"` | `"replace"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PersonaMode {
    /// The persona follows the working method, separated by a blank line (the default).
    #[default]
    Add,
    /// The persona is the whole section; the working method is not sent.
    Replace,
}

impl ContextConfig {
    /// The text of the `context:persona` section: [`PERSONA`](crate::PERSONA), then the
    /// `persona` setting after a blank line (`add`), or the setting alone (`replace`). An unset
    /// or blank `persona` under `add` leaves the working method alone.
    pub fn persona_text(&self) -> String {
        match (&self.persona, self.persona_mode) {
            (None, _) => crate::PERSONA.to_owned(),
            (Some(p), PersonaMode::Replace) => p.clone(),
            (Some(p), PersonaMode::Add) if p.trim().is_empty() => crate::PERSONA.to_owned(),
            (Some(p), PersonaMode::Add) => format!("{}\n\n{p}", crate::PERSONA),
        }
    }
}

/// The `dsh-context` settings section (snake_case; unknown fields rejected).
///
/// JSON: `{"persona": "…"?, "persona_mode": "add"|"replace", "dsh_home": "/path"?,
/// "include_git": true, "include_date": true,
/// "git_status_max_files": 20000, "git_timeout_ms": 2000}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The deployment's own persona text (may use `{{variables}}`, e.g. `{{cwd}}`). By default
    /// it is added after [`PERSONA`](crate::PERSONA), the working method, in the same section;
    /// with `persona_mode = "replace"` it replaces it (`""` then drops the section).
    pub persona: Option<String>,
    /// How `persona` combines with the built-in working method (default [`PersonaMode::Add`]).
    pub persona_mode: PersonaMode,
    /// Where `AGENTS.md` is looked up last; default `$DSH_HOME`, else `~/.dsh`.
    pub dsh_home: Option<PathBuf>,
    /// Contribute the `context:git` runtime context (default true).
    pub include_git: bool,
    /// Contribute the `context:date` runtime context (default true).
    pub include_date: bool,
    /// Above this many entries in the git index, `git status` is not run for the git context
    /// (it stats every tracked file and walks the tree for untracked ones); the context names
    /// the branch and says the status was not scanned. Default
    /// [`DEFAULT_GIT_STATUS_MAX_FILES`](crate::DEFAULT_GIT_STATUS_MAX_FILES) (20,000).
    pub git_status_max_files: u64,
    /// The longest one git invocation of the git context may run, in milliseconds (at least
    /// 1); past it git's process group is killed and the context says the status is
    /// unavailable. Default [`DEFAULT_GIT_TIMEOUT_MS`](crate::DEFAULT_GIT_TIMEOUT_MS) (2,000).
    #[serde(deserialize_with = "dsh_kernel::at_least_one")]
    #[schemars(range(min = 1))]
    pub git_timeout_ms: u64,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            persona: None,
            persona_mode: PersonaMode::Add,
            dsh_home: None,
            include_git: true,
            include_date: true,
            git_status_max_files: DEFAULT_GIT_STATUS_MAX_FILES,
            git_timeout_ms: DEFAULT_GIT_TIMEOUT_MS,
        }
    }
}

impl ContextConfig {
    /// The git options these settings give (`git_timeout_ms` below 1 counts as 1).
    pub fn git_options(&self) -> GitOptions {
        GitOptions {
            timeout: Duration::from_millis(self.git_timeout_ms.max(1)),
            status_max_files: self.git_status_max_files,
        }
    }

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
