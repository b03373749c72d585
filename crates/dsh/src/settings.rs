//! Settings: TOML layers — the preset's built-in defaults, `$DSH_HOME/settings.toml` (default
//! `~/.dsh`), the project's `.dsh/settings.toml`, `-c key=value` flags, then the command-line
//! options — routed into the plugins' own sections and checked against each plugin's typed
//! settings.
//!
//! The binary owns no setting. Every key belongs to a plugin of the booted set, which declares
//! it (see `dsh_kernel::SettingsSpec`): `[plugins.<plugin id>]` always addresses a plugin's
//! section; a section alias (`[persistence]`, `[providers]`, `[agent]`, …) addresses the plugins
//! that declare it (a key of a shared alias goes to the plugins whose schema has it); a top-level
//! key (`model`, `permission_mode`, …) goes to the plugins that declare it. `plugins.disable =
//! ["id", …]` leaves linked plugins out of the boot. Anything else is an error naming the file,
//! the key and, for a bad value, the expected type. Credentials are only ever
//! environment-variable references (`api_key_env`); no key is read from or written to settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use dsh_kernel::{Plugin, SettingsSpec};
use serde_json::{Map, Value, json};

/// Where each layer came from, for error messages and `dsh config`.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Human description: a path, `-c flags`, `command line` or `built-in defaults`.
    pub origin: String,
    /// The parsed table.
    pub table: toml::Table,
    /// A project's own settings file (`<project>/.dsh/settings.toml`): it may not set the keys
    /// plugins declare `restricted` (where credentials go, permission widening), since the
    /// project may be someone else's repository.
    pub project: bool,
}

/// The settings of one run, resolved over every layer.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Plugin id → the merged section (a JSON object).
    pub sections: BTreeMap<String, Value>,
    /// `"<plugin id> <dotted key>"` → the origin of the layer that set the value last.
    pub origins: BTreeMap<String, String>,
    /// Ids left out of the boot (`plugins.disable`), and the layer that said so.
    pub disabled: Vec<String>,
    /// The origin of `plugins.disable`, when set.
    pub disabled_origin: Option<String>,
}

/// The effective configuration of one run.
#[derive(Debug, Clone)]
pub struct Config {
    /// `$DSH_HOME` (default `~/.dsh`).
    pub dsh_home: PathBuf,
    /// Workspace root (absolute): `-C DIR`, else the nearest ancestor of the launch directory
    /// holding `.git`, else the launch directory (`crate::workspace`). The project's
    /// `.dsh/settings.toml` is read from here.
    pub cwd: PathBuf,
    /// Where the run started (absolute): `-C DIR`, else the current directory. New sessions
    /// record it as their header's `cwd`.
    pub launch_dir: PathBuf,
    /// Provider route id (`dsh-agent` settings, top-level `provider`).
    pub provider: String,
    /// Model id, when a layer other than the built-in defaults set it; else the route's first
    /// model or the built-in default is used (see [`Config::model_for`]).
    pub model: String,
    /// Whether `model` came from the built-in defaults only.
    pub model_is_default: bool,
    /// Output-token limit.
    pub max_tokens: Option<u64>,
    /// Persist sessions (false with `--ephemeral`).
    pub persist: bool,
    /// The plugin set to boot (the preset minus `plugins.disable`).
    pub plugins: Vec<&'static Plugin>,
    /// Every layer and the routed sections.
    pub resolved: Resolved,
    /// The layers in order, for `dsh config`.
    pub layers: Vec<Layer>,
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
    /// The launch directory (`None`: the workspace root passed to [`load`]).
    pub launch_dir: Option<PathBuf>,
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
///
/// # Errors
/// No home directory.
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
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        anyhow!(
            "{}: invalid TOML: {}",
            path.display(),
            e.to_string().trim_end()
        )
    })?;
    Ok(Some(Layer {
        origin: path.display().to_string(),
        table,
        project: false,
    }))
}

