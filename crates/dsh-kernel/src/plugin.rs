//! Plugins, presets and the two-phase boot.
//!
//! Every crate exports one typed plugin static, `pub static PLUGIN: dsh_kernel::Plugin`, declared
//! with [`crate::plugin!`]. Ordering keys refer to other crates' statics (`after =
//! [dsh_tools::PLUGIN]`), so a misspelt key does not compile. A binary names its plugin set once
//! with [`crate::preset!`]; [`Kernel::boot_preset`] boots exactly that set minus the ids a user
//! disabled (`plugins.disable` in the settings), in an order computed from the keys (ties broken
//! by id), never from link order.
//!
//! Boot has two phases. Phase 1 (`register`) runs every plugin's register hook in order: a
//! plugin provides its own services and declares its events there and looks up nothing of
//! another plugin. Phase 2 (`start`) runs every surviving plugin's start hook in the same order:
//! now every service of phase 1 exists, so a plugin looks up the seams it needs (a tool registry,
//! a backend registry) and plugs into them. Each plugin runs in its own child scope of the root;
//! a plugin whose hook fails has its scope disposed and is skipped in later phases, the others
//! stay, and boot reports every failure by id.
//!
//! Each plugin is also submitted to a link-time registry (`inventory`, never named by plugin
//! crates). The registry does not decide what boots — the preset does — but it lets a binary
//! audit what its dependencies linked ([`linked_plugins`]) and lets a crate's own tests boot the
//! linked set with [`Kernel::boot`].

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{BoxError, KernelError, Result};
use crate::scope::Context;
use crate::settings::SettingsSpec;

/// A plugin hook: registers services, listeners and effects through the plugin's scope.
/// Configuration is read from the [`crate::Settings`] service.
pub type PluginHook = fn(&Context) -> std::result::Result<(), BoxError>;

/// The static description of one plugin; every plugin crate exports one as `PLUGIN`.
#[derive(Debug)]
pub struct Plugin {
    /// The plugin id: the crate's package name (e.g. `"dsh-session"`).
    pub id: &'static str,
    /// Plugins this one runs after in each phase (ignored when not in the booted set).
    pub after: &'static [&'static Plugin],
    /// Plugins this one runs before in each phase (ignored when not in the booted set).
    pub before: &'static [&'static Plugin],
    /// The plugin's typed settings: its section, user-facing aliases and JSON Schema.
    pub settings: Option<SettingsSpec>,
    /// Phase 1: provide this plugin's own services; look up nothing of another plugin.
    pub register: Option<PluginHook>,
    /// Phase 2: look up other plugins' services and plug into them.
    pub start: Option<PluginHook>,
}

