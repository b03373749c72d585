//! Settings: TOML layers — built-in defaults, `$DSH_HOME/settings.toml` (default `~/.dsh`), the
//! project's `.dsh/settings.toml`, then `-c key=value` flags — and their translation into the
//! kernel's per-plugin settings sections.
//!
//! Unknown keys are errors that name the key and the file. Credentials are only ever
//! environment-variable references (`api_key_env`); no key is read from or written to settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::json;

/// The permission presets (upstream names).
pub const PERMISSION_MODES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];

/// One settings file (every key optional). Unknown keys are refused.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// Default provider route id (`deepseek`).
    pub provider: Option<String>,
    /// Default model id.
    pub model: Option<String>,
    /// `read-only` | `workspace-write` | `danger-full-access`.
    pub permission_mode: Option<String>,
    /// Output-token limit per request (tokens).
    pub max_tokens: Option<u64>,
    /// A persona replacing the built-in one.
    pub persona: Option<String>,
    /// `[persistence]`.
    pub persistence: Option<PersistenceFile>,
    /// `[providers.<id>]`: user-defined OpenAI-compatible providers.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderFile>,
    /// `[agent]`.
    pub agent: Option<AgentFile>,
}

/// `[persistence]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistenceFile {
    /// Name of a linked persistence backend (default `jsonl`).
    pub backend: Option<String>,
    /// Directory for session logs (default `$DSH_HOME/sessions`).
    pub dir: Option<PathBuf>,
    /// Batching window in ms (default 200).
    pub write_batch_ms: Option<u64>,
}

/// `[agent]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// Rolling pool size for parallel-safe tool calls.
    pub max_parallel_tool_calls: Option<usize>,
}

/// `[providers.<id>]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    /// Base URL up to (not including) `/chat/completions`, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key (omit for local servers).
    pub api_key_env: Option<String>,
    /// Model ids this provider serves.
    #[serde(default)]
    pub models: Vec<String>,
    /// Human name.
    pub display_name: Option<String>,
    /// The server rejects `reasoning_content` on replayed assistant messages.
    pub omit_reasoning_content: Option<bool>,
}

/// Where each layer came from, for error messages.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Human description (a path, or `-c flags`).
    pub origin: String,
    /// The parsed table.
    pub table: toml::Table,
}

/// The effective configuration of one run.
#[derive(Debug, Clone)]
pub struct Config {
    /// `$DSH_HOME` (default `~/.dsh`).
    pub dsh_home: PathBuf,
    /// Workspace root (absolute).
    pub cwd: PathBuf,
    /// Provider route id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Permission preset.
    pub permission_mode: String,
    /// Output-token limit.
    pub max_tokens: Option<u64>,
    /// Persona override.
    pub persona: Option<String>,
    /// Persistence backend name.
    pub backend: String,
    /// Session directory.
    pub sessions_dir: PathBuf,
    /// Batching window (ms).
    pub write_batch_ms: u64,
    /// Tool pool size.
    pub max_parallel_tool_calls: Option<usize>,
    /// User-defined providers.
    pub providers: BTreeMap<String, ProviderFile>,
    /// Persist sessions (false with `--ephemeral`).
    pub persist: bool,
}

/// Command-line overrides applied after the files.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `-c key=value` pairs.
    pub pairs: Vec<String>,
    /// `--provider`.
    pub provider: Option<String>,
    /// `-m/--model`.
    pub model: Option<String>,
    /// `--permission-mode`.
    pub permission_mode: Option<String>,
    /// `--ephemeral`.
    pub ephemeral: bool,
}

/// Makes a configured path absolute: `~/` expands to the home directory, and a relative path is
/// taken from the current directory (session logs must not depend on where later runs start).
///
/// # Errors
/// No home directory for `~`, or the current directory is unreadable.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    if let Ok(rest) = path.strip_prefix("~") {
        let home =
            dirs::home_dir().ok_or_else(|| anyhow!("cannot expand `~`: no home directory"))?;
        return Ok(home.join(rest));
    }
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    Ok(std::env::current_dir()
        .context("reading the current directory")?
        .join(path))
}

/// `$DSH_HOME` (made absolute), else `~/.dsh`.
pub fn dsh_home() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
        return absolute(Path::new(&h));
    }
    let home =
        dirs::home_dir().ok_or_else(|| anyhow!("cannot find the home directory; set DSH_HOME"))?;
    Ok(home.join(".dsh"))
}

fn read_layer(path: &Path) -> Result<Option<Layer>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{}: invalid TOML", path.display()))?;
    let layer = Layer {
        origin: path.display().to_string(),
        table,
    };
    check_layer(&layer)?;
    Ok(Some(layer))
}

/// Refuses unknown keys, naming the key and where it came from.
fn check_layer(layer: &Layer) -> Result<()> {
    FileSettings::deserialize(toml::Value::Table(layer.table.clone()))
        .map(|_| ())
        .map_err(|e| anyhow!("{}: {}", layer.origin, e.message()))
}