/// Splits the key of a `-c` pair into its segments with TOML's dotted-key syntax: bare
/// segments are trimmed, `"…"` (with `\"` and `\\` escapes) and `'…'` segments are taken as
/// written, dots included (`models."qwen2.5-coder".input_price` is three segments). Returns the
/// segments and the rest of `pair` after the `=` that ends the key.
///
/// # Errors
/// An unterminated quote, text after a closing quote other than `.` or `=`, an empty segment,
/// or no `=`.
fn split_pair(pair: &str) -> Result<(Vec<String>, &str)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = pair.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' | '\'' if cur.trim().is_empty() && !quoted => {
                cur.clear();
                let mut closed = false;
                while let Some((_, q)) = chars.next() {
                    match q {
                        _ if q == c => {
                            closed = true;
                            break;
                        }
                        '\\' if c == '"' => match chars.next() {
                            Some((_, e @ ('"' | '\\'))) => cur.push(e),
                            Some((_, 'n')) => cur.push('\n'),
                            Some((_, 't')) => cur.push('\t'),
                            _ => bail!("-c {pair}: unsupported escape in a quoted key"),
                        },
                        q => cur.push(q),
                    }
                }
                if !closed {
                    bail!("-c {pair}: unterminated quoted key segment");
                }
                quoted = true;
            }
            '.' | '=' => {
                let part = if quoted {
                    std::mem::take(&mut cur)
                } else {
                    std::mem::take(&mut cur).trim().to_owned()
                };
                if part.is_empty() && !quoted {
                    bail!("-c {pair}: empty key segment");
                }
                parts.push(part);
                quoted = false;
                if c == '=' {
                    return Ok((parts, &pair[i + 1..]));
                }
            }
            c if quoted && c.is_whitespace() => {}
            c if quoted => bail!("-c {pair}: `{c}` after a quoted key segment"),
            c => cur.push(c),
        }
    }
    bail!("-c {pair}: expected key=value")
}

/// Parses `-c key=value` pairs into one layer (dotted keys with TOML's quoting, see
/// [`split_pair`]; values parsed as TOML, else taken as strings).
///
/// # Errors
/// A pair without `=`, an empty or badly quoted key segment, or a key below a non-table value.
pub fn flag_layer(pairs: &[String]) -> Result<Layer> {
    let mut table = toml::Table::new();
    for pair in pairs {
        let (parts, value) = split_pair(pair)?;
        let value: toml::Value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_owned()));
        let mut cur = &mut table;
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                cur.insert(part.clone(), value.clone());
            } else {
                let entry = cur
                    .entry(part.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = entry
                    .as_table_mut()
                    .ok_or_else(|| anyhow!("-c {pair}: `{part}` is not a table"))?;
            }
        }
    }
    Ok(Layer {
        origin: "-c flags".to_owned(),
        table,
        project: false,
    })
}

/// One piece of a layer routed to one plugin: the section-level object and the key prefix the
/// user wrote it under (for messages).
struct Fragment {
    plugin: &'static Plugin,
    prefix: String,
    value: Value,
}

fn spec_of(p: &Plugin) -> Option<&SettingsSpec> {
    p.settings.as_ref()
}

fn toml_to_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The first non-finite float (`nan`, `inf`) in `table`, as a dotted key: JSON has no such
/// number, so it would silently become "unset".
fn non_finite(table: &toml::Table) -> Option<String> {
    fn walk(v: &toml::Value, path: &str) -> Option<String> {
        match v {
            toml::Value::Float(f) if !f.is_finite() => Some(path.to_owned()),
            toml::Value::Table(t) => t.iter().find_map(|(k, x)| {
                walk(
                    x,
                    &if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    },
                )
            }),
            toml::Value::Array(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, x)| walk(x, &format!("{path}[{i}]"))),
            _ => None,
        }
    }
    table.iter().find_map(|(k, v)| walk(v, k))
}

