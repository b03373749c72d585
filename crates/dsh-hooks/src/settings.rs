//! The two bridges' settings sections (`[hooks]`, shared by both plugins: each takes the keys
//! its schema has) and the list of files each one reads. See docs/upstream/hooks.md
//! ("Configuration").

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Default of `[hooks] max_stop_blocks`: consecutive Stop-hook blocks honoured in one turn.
pub const DEFAULT_MAX_STOP_BLOCKS: u64 = 8;

/// `[hooks]` keys of `dsh-hooks-claude-code`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeCodeSettings {
    /// Hook files in the Claude Code JSON shape (a settings file with a `hooks` key, or the
    /// bare map), read in order. Relative paths are taken from the directory of the settings
    /// file that names them (the directory dsh was started in for `-c`); `~/` is the home
    /// directory.
    pub claude_code: Vec<String>,
    /// Also read Claude Code's own settings files, before `claude_code`:
    /// `~/.claude/settings.json`, `<workspace>/.claude/settings.json`,
    /// `<workspace>/.claude/settings.local.json` (missing ones are skipped). Default false.
    pub discover: bool,
    /// Consecutive Stop-hook blocks honoured in one turn; one more block ends the turn with a
    /// notice instead of sending the model back (default 8; 0 = a Stop hook cannot send the
    /// turn back).
    #[schemars(extend("default" = DEFAULT_MAX_STOP_BLOCKS))]
    pub max_stop_blocks: Option<u64>,
}

/// `[hooks]` keys of `dsh-hooks-codex`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CodexSettings {
    /// Hook files in the Codex `hooks.json` shape, read in order (relative paths as for
    /// `claude_code`).
    pub codex: Vec<String>,
    /// As for the Claude Code bridge (default 8).
    #[schemars(extend("default" = DEFAULT_MAX_STOP_BLOCKS))]
    pub max_stop_blocks: Option<u64>,
}

/// `path` made absolute: `~/…` against `home`, a relative path against `base`.
pub fn resolve_path(path: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    if let (Some(rest), Some(home)) = (path.strip_prefix("~/"), home) {
        return home.join(rest);
    }
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Claude Code's own settings files in the order `discover` reads them (whether or not they
/// exist): `<home>/.claude/settings.json`, `<workspace>/.claude/settings.json`,
/// `<workspace>/.claude/settings.local.json`.
pub fn discovered_files(home: Option<&Path>, workspace: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(home) = home {
        v.push(home.join(".claude").join("settings.json"));
    }
    v.push(workspace.join(".claude").join("settings.json"));
    v.push(workspace.join(".claude").join("settings.local.json"));
    v
}

/// The files the Claude Code bridge reads, in order: the discovered ones that exist (with
/// `discover`), then `claude_code` (relative ones against `base`); a file named twice is read
/// once.
pub fn claude_code_files(
    s: &ClaudeCodeSettings,
    base: &Path,
    workspace: &Path,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    if s.discover {
        v.extend(
            discovered_files(home, workspace)
                .into_iter()
                .filter(|p| p.is_file()),
        );
    }
    v.extend(s.claude_code.iter().map(|p| resolve_path(p, base, home)));
    dedup(v)
}

/// The files the Codex bridge reads, in order (relative ones against `base`).
pub fn codex_files(s: &CodexSettings, base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    dedup(
        s.codex
            .iter()
            .map(|p| resolve_path(p, base, home))
            .collect(),
    )
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter()
        .filter(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_discovery_order() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::write(home.join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(ws.join(".claude/settings.local.json"), "{}").unwrap();
        let s = ClaudeCodeSettings {
            claude_code: vec![
                "hooks.json".into(),
                "~/x.json".into(),
                "/abs/y.json".into(),
                home.join(".claude/settings.json").display().to_string(),
            ],
            discover: true,
            max_stop_blocks: None,
        };
        let files = claude_code_files(&s, &ws, &ws, Some(&home));
        assert_eq!(
            files,
            vec![
                home.join(".claude/settings.json"),
                ws.join(".claude/settings.local.json"),
                ws.join("hooks.json"),
                home.join("x.json"),
                PathBuf::from("/abs/y.json"),
            ]
        );
    }
}
