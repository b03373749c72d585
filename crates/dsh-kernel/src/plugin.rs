//! Link-time plugins and boot.
//!
//! Every crate declares one static [`PluginDescriptor`] with [`crate::plugin!`]; the descriptors
//! are collected at link time (through `inventory`, which plugin crates never name directly).
//! [`Kernel::boot`] applies them in a deterministic order computed from their `after`/`before`
//! keys (ties broken by id), never from link order. Each plugin runs in its own child scope of
//! the root; a plugin whose `apply` fails has its scope disposed, the others stay applied, and
//! boot reports every failure by id.
//!
//! A crate that is only listed in `Cargo.toml` is not linked and its descriptor silently
//! vanishes: every final link names its plugins with `use dsh_x as _;`, and a test pins the exact
//! id set.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{BoxError, KernelError, Result};
use crate::scope::Context;

/// The static description of one plugin.
#[derive(Debug)]
pub struct PluginDescriptor {
    /// The plugin id: the crate's package name (e.g. `"dsh-session"`).
    pub id: &'static str,
    /// Ids this plugin must be applied after (ignored when not present in the set).
    pub after: &'static [&'static str],
    /// Ids this plugin must be applied before (ignored when not present in the set).
    pub before: &'static [&'static str],
    /// Registers the plugin's services, listeners and effects through the given scope.
    /// Configuration is read from the [`crate::Settings`] service.
    pub apply: fn(&Context) -> std::result::Result<(), BoxError>,
}

inventory::collect!(PluginDescriptor);

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}

/// Declares the calling crate's plugin descriptor, collected at link time.
///
/// The id defaults to the package name (`CARGO_PKG_NAME`); `after`/`before` are optional.
///
/// ```ignore
/// fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> { Ok(()) }
/// dsh_kernel::plugin! { after = ["dsh-llm"], apply = apply }
/// ```
#[macro_export]
macro_rules! plugin {
    (@build $id:expr; $(after = [$($a:expr),* $(,)?],)? $(before = [$($b:expr),* $(,)?],)? apply = $f:expr $(,)?) => {
        $crate::__private::inventory::submit! {
            $crate::PluginDescriptor {
                id: $id,
                after: &[$($($a),*)?],
                before: &[$($($b),*)?],
                apply: $f,
            }
        }
    };
    (id = $id:expr, $($rest:tt)*) => {
        $crate::plugin!(@build $id; $($rest)*);
    };
    ($($rest:tt)*) => {
        $crate::plugin!(@build env!("CARGO_PKG_NAME"); $($rest)*);
    };
}

/// Every plugin descriptor linked into this binary, sorted by id.
pub fn linked_plugins() -> Vec<&'static PluginDescriptor> {
    let mut v: Vec<_> = inventory::iter::<PluginDescriptor>.into_iter().collect();
    v.sort_by_key(|d| d.id);
    v
}

/// Orders descriptors by their keys: Kahn's algorithm, ready set ordered by id.
///
/// # Errors
/// [`KernelError::DuplicatePlugin`] for a repeated id, [`KernelError::PluginCycle`] when the keys
/// cannot be satisfied.
pub fn plugin_order<'a>(descs: &[&'a PluginDescriptor]) -> Result<Vec<&'a PluginDescriptor>> {
    let mut by_id: BTreeMap<&str, &'a PluginDescriptor> = BTreeMap::new();
    for d in descs {
        if by_id.insert(d.id, d).is_some() {
            return Err(KernelError::DuplicatePlugin {
                id: d.id.to_owned(),
            });
        }
    }
    // edges: from -> to (from applied first)
    let mut succ: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut indeg: BTreeMap<&str, usize> = by_id.keys().map(|k| (*k, 0)).collect();
    let mut add_edge = |from: &'static str, to: &'static str| {
        if from != to && succ.entry(from).or_default().insert(to) {
            *indeg.entry(to).or_default() += 1;
        }
    };
    for d in by_id.values() {
        for a in d.after {
            if by_id.contains_key(a) {
                add_edge(a, d.id);
            }
        }
        for b in d.before {
            if by_id.contains_key(b) {
                add_edge(d.id, b);
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

/// What [`Kernel::boot`] applied.
#[derive(Debug, Default)]
pub struct BootReport {
    /// Ids applied successfully, in boot order.
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
    /// A kernel with an empty root scope. Nothing is applied until [`Kernel::boot`].
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

    /// Applies every linked plugin ([`linked_plugins`]) in key order.
    ///
    /// # Errors
    /// As [`Kernel::boot_with`].
    pub async fn boot(&self) -> Result<BootReport> {
        self.boot_with(&linked_plugins()).await
    }

    /// Applies `descs` in key order, each in its own child scope of the root.
    ///
    /// # Errors
    /// [`KernelError::DuplicatePlugin`] / [`KernelError::PluginCycle`] before anything is
    /// applied; [`KernelError::PluginFailed`] naming every plugin whose `apply` failed (those are
    /// disposed; the rest stay applied).
    pub async fn boot_with(&self, descs: &[&'static PluginDescriptor]) -> Result<BootReport> {
        let order = plugin_order(descs)?;
        let mut report = BootReport::default();
        let mut failures = Vec::new();
        for d in order {
            match self.root.apply_plugin(d).await {
                Ok(scope) => {
                    report.applied.push(d.id);
                    self.plugins
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((d.id, scope));
                }
                Err(e) => {
                    // Returned to the caller in `PluginFailed`, which decides how loud to be.
                    tracing::warn!(target: "dsh_kernel", plugin = d.id, error = %e, "plugin failed to apply");
                    failures.push((d.id.to_owned(), e));
                }
            }
        }
        if failures.is_empty() {
            Ok(report)
        } else {
            Err(KernelError::PluginFailed { failures })
        }
    }

    /// The scope a booted plugin was applied in.
    pub fn plugin_scope(&self, id: &str) -> Option<Context> {
        self.plugins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(pid, _)| *pid == id)
            .map(|(_, c)| c.clone())
    }

    /// Ids of the plugins applied so far, in boot order.
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

impl Context {
    /// Applies one plugin by hand in a fresh child scope labelled `plugin:<id>` and returns that
    /// scope. On failure the scope is disposed and the plugin's error returned.
    ///
    /// # Errors
    /// The plugin's own error, or [`KernelError::InactiveScope`] (boxed) if this scope is
    /// inactive.
    pub async fn apply_plugin(
        &self,
        desc: &PluginDescriptor,
    ) -> std::result::Result<Context, BoxError> {
        let scope = self.child(format!("plugin:{}", desc.id))?;
        match (desc.apply)(&scope) {
            Ok(()) => Ok(scope),
            Err(e) => {
                scope.dispose().await;
                Err(e)
            }
        }
    }
}