/// The first leaf of `value` (a section-level object) that `spec` restricts, as a dotted key.
fn restricted_leaf(spec: &SettingsSpec, value: &Value, path: &str) -> Option<String> {
    if !path.is_empty() && spec.is_restricted(path) {
        return Some(path.to_owned());
    }
    match value {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            restricted_leaf(spec, v, &p)
        }),
        _ => None,
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Routes one layer's keys to the plugins of `set`, and reads `plugins.disable`.
fn route(
    set: &[&'static Plugin],
    layer: &Layer,
    disabled: &mut Option<(Vec<String>, String)>,
) -> Result<Vec<Fragment>> {
    let origin = &layer.origin;
    let mut out = Vec::new();
    for (key, value) in &layer.table {
        if key == "plugins" {
            let toml::Value::Table(t) = value else {
                bail!(
                    "{origin}: plugins: expected a table, found {}",
                    type_name(value)
                );
            };
            for (id, v) in t {
                if id == "disable" {
                    let ids: Vec<String> = match v {
                        toml::Value::Array(a) => a
                            .iter()
                            .map(|x| x.as_str().map(str::to_owned))
                            .collect::<Option<_>>()
                            .ok_or_else(|| {
                                anyhow!(
                                    "{origin}: plugins.disable: expected an array of plugin ids"
                                )
                            })?,
                        other => bail!(
                            "{origin}: plugins.disable: expected an array of plugin ids, found {}",
                            type_name(other)
                        ),
                    };
                    *disabled = Some((ids, origin.clone()));
                    continue;
                }
                let Some(p) = set.iter().find(|p| p.id == id) else {
                    bail!(
                        "{origin}: plugins.{id}: unknown plugin (known: {})",
                        dsh_kernel::preset_ids(set).join(", ")
                    );
                };
                if spec_of(p).is_none() {
                    bail!("{origin}: plugins.{id}: this plugin has no settings");
                }
                if !v.is_table() {
                    bail!(
                        "{origin}: plugins.{id}: expected a table, found {}",
                        type_name(v)
                    );
                }
                out.push(Fragment {
                    plugin: p,
                    prefix: format!("plugins.{id}"),
                    value: toml_to_json(v),
                });
            }
            continue;
        }
        let alias_owners: Vec<&'static Plugin> = set
            .iter()
            .copied()
            .filter(|p| spec_of(p).is_some_and(|s| s.aliases.contains(&key.as_str())))
            .collect();
        if !alias_owners.is_empty() {
            let toml::Value::Table(t) = value else {
                bail!(
                    "{origin}: {key}: expected a table, found {}",
                    type_name(value)
                );
            };
            if let [only] = alias_owners.as_slice() {
                out.push(Fragment {
                    plugin: only,
                    prefix: key.clone(),
                    value: toml_to_json(value),
                });
                continue;
            }
            // A shared alias: each key goes to the plugins whose schema declares it (each
            // owner's keys read from its schema once).
            let owner_keys: Vec<(&'static Plugin, Vec<String>)> = alias_owners
                .iter()
                .map(|p| (*p, spec_of(p).map(SettingsSpec::keys).unwrap_or_default()))
                .collect();
            let mut per: BTreeMap<&str, (&'static Plugin, Map<String, Value>)> = BTreeMap::new();
            for (k, v) in t {
                let owners: Vec<&'static Plugin> = owner_keys
                    .iter()
                    .filter(|(_, keys)| keys.contains(k))
                    .map(|(p, _)| *p)
                    .collect();
                if owners.is_empty() {
                    let mut known: Vec<String> = owner_keys
                        .iter()
                        .flat_map(|(_, keys)| keys.clone())
                        .collect();
                    known.sort();
                    known.dedup();
                    bail!(
                        "{origin}: {key}.{k}: unknown key (expected one of {})",
                        known.join(", ")
                    );
                }
                for p in owners {
                    per.entry(p.id)
                        .or_insert_with(|| (p, Map::new()))
                        .1
                        .insert(k.clone(), toml_to_json(v));
                }
            }
            for (_, (p, m)) in per {
                out.push(Fragment {
                    plugin: p,
                    prefix: key.clone(),
                    value: Value::Object(m),
                });
            }
            continue;
        }
        let key_owners: Vec<&'static Plugin> = set
            .iter()
            .copied()
            .filter(|p| spec_of(p).is_some_and(|s| s.top_level.contains(&key.as_str())))
            .collect();
        // Observers get the key too; whether a booted plugin enforces it is checked in `load`,
        // once `plugins.disable` is known.
        let observers: Vec<&'static Plugin> = set
            .iter()
            .copied()
            .filter(|p| spec_of(p).is_some_and(|s| s.observes.contains(&key.as_str())))
            .collect();
        let key_owners: Vec<&'static Plugin> = key_owners.into_iter().chain(observers).collect();
        if key_owners.is_empty() {
            bail!(
                "{origin}: unknown key `{key}` (top-level keys: {}; sections: {}; or \
                 [plugins.<id>])",
                top_level_keys(set).join(", "),
                alias_names(set).join(", ")
            );
        }
        for p in key_owners {
            let mut m = Map::new();
            m.insert(key.clone(), toml_to_json(value));
            out.push(Fragment {
                plugin: p,
                prefix: String::new(),
                value: Value::Object(m),
            });
        }
    }
    Ok(out)
}

/// The top-level keys the plugins of `set` declare, sorted.
pub fn top_level_keys(set: &[&'static Plugin]) -> Vec<&'static str> {
    let mut v: Vec<&str> = set
        .iter()
        .filter_map(|p| spec_of(p))
        .flat_map(|s| s.top_level.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The section aliases the plugins of `set` declare, sorted.
pub fn alias_names(set: &[&'static Plugin]) -> Vec<&'static str> {
    let mut v: Vec<&str> = set
        .iter()
        .filter_map(|p| spec_of(p))
        .flat_map(|s| s.aliases.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// serde's wording in TOML terms: `u64` is "a non-negative integer", a map "a table", a
/// sequence "an array".
fn humanize(message: &str) -> String {
    let mut m = message.to_owned();
    for (from, to) in [
        ("expected a nonzero u64", "expected a positive integer"),
        ("expected a nonzero u32", "expected a positive integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u8", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a map", "expected a table"),
        ("expected a sequence", "expected an array"),
        ("invalid type: map", "invalid type: table"),
        ("invalid type: sequence", "invalid type: array"),
    ] {
        m = m.replace(from, to);
    }
    if let Some(i) = m.find("expected struct ") {
        m.truncate(i);
        m.push_str("expected a table");
    }
    m
}

/// Checks one fragment against its plugin's settings type; the message names the origin, the
/// key as the user wrote it and serde's reason (the unknown field or the expected type).
fn check(origin: &str, f: &Fragment) -> Result<()> {
    let Some(spec) = spec_of(f.plugin) else {
        return Ok(());
    };
    let Err(e) = (spec.check)(&f.value) else {
        return Ok(());
    };
    let mut key = f.prefix.clone();
    let mut push = |seg: &str| {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(seg);
    };
    let field = e
        .message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next());
    if e.path != "." {
        push(&e.path);
    }
    if let Some(field) = field
        && !(e.path == field || e.path.ends_with(&format!(".{field}")))
    {
        push(field);
    }
    let message = humanize(&e.message);
    if key.is_empty() {
        bail!("{origin}: {message}");
    }
    bail!("{origin}: {key}: {message}")
}

fn merge_json(into: &mut Value, from: &Value, path: &str, origin: &str, origins: &mut Origins) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let slot = a.entry(k.clone()).or_insert(Value::Null);
                if slot.is_object() && v.is_object() {
                    merge_json(slot, v, &p, origin, origins);
                } else {
                    *slot = v.clone();
                    record(v, &p, origin, origins);
                }
            }
        }
        (slot, v) => {
            *slot = v.clone();
            record(v, path, origin, origins);
        }
    }
}

type Origins = Vec<(String, String)>;

fn record(v: &Value, path: &str, origin: &str, origins: &mut Origins) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                record(x, &format!("{path}.{k}"), origin, origins);
            }
        }
        _ => origins.push((path.to_owned(), origin.to_owned())),
    }
}

/// Routes and checks every layer for the plugin `set`, merging later over earlier.
///
/// # Errors
/// The first unknown key, unknown plugin or ill-typed value, naming its layer.
pub fn resolve(set: &[&'static Plugin], layers: &[Layer]) -> Result<Resolved> {
    let mut sections: BTreeMap<String, Value> = BTreeMap::new();
    let mut origins: BTreeMap<String, String> = BTreeMap::new();
    let mut disabled = None;
    for layer in layers {
        if let Some(key) = non_finite(&layer.table) {
            bail!(
                "{}: {key}: `nan` and `inf` are not numbers a setting accepts",
                layer.origin
            );
        }
        for f in route(set, layer, &mut disabled)? {
            check(&layer.origin, &f)?;
            if layer.project
                && let Some(spec) = spec_of(f.plugin)
                && let Some(leaf) = restricted_leaf(spec, &f.value, "")
            {
                let key = if f.prefix.is_empty() {
                    leaf
                } else {
                    format!("{}.{leaf}", f.prefix)
                };
                bail!(
                    "{}: {key}: a project's settings may not set this (it decides where \
                     credentials are sent, widens permissions or runs commands); set it in \
                     $DSH_HOME/settings.toml, with -c or on the command line",
                    layer.origin
                );
            }
            let section = sections
                .entry(f.plugin.id.to_owned())
                .or_insert_with(|| json!({}));
            let mut rec = Vec::new();
            merge_json(section, &f.value, "", &layer.origin, &mut rec);
            for (path, origin) in rec {
                origins.insert(format!("{} {path}", f.plugin.id), origin);
            }
        }
    }
    let (disabled, disabled_origin) = match disabled {
        Some((ids, origin)) => (ids, Some(origin)),
        None => (Vec::new(), None),
    };
    Ok(Resolved {
        sections,
        origins,
        disabled,
        disabled_origin,
    })
}

/// The string at `section.key`, if set.
fn get_str(resolved: &Resolved, section: &str, key: &str) -> Option<String> {
    resolved
        .sections
        .get(section)
        .and_then(|s| s.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Loads every layer for workspace `cwd` and resolves the effective configuration for the plugin
/// set `preset` whose built-in defaults are the TOML text `defaults`.
///
/// # Errors
/// Unreadable or invalid files, unknown keys, ill-typed values (each naming key and file), an
/// unknown id in `plugins.disable`.
pub fn load(
    preset: &[&'static Plugin],
    defaults: &str,
    cwd: &Path,
    overrides: &Overrides,
) -> Result<Config> {
    let dsh_home = dsh_home()?;
    let mut layers = vec![Layer {
        origin: "built-in defaults".to_owned(),
        table: defaults
            .parse()
            .map_err(|e: toml::de::Error| anyhow!("built-in defaults: {}", e.message()))?,
        project: false,
    }];
    if let Some(l) = read_layer(&dsh_home.join("settings.toml"))? {
        layers.push(l);
    }
    if let Some(mut l) = read_layer(&cwd.join(".dsh").join("settings.toml"))? {
        l.project = true;
        layers.push(l);
    }
    layers.push(flag_layer(&overrides.pairs)?);
    let mut cli = toml::Table::new();
    for (k, v) in [
        ("provider", &overrides.provider),
        ("model", &overrides.model),
        ("permission_mode", &overrides.permission_mode),
    ] {
        if let Some(v) = v {
            cli.insert(k.to_owned(), toml::Value::String(v.clone()));
        }
    }
    layers.push(Layer {
        origin: "command line".to_owned(),
        table: cli,
        project: false,
    });
    let resolved = resolve(preset, &layers)?;
    let plugins = dsh_kernel::without(preset, &resolved.disabled).map_err(|e| {
        anyhow!(
            "{}: {e}",
            resolved.disabled_origin.as_deref().unwrap_or("settings")
        )
    })?;
    // A top-level key some booted plugin reads but none of them enforces (its owner disabled):
    // refuse it rather than accept a setting that does nothing.
    for layer in &layers {
        if layer.origin == "built-in defaults" {
            continue;
        }
        for key in layer.table.keys() {
            let owned = |ps: &[&'static Plugin]| {
                ps.iter()
                    .any(|p| spec_of(p).is_some_and(|s| s.top_level.contains(&key.as_str())))
            };
            let observed = plugins
                .iter()
                .any(|p| spec_of(p).is_some_and(|s| s.observes.contains(&key.as_str())));
            if observed && !owned(&plugins) {
                bail!(
                    "{}: `{key}` is set, but no plugin of this harness enforces it (the plugin \
                     that owns it is disabled or not in the plugin set)",
                    layer.origin
                );
            }
        }
    }
    // Two different plugins with one id (or an ordering cycle) are a harness error every
    // command reports, not only the ones that boot.
    dsh_kernel::plugin_order(&plugins).map_err(|e| anyhow!("the harness's plugin set: {e}"))?;
    let plugins = {
        let mut seen = std::collections::BTreeSet::new();
        plugins
            .into_iter()
            .filter(|p| seen.insert(p.id))
            .collect::<Vec<_>>()
    };
    let agent = "dsh-agent";
    let provider = get_str(&resolved, agent, "provider").unwrap_or_default();
    let model = get_str(&resolved, agent, "model").unwrap_or_default();
    let model_is_default = resolved
        .origins
        .get(&format!("{agent} model"))
        .is_none_or(|o| o == "built-in defaults");
    if provider.trim().is_empty() {
        bail!("the provider id is empty: set `provider` in settings or pass --provider");
    }
    if !model_is_default && model.trim().is_empty() {
        bail!("the model id is empty");
    }
    let max_tokens = resolved
        .sections
        .get(agent)
        .and_then(|s| s.get("max_tokens"))
        .and_then(Value::as_u64);
    if max_tokens == Some(0) {
        bail!("max_tokens must be a positive number of tokens");
    }
    Ok(Config {
        dsh_home,
        cwd: cwd.to_path_buf(),
        launch_dir: overrides
            .launch_dir
            .clone()
            .unwrap_or_else(|| cwd.to_path_buf()),
        provider,
        model,
        model_is_default,
        max_tokens,
        persist: !overrides.ephemeral,
        plugins,
        resolved,
        layers,
    })
}

impl Config {
    /// The kernel settings the plugins read: every routed section under its plugin id, plus the
    /// run facts `dsh_home`, `workspace`, `launch_dir` and `ephemeral`.
    pub fn kernel_settings(&self) -> dsh_kernel::Settings {
        let mut s = dsh_kernel::Settings::new();
        for (id, v) in &self.resolved.sections {
            s = s.with_section(id.clone(), v.clone());
        }
        // The process's directory (relative configured paths resolve against it), which differs
        // from `launch_dir` under `-C`.
        let launch = std::env::current_dir().unwrap_or_else(|_| self.launch_dir.clone());
        s.with_fact("dsh_home", json!(self.dsh_home))
            .with_fact("workspace", json!(self.cwd))
            .with_fact("launch_dir", json!(launch))
            .with_fact("ephemeral", json!(!self.persist))
            // Which layer set each key (`"<plugin id> <key>"` → a settings file's path, or
            // `-c flags` / `command line` / `built-in defaults`): plugins resolve relative paths
            // a file names against that file's directory.
            .with_fact("setting_origins", json!(self.resolved.origins))
    }

    /// The sessions directory: the persistence seam's `dir` made absolute, else
    /// `$DSH_HOME/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        get_str(&self.resolved, "dsh-persistence", "dir")
            .and_then(|d| absolute(Path::new(&d)).ok())
            .unwrap_or_else(|| self.dsh_home.join("sessions"))
    }

    /// The model for `route_models` (the booted route's model ids): the configured model when a
    /// user layer set one, else the route's first listed model, else the built-in default.
    pub fn model_for(&self, route_models: &[String]) -> String {
        if self.model_is_default
            && let Some(first) = route_models.first()
            && !route_models.contains(&self.model)
        {
            return first.clone();
        }
        self.model.clone()
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
    fn flag_keys_honour_toml_quoted_segments() {
        let l = flag_layer(&[
            r#"models."mystery-1".input_price=1"#.into(),
            r#"models."mystery-1".output_price=10"#.into(),
            r#"models."qwen2.5-coder".context_window=32768"#.into(),
            "models.'a=b.c' . thinks = true".into(),
            r#"models."q\"x".thinks=false"#.into(),
        ])
        .unwrap();
        let models = l.table["models"].as_table().unwrap();
        let keys: Vec<&str> = models.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a=b.c", "mystery-1", "q\"x", "qwen2.5-coder"]);
        assert_eq!(
            models["mystery-1"].to_string(),
            "{ input_price = 1, output_price = 10 }"
        );
        assert_eq!(
            models["qwen2.5-coder"].to_string(),
            "{ context_window = 32768 }"
        );
        assert_eq!(models["a=b.c"].to_string(), "{ thinks = true }");
        assert_eq!(models["q\"x"].to_string(), "{ thinks = false }");
        for (bad, msg) in [
            (r#"models."open.x=1"#, "unterminated quoted key segment"),
            (r#"models."a"b.x=1"#, "`b` after a quoted key segment"),
            ("models..x=1", "empty key segment"),
            ("models.x", "expected key=value"),
        ] {
            let e = flag_layer(&[bad.into()]).unwrap_err().to_string();
            assert_eq!(e, format!("-c {bad}: {msg}"));
        }
    }

    #[test]
    fn configured_paths_become_absolute() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("rel/dir")).unwrap(), cwd.join("rel/dir"));
        assert_eq!(absolute(Path::new("/abs")).unwrap(), PathBuf::from("/abs"));
        let home = dirs::home_dir().unwrap();
        assert_eq!(absolute(Path::new("~/x")).unwrap(), home.join("x"));
    }
}
