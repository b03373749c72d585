//! The kernel's error type.

use std::fmt;

// The ErrorCode derive names the trait `dsh_kernel::ErrorCode`; here that is this crate.
use crate as dsh_kernel;

/// A boxed error as returned by listeners, disposers and plugin `apply` functions.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure the kernel reports. Each variant has a stable code ([`crate::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
#[non_exhaustive]
pub enum KernelError {
    /// A registration (service, listener, effect, child scope) was attempted through a scope that
    /// is disposing or disposed. Code `INACTIVE_SCOPE`.
    #[error("scope `{label}` is {state} and accepts no registrations")]
    #[code("INACTIVE_SCOPE")]
    InactiveScope {
        /// The scope's label.
        label: String,
        /// `disposing` or `disposed`.
        state: &'static str,
    },
    /// A service with the same type and name is already provided in this scope layer.
    /// Code `DUPLICATE_SERVICE`.
    #[error("service `{type_name}`{} is already provided in scope `{scope}`", name_suffix(.name))]
    #[code("DUPLICATE_SERVICE")]
    DuplicateService {
        /// `std::any::type_name` of the service.
        type_name: &'static str,
        /// The optional service name.
        name: Option<String>,
        /// Label of the scope layer that already holds it.
        scope: String,
    },
    /// [`crate::Context::require`] found no provider. Code `MISSING_SERVICE`.
    #[error("service `{type_name}`{} is not provided", name_suffix(.name))]
    #[code("MISSING_SERVICE")]
    MissingService {
        /// `std::any::type_name` of the service.
        type_name: &'static str,
        /// The optional service name.
        name: Option<String>,
    },
    /// A [`crate::ScopeKey`] already has a parent, or binding it would create a cycle.
    /// Code `SCOPE_PARENT`.
    #[error("cannot bind scope key parent: {reason}")]
    #[code("SCOPE_PARENT")]
    ScopeParent {
        /// Why the binding was refused.
        reason: &'static str,
    },
    /// Two linked plugin descriptors declare the same id. Code `DUPLICATE_PLUGIN`.
    #[error("plugin id `{id}` is declared twice")]
    #[code("DUPLICATE_PLUGIN")]
    DuplicatePlugin {
        /// The duplicated id.
        id: String,
    },
    /// The `after`/`before` keys of the plugin set form a cycle. Code `PLUGIN_CYCLE`.
    #[error("plugin ordering keys form a cycle through: {}", .ids.join(", "))]
    #[code("PLUGIN_CYCLE")]
    PluginCycle {
        /// Ids of the plugins left unordered.
        ids: Vec<String>,
    },
    /// One or more plugins failed to apply during boot; the others stay applied.
    /// Code `PLUGIN_FAILED`.
    #[error("{} plugin(s) failed to apply: {}", .failures.len(), describe_failures(.failures))]
    #[code("PLUGIN_FAILED")]
    PluginFailed {
        /// `(plugin id, error)` for every failed plugin, in boot order.
        failures: Vec<(String, BoxError)>,
    },
    /// One or more listeners of a `parallel` dispatch failed. Code `PARALLEL_FAILED`.
    #[error("{} listener(s) of `{event}` failed: {}", .errors.len(), join_errors(.errors))]
    #[code("PARALLEL_FAILED")]
    Parallel {
        /// The event name.
        event: &'static str,
        /// Every failure, in listener order.
        errors: Vec<BoxError>,
    },
    /// A `serial` listener returned an error; later listeners did not run.
    /// Code `LISTENER_FAILED`.
    #[error("listener of `{event}` failed: {source}")]
    #[code("LISTENER_FAILED")]
    Listener {
        /// The event name.
        event: &'static str,
        /// The listener's error.
        source: BoxError,
    },
    /// A disabled plugin id is not in the booted set. Code `UNKNOWN_PLUGIN`.
    #[error("unknown plugin `{id}` in plugins.disable (known: {})", .known.join(", "))]
    #[code("UNKNOWN_PLUGIN")]
    UnknownPlugin {
        /// The id as written.
        id: String,
        /// The ids of the set, sorted.
        known: Vec<String>,
    },
    /// A settings section could not be deserialized into the plugin's type.
    /// Code `INVALID_SETTINGS`.
    #[error("invalid settings for `{section}`: {message}")]
    #[code("INVALID_SETTINGS")]
    InvalidSettings {
        /// The section key (usually a plugin id).
        section: String,
        /// serde's message, naming the field.
        message: String,
    },
}

impl KernelError {
    /// The stable, machine-readable code of this error (`SCREAMING_SNAKE_CASE`), the same as
    /// [`crate::ErrorCode::code`]. Kept while crates outside the kernel still call `code()`
    /// without the trait in scope; prefer the trait.
    pub fn code(&self) -> &'static str {
        crate::ErrorCode::code(self)
    }
}

fn name_suffix(name: &Option<String>) -> String {
    match name {
        Some(n) => format!(" named `{n}`"),
        None => String::new(),
    }
}

fn describe_failures(failures: &[(String, BoxError)]) -> String {
    let mut out = String::new();
    for (i, (id, err)) in failures.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        fmt::Write::write_fmt(&mut out, format_args!("{id}: {err}")).ok();
    }
    out
}

fn join_errors(errors: &[BoxError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result alias for kernel operations.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;
