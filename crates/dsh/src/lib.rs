//! The dsh command line as a library: `exec`, the line-mode interactive shell, session
//! management, `config` and `plugins`, over whatever plugin set a binary passes in.
//!
//! A custom harness binary is a `main.rs` that names its plugins once and hands them to
//! [`main_with`]:
//!
//! ```no_run
//! dsh_kernel::preset! {
//!     /// The plugins of this harness.
//!     static MINE = [dsh_kernel_demo::PLUGIN]
//! }
//! # mod dsh_kernel_demo { dsh_kernel::plugin! { id = "demo" } }
//! fn main() -> std::process::ExitCode {
//!     dsh::main_with(&dsh::Harness { plugins: MINE, defaults: "" })
//! }
//! ```
//!
//! This crate names no provider, tool or backend: everything it knows of them comes through the
//! seams (`dsh-llm`, `dsh-agent`, `dsh-persistence`, …) and the plugins' declared settings. The
//! default binary's set is [`presets::DEFAULT`].

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the CLI's job is to print"
)]

mod app;
mod approval_prompt;
mod cli;
mod commands;
mod compact;
mod exec;
mod exit;
mod hooks_cmd;
mod interactive;
mod mcp_cmd;
pub mod presets;
mod render;
mod resume;
mod sandbox_cmd;
mod sessions;
pub mod settings;
mod signals;
mod spinner;
mod toolview;
mod usage;
mod workspace;

pub use cli::main_with;

/// A harness: the plugin set a binary boots and its built-in settings.
#[derive(Debug, Clone, Copy)]
pub struct Harness {
    /// The plugins to boot (before `plugins.disable`).
    pub plugins: &'static [&'static dsh_kernel::Plugin],
    /// Built-in defaults as TOML, the lowest settings layer (e.g. `provider = "deepseek"`).
    pub defaults: &'static str,
}

impl Harness {
    /// This harness plus `extra` plugins (e.g. the default binary plus one plugin crate of your
    /// own: `dsh::presets::DEFAULT_HARNESS.extended(&[&my_plugin::PLUGIN])`; a plugin already in
    /// the set is not added twice). The combined list
    /// lives for the rest of the process (it is leaked once; call this once, in `main`).
    pub fn extended(&self, extra: &[&'static dsh_kernel::Plugin]) -> Harness {
        let mut plugins = self.plugins.to_vec();
        for p in extra {
            if !plugins.iter().any(|q| std::ptr::eq(*q, *p)) {
                plugins.push(p);
            }
        }
        Harness {
            plugins: Box::leak(plugins.into_boxed_slice()),
            defaults: self.defaults,
        }
    }
}
