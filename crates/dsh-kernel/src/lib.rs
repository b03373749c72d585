//! The dsh microkernel: scopes with effect-scoped disposal, a typed service registry, typed
//! events with four dispatch modes (emit, serial, parallel, waterfall) and scope-filtered
//! dispatch, and link-time plugin registration.
//!
//! It does no I/O and knows nothing of agents or LLMs; every other crate plugs into it.
//! Semantics follow upstream's vendored Cordis, described in docs/upstream/kernel.md, with the
//! differences listed in `docs/ARCHITECTURE.md`.
//!
//! ```
//! use std::sync::Arc;
//! use dsh_kernel::{event, Kernel};
//!
//! event! {
//!     /// A demo event.
//!     pub struct Ping: emit("demo/ping") => u32;
//! }
//!
//! let kernel = Kernel::new();
//! let ctx = kernel.root().child("demo").unwrap();
//! let seen = Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let s = seen.clone();
//! ctx.on_emit::<Ping>(move |n| { s.fetch_add(*n, std::sync::atomic::Ordering::SeqCst); })
//!     .unwrap()
//!     .detach();
//! kernel.root().emit::<Ping>(&7);
//! assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 7);
//! ```

mod code;
mod error;
mod event;
mod fasthash;
mod key;
mod plugin;
mod scope;
mod service;
mod settings;

pub use code::ErrorCode;
pub use error::{BoxError, KernelError, Result};
pub use event::{
    Dispatch, EmitEvent, ListenOptions, Next, ParallelEvent, SerialEvent, WaterfallEvent,
};
pub use key::ScopeKey;
pub use plugin::{
    __private, BootReport, Kernel, Linked, Plugin, PluginHook, linked_plugins, plugin_order,
    preset_ids, without,
};
pub use scope::{Context, Disposer, Registration};
pub use service::{ServiceChange, ServiceProvided, ServiceRemoved};
pub use settings::{Settings, SettingsCheckError, SettingsSpec, at_least_one};
pub use tokio_util::sync::CancellationToken;

#[cfg(test)]
mod tests;