/// Parses `-c key=value` pairs into one layer (dotted keys; values parsed as TOML, else taken
/// as strings).
pub fn flag_layer(pairs: &[String]) -> Result<Layer> {
    let mut table = toml::Table::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("-c {pair}: expected key=value"))?;
        let value: toml::Value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_owned()));
        let parts: Vec<&str> = key.trim().split('.').collect();
        let mut cur = &mut table;
        for (i, part) in parts.iter().enumerate() {
            if part.is_empty() {
                bail!("-c {pair}: empty key segment");
            }
            if i + 1 == parts.len() {
                cur.insert((*part).to_owned(), value.clone());
            } else {
                let entry = cur
                    .entry((*part).to_owned())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = entry
                    .as_table_mut()
                    .ok_or_else(|| anyhow!("-c {pair}: `{part}` is not a table"))?;
            }
        }
    }
    let layer = Layer {
        origin: "-c flags".to_owned(),
        table,
    };
    check_layer(&layer)?;
    Ok(layer)
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// Loads every layer for workspace `cwd` and resolves the effective configuration.
///
/// # Errors
/// Unreadable or invalid files, unknown keys (naming key and file), a bad permission mode.
pub fn load(cwd: &Path, overrides: &Overrides) -> Result<Config> {
    let dsh_home = dsh_home()?;
    let mut layers = Vec::new();
    if let Some(l) = read_layer(&dsh_home.join("settings.toml"))? {
        layers.push(l);
    }
    if let Some(l) = read_layer(&cwd.join(".dsh").join("settings.toml"))? {
        layers.push(l);
    }
    layers.push(flag_layer(&overrides.pairs)?);
    let mut merged = toml::Table::new();
    for l in layers {
        merge(&mut merged, l.table);
    }
    let file = FileSettings::deserialize(toml::Value::Table(merged))
        .map_err(|e| anyhow!("settings: {}", e.message()))?;
    let persistence = file.persistence.clone().unwrap_or_default();
    // The persistence seam checks the name against the registered backends.
    let backend = persistence
        .backend
        .unwrap_or_else(|| dsh_persistence::DEFAULT_BACKEND.to_owned());
    let permission_mode = overrides
        .permission_mode
        .clone()
        .or(file.permission_mode)
        .unwrap_or_else(|| "workspace-write".to_owned());
    if !PERMISSION_MODES.contains(&permission_mode.as_str()) {
        bail!(
            "permission mode must be one of {}, not {permission_mode:?}",
            PERMISSION_MODES.join(", ")
        );
    }
    let sessions_dir = match persistence.dir {
        Some(d) => absolute(&d)?,
        None => dsh_home.join("sessions"),
    };
    let provider = overrides
        .provider
        .clone()
        .or(file.provider)
        .unwrap_or_else(|| "deepseek".to_owned());
    // A user-defined provider's first listed model is its default model.
    let provider_default = file
        .providers
        .get(&provider)
        .and_then(|p| p.models.first().cloned());
    let model = overrides
        .model
        .clone()
        .or(file.model)
        .or(provider_default)
        .unwrap_or_else(|| "deepseek-v4-flash".to_owned());
    if model.trim().is_empty() {
        bail!("the model id is empty");
    }
    if file.max_tokens == Some(0) {
        bail!("settings: max_tokens must be a positive number of tokens");
    }
    Ok(Config {
        sessions_dir,
        dsh_home,
        cwd: cwd.to_path_buf(),
        provider,
        model,
        permission_mode,
        max_tokens: file.max_tokens,
        persona: file.persona,
        backend,
        write_batch_ms: persistence.write_batch_ms.unwrap_or(200),
        max_parallel_tool_calls: file.agent.and_then(|a| a.max_parallel_tool_calls),
        providers: file.providers,
        persist: !overrides.ephemeral,
    })
}