impl PartialEq for Plugin {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Plugin {}

/// A link-time registration of one [`Plugin`] (what [`crate::plugin!`] submits).
#[derive(Debug)]
pub struct Linked(pub &'static Plugin);

inventory::collect!(Linked);

#[doc(hidden)]
pub mod __private {
    pub use inventory;
    pub use schemars;

    use crate::settings::SettingsCheckError;

    /// The JSON Schema of `T`, as a JSON value.
    pub fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
        serde_json::to_value(schema).unwrap_or_default()
    }

    /// Deserializes `value` into `T`, reporting the failing path.
    pub fn check_as<T: serde::de::DeserializeOwned>(
        value: &serde_json::Value,
    ) -> Result<(), SettingsCheckError> {
        serde_path_to_error::deserialize::<_, T>(value)
            .map(|_| ())
            .map_err(|e| SettingsCheckError {
                path: e.path().to_string(),
                message: e.inner().to_string(),
            })
    }
}

/// Declares the calling crate's plugin as `pub static PLUGIN: dsh_kernel::Plugin` and submits it
/// to the link-time registry.
///
/// Every field is optional and, when present, comes in this order: `id` (default: the package
/// name), `after` / `before` (other plugins' statics), `settings` (a type implementing
/// `serde::Deserialize` and `schemars::JsonSchema`; by convention `#[serde(default,
/// deny_unknown_fields)]` with snake_case keys), `aliases` (user-facing TOML sections routed to
/// this plugin's section, e.g. `["persistence"]`), `top_level` (top-level settings keys this
/// plugin owns under the same name, e.g. `["permission_mode"]`), `observes` (top-level keys it
/// also reads but does not enforce: a key only observed is unknown to the loader), `restricted`
/// (keys of its section a project's settings file may not set, dotted, `*` for any one segment,
/// e.g. `["*.base_url", "*.api_key_env"]`), `register` (phase 1) and `start` (phase 2).
///
/// ```
/// use dsh_kernel::{BoxError, Context};
///
/// #[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(default, deny_unknown_fields)]
/// pub struct Config {
///     /// How many widgets.
///     pub widgets: u32,
/// }
///
/// fn start(ctx: &Context) -> Result<(), BoxError> {
///     let _config: Config = ctx.settings_section(PLUGIN.id)?;
///     Ok(())
/// }
///
/// dsh_kernel::plugin! {
///     id = "demo-plugin",
///     settings = Config,
///     aliases = ["demo"],
///     start = start,
/// }
///
/// assert_eq!(PLUGIN.id, "demo-plugin");
/// assert_eq!(PLUGIN.settings.as_ref().unwrap().aliases, ["demo"]);
/// ```
#[macro_export]
macro_rules! plugin {
    (@parse
        $(id = $id:expr,)?
        $(after = [$($a:path),* $(,)?],)?
        $(before = [$($b:path),* $(,)?],)?
        $(settings = $settings:ty,)?
        $(aliases = [$($alias:expr),* $(,)?],)?
        $(top_level = [$($key:expr),* $(,)?],)?
        $(observes = [$($obs:expr),* $(,)?],)?
        $(restricted = [$($res:expr),* $(,)?],)?
        $(register = $register:expr,)?
        $(start = $start:expr,)?
        $(,)?
    ) => {
        /// This crate's plugin: its id, ordering keys, settings and boot hooks.
        pub static PLUGIN: $crate::Plugin = $crate::Plugin {
            id: $crate::plugin!(@id $($id)?),
            after: &[$($(&$a),*)?],
            before: &[$($(&$b),*)?],
            settings: $crate::plugin!(@settings [$($settings)?] [$($($alias),*)?] [$($($key),*)?]
                [$($($obs),*)?] [$($($res),*)?]),
            register: $crate::plugin!(@hook $($register)?),
            start: $crate::plugin!(@hook $($start)?),
        };
        $crate::__private::inventory::submit! { $crate::Linked(&PLUGIN) }
    };
    (@parse $($rest:tt)*) => {
        compile_error!(concat!(
            "dsh_kernel::plugin!: expected the fields `id`, `after`, `before`, `settings`, ",
            "`aliases`, `top_level`, `observes`, `restricted`, `register`, `start` (each ",
            "optional, in this order), got: ",
            stringify!($($rest)*)
        ));
    };
    (@id) => { env!("CARGO_PKG_NAME") };
    (@id $id:expr) => { $id };
    (@hook) => { None };
    (@hook $f:expr) => { Some($f) };
    (@settings [] [$($alias:expr),*] [$($key:expr),*] [$($obs:expr),*] [$($res:expr),*]) => {
        None
    };
    (@settings [$t:ty] [$($alias:expr),*] [$($key:expr),*] [$($obs:expr),*] [$($res:expr),*]) => {
        Some($crate::SettingsSpec {
            aliases: &[$($alias),*],
            top_level: &[$($key),*],
            observes: &[$($obs),*],
            restricted: &[$($res),*],
            schema: $crate::__private::schema_of::<$t>,
            check: $crate::__private::check_as::<$t>,
        })
    };
    ($($field:tt)*) => {
        $crate::plugin!(@parse $($field)* ,);
    };
}

/// Names a plugin set once: `preset! { pub static DEFAULT = [a::PLUGIN, b::PLUGIN] }` defines
/// `pub static DEFAULT: &[&Plugin]` (doc comments before `pub` are kept). Naming each static is also what makes the linker
/// keep each crate, so a preset needs no `use crate as _;` lines. Pin the set in a test with
/// [`preset_ids`].
#[macro_export]
macro_rules! preset {
    ($(#[$meta:meta])* $vis:vis static $name:ident = [$($p:path),* $(,)?] $(;)?) => {
        $(#[$meta])*
        $vis static $name: &[&$crate::Plugin] = &[$(&$p),*];
    };
}

/// The ids of a plugin set, sorted.
pub fn preset_ids(set: &[&'static Plugin]) -> Vec<&'static str> {
    let mut ids: Vec<_> = set.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    ids
}

/// Every plugin linked into this binary (whether or not a preset names it), sorted by id.
pub fn linked_plugins() -> Vec<&'static Plugin> {
    let mut v: Vec<_> = inventory::iter::<Linked>.into_iter().map(|l| l.0).collect();
    v.sort_by_key(|d| d.id);
    v.dedup_by_key(|d| d.id);
    v
}

/// Orders plugins by their keys: Kahn's algorithm, ready set ordered by id.
///
/// # Errors
/// [`KernelError::DuplicatePlugin`] for two different plugins with one id,
/// [`KernelError::PluginCycle`] when the keys cannot be satisfied.
pub fn plugin_order(descs: &[&'static Plugin]) -> Result<Vec<&'static Plugin>> {
    let mut by_id: BTreeMap<&str, &'static Plugin> = BTreeMap::new();
    for d in descs {
        if let Some(prev) = by_id.insert(d.id, d)
            && !std::ptr::eq(prev, *d)
        {
            return Err(KernelError::DuplicatePlugin {
                id: d.id.to_owned(),
            });
        }
    }
    // edges: from -> to (from runs first)
    let mut succ: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut indeg: BTreeMap<&str, usize> = by_id.keys().map(|k| (*k, 0)).collect();
    let mut add_edge = |from: &'static str, to: &'static str| {
        if from != to && succ.entry(from).or_default().insert(to) {
            *indeg.entry(to).or_default() += 1;
        }
    };
    for d in by_id.values() {
        for a in d.after {
            if by_id.contains_key(a.id) {
                add_edge(a.id, d.id);
            }
        }
        for b in d.before {
            if by_id.contains_key(b.id) {
                add_edge(d.id, b.id);
            }
        }
    }
    let mut ready: BTreeSet<&str> = indeg
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(k, _)| *k)
        .collect();
    let mut out = Vec::with_capacity(by_id.len());
    while let Some(id) = ready.pop_first() {
        if let Some(d) = by_id.get(id) {
            out.push(*d);
        }
        if let Some(next) = succ.get(id) {
            for n in next {
                if let Some(c) = indeg.get_mut(n) {
                    *c -= 1;
                    if *c == 0 {
                        ready.insert(n);
                    }
                }
            }
        }
    }
    if out.len() != by_id.len() {
        let done: BTreeSet<&str> = out.iter().map(|d| d.id).collect();
        return Err(KernelError::PluginCycle {
            ids: by_id
                .keys()
                .filter(|k| !done.contains(*k))
                .map(|k| (*k).to_owned())
                .collect(),
        });
    }
    Ok(out)
}

/// The set a preset boots once `disabled` ids are left out.
///
/// # Errors
/// [`KernelError::UnknownPlugin`] when a disabled id is not in the set (a typo would otherwise
/// silently keep the plugin).
pub fn without(set: &[&'static Plugin], disabled: &[String]) -> Result<Vec<&'static Plugin>> {
    for id in disabled {
        if !set.iter().any(|p| p.id == id) {
            return Err(KernelError::UnknownPlugin {
                id: id.clone(),
                known: preset_ids(set).into_iter().map(str::to_owned).collect(),
            });
        }
    }
    Ok(set
        .iter()
        .filter(|p| !disabled.iter().any(|d| d == p.id))
        .copied()
        .collect())
}

/// What [`Kernel::boot_with`] started.
#[derive(Debug, Default)]
pub struct BootReport {
    /// Ids that passed both phases, in boot order.
    pub applied: Vec<&'static str>,
}

/// The kernel: a root scope plus the plugin scopes it booted.
#[derive(Debug)]
pub struct Kernel {
    root: Context,
    plugins: std::sync::Mutex<Vec<(&'static str, Context)>>,
}

impl Default for Kernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel {
    /// A kernel with an empty root scope. Nothing is applied until a boot.
    pub fn new() -> Self {
        Self {
            root: Context::new_root("root"),
            plugins: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The root context (provide the [`crate::Settings`] service here before booting).
    pub fn root(&self) -> &Context {
        &self.root
    }

    /// Boots every linked plugin ([`linked_plugins`]) — for a crate's own tests; binaries boot
    /// a preset with [`Kernel::boot_preset`].
    ///
    /// # Errors
    /// As [`Kernel::boot_with`].
    pub async fn boot(&self) -> Result<BootReport> {
        self.boot_with(&linked_plugins()).await
    }

    /// Boots `set` minus the `disabled` ids.
    ///
    /// # Errors
    /// [`KernelError::UnknownPlugin`] for a disabled id outside the set, else as
    /// [`Kernel::boot_with`].
    pub async fn boot_preset(
        &self,
        set: &[&'static Plugin],
        disabled: &[String],
    ) -> Result<BootReport> {
        self.boot_with(&without(set, disabled)?).await
    }

    /// Boots `descs` in key order, phase 1 (`register`) for all, then phase 2 (`start`) for the
    /// survivors, each plugin in its own child scope of the root.
    ///
    /// # Errors
    /// [`KernelError::DuplicatePlugin`] / [`KernelError::PluginCycle`] before anything runs;
    /// [`KernelError::PluginFailed`] naming every plugin whose hook failed (those are disposed;
    /// the rest stay started).
    pub async fn boot_with(&self, descs: &[&'static Plugin]) -> Result<BootReport> {
        let order = plugin_order(descs)?;
        // A failure of a plugin whose `after` plugins are not booted most likely comes from
        // their absence: say so.
        let explain = |d: &Plugin, e: BoxError| -> BoxError {
            let missing: Vec<&str> = d
                .after
                .iter()
                .filter(|a| !descs.iter().any(|x| x.id == a.id))
                .map(|a| a.id)
                .collect();
            if missing.is_empty() {
                e
            } else {
                format!("{e} (it runs after {}, not booted)", missing.join(", ")).into()
            }
        };
        let mut failures: Vec<(String, BoxError)> = Vec::new();
        let mut live: Vec<(&'static Plugin, Context)> = Vec::with_capacity(order.len());
        for d in order {
            let scope = self.root.child(format!("plugin:{}", d.id))?;
            match run_hook(d.register, &scope) {
                Ok(()) => live.push((d, scope)),
                Err(e) => {
                    scope.dispose().await;
                    failures.push((d.id.to_owned(), explain(d, e)));
                }
            }
        }
        let mut report = BootReport::default();
        for (d, scope) in live {
            match run_hook(d.start, &scope) {
                Ok(()) => {
                    report.applied.push(d.id);
                    self.plugins
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((d.id, scope));
                }
                Err(e) => {
                    scope.dispose().await;
                    failures.push((d.id.to_owned(), explain(d, e)));
                }
            }
        }
        if failures.is_empty() {
            Ok(report)
        } else {
            for (id, e) in &failures {
                // Returned to the caller in `PluginFailed`, which decides how loud to be.
                tracing::warn!(target: "dsh_kernel", plugin = %id, error = %e, "plugin failed to start");
            }
            Err(KernelError::PluginFailed { failures })
        }
    }

    /// The scope a booted plugin runs in.
    pub fn plugin_scope(&self, id: &str) -> Option<Context> {
        self.plugins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(pid, _)| *pid == id)
            .map(|(_, c)| c.clone())
    }

    /// Ids of the plugins started so far, in boot order.
    pub fn applied(&self) -> Vec<&'static str> {
        self.plugins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(id, _)| *id)
            .collect()
    }

    /// Disposes the root scope (and with it every plugin scope).
    pub async fn dispose(&self) {
        self.root.dispose().await;
    }
}

fn run_hook(hook: Option<PluginHook>, scope: &Context) -> std::result::Result<(), BoxError> {
    match hook {
        Some(f) => f(scope),
        None => Ok(()),
    }
}

impl Context {
    /// Runs both phases of one plugin by hand in a fresh child scope labelled `plugin:<id>` and
    /// returns that scope. On failure the scope is disposed and the plugin's error returned.
    ///
    /// # Errors
    /// The plugin's own error, or [`KernelError::InactiveScope`] (boxed) if this scope is
    /// inactive.
    pub async fn apply_plugin(&self, desc: &Plugin) -> std::result::Result<Context, BoxError> {
        let scope = self.child(format!("plugin:{}", desc.id))?;
        match run_hook(desc.register, &scope).and_then(|()| run_hook(desc.start, &scope)) {
            Ok(()) => Ok(scope),
            Err(e) => {
                scope.dispose().await;
                Err(e)
            }
        }
    }
}