impl Config {
    /// The kernel settings sections the plugins read.
    pub fn kernel_settings(&self) -> dsh_kernel::Settings {
        let official_base = std::env::var("DEEPSEEK_BASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "https://api.deepseek.com".to_owned());
        let routes: Vec<serde_json::Value> = self
            .providers
            .iter()
            .map(|(id, p)| {
                let mut quirks = json!({});
                if p.omit_reasoning_content == Some(true) {
                    quirks["omit_reasoning_content"] = json!(true);
                }
                json!({
                    "id": id,
                    "display_name": p.display_name,
                    "base_url": p.base_url.clone().unwrap_or_default(),
                    "api_key_env": p.api_key_env,
                    "models": p.models.iter().map(|m| json!({"id": m})).collect::<Vec<_>>(),
                    "quirks": quirks,
                })
            })
            .collect();
        // `dsh_persistence::PersistenceSettings`; `--ephemeral` turns persistence off.
        let persistence = json!({
            "backend": if self.persist { self.backend.as_str() } else { dsh_persistence::NO_BACKEND },
            "dir": self.sessions_dir,
            "write_batch_ms": self.write_batch_ms,
        });
        let mut context = json!({"dsh_home": self.dsh_home});
        if let Some(p) = &self.persona {
            context["persona"] = json!(p);
        }
        let mut agent_loop = json!({});
        if let Some(n) = self.max_parallel_tool_calls {
            agent_loop["max_parallel_tool_calls"] = json!(n);
        }
        let full = self.permission_mode == "danger-full-access";
        dsh_kernel::Settings::new()
            .with_section(
                "dsh-llm-deepseek",
                json!({"official": {"base_url": official_base}, "routes": routes}),
            )
            .with_section("dsh-persistence", persistence)
            .with_section("dsh-agent-loop", agent_loop)
            .with_section("dsh-permissions", json!({"mode": self.permission_mode}))
            // The permission preset is the policy for paths outside the workspace; the fs tools
            // only lift their own containment when the preset allows everything.
            .with_section(
                "dsh-tool-fs",
                json!({"allowOutsideWorkspace": full, "allowReadOutsideWorkspace": full}),
            )
            .with_section("dsh-context", context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_parse_as_toml_or_strings() {
        let l = flag_layer(&[
            "model=deepseek-v4-pro".into(),
            "max_tokens=512".into(),
            "persistence.backend=sqlite".into(),
        ])
        .unwrap();
        assert_eq!(
            toml::Value::Table(l.table).to_string(),
            "{ max_tokens = 512, model = \"deepseek-v4-pro\", persistence = { backend = \"sqlite\" } }"
        );
    }

    #[test]
    fn unknown_keys_name_key_and_origin() {
        let err = flag_layer(&["modle=x".into()]).unwrap_err().to_string();
        assert!(err.starts_with("-c flags: unknown field `modle`"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("settings.toml");
        std::fs::write(&p, "[persistence]\nbakend = \"jsonl\"\n").unwrap();
        let err = read_layer(&p).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}: unknown field `bakend`", p.display())),
            "{err}"
        );
    }

    #[test]
    fn the_persistence_section_carries_the_batch_window_and_root() {
        let config = Config {
            dsh_home: "/h".into(),
            cwd: "/w".into(),
            provider: "deepseek".into(),
            model: "deepseek-v4-flash".into(),
            permission_mode: "workspace-write".into(),
            max_tokens: None,
            persona: None,
            backend: "jsonl".into(),
            sessions_dir: "/h/sessions".into(),
            write_batch_ms: 7,
            max_parallel_tool_calls: None,
            providers: BTreeMap::new(),
            persist: true,
        };
        let settings = config.kernel_settings();
        let section = settings.section("dsh-persistence").unwrap();
        let parsed = dsh_persistence::PersistenceSettings::deserialize(section).unwrap();
        assert_eq!(parsed.write_batch_ms, Some(7));
        assert_eq!(parsed.dir, Some(PathBuf::from("/h/sessions")));
        assert_eq!(parsed.backend_name(), Some("jsonl"));
    }

    #[test]
    fn later_layers_override_earlier_ones() {
        let mut a: toml::Table =
            "model = \"a\"\n[persistence]\nbackend = \"jsonl\"\ndir = \"/x\"\n"
                .parse()
                .unwrap();
        let b: toml::Table = "[persistence]\nbackend = \"sqlite\"\n".parse().unwrap();
        merge(&mut a, b);
        assert_eq!(
            toml::Value::Table(a).to_string(),
            "{ model = \"a\", persistence = { backend = \"sqlite\", dir = \"/x\" } }"
        );
    }

    #[test]
    fn configured_paths_become_absolute() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("rel/dir")).unwrap(), cwd.join("rel/dir"));
        assert_eq!(absolute(Path::new("/abs")).unwrap(), PathBuf::from("/abs"));
        let home = dirs::home_dir().unwrap();
        assert_eq!(absolute(Path::new("~/x")).unwrap(), home.join("x"));
    }

    #[test]
    fn a_user_provider_defaults_to_its_first_model_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let overrides = |pairs: &[&str], model: Option<&str>| Overrides {
            pairs: pairs.iter().map(|p| (*p).to_owned()).collect(),
            provider: Some("local".into()),
            model: model.map(str::to_owned),
            ..Overrides::default()
        };
        let pairs = [
            "providers.local.base_url=\"http://127.0.0.1:9/v1\"",
            "providers.local.models=[\"qwen\", \"other\"]",
        ];
        let c = load(dir.path(), &overrides(&pairs, None)).unwrap();
        assert_eq!((c.provider.as_str(), c.model.as_str()), ("local", "qwen"));
        let c = load(dir.path(), &overrides(&pairs, Some("other"))).unwrap();
        assert_eq!(c.model, "other");
        let err = load(dir.path(), &overrides(&pairs, Some(" "))).unwrap_err();
        assert_eq!(err.to_string(), "the model id is empty");
        let mut zero = pairs.to_vec();
        zero.push("max_tokens=0");
        let err = load(dir.path(), &overrides(&zero, None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "settings: max_tokens must be a positive number of tokens"
        );
    }
}
