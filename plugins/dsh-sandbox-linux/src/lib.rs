//! The Linux sandbox runners of dsh, registered with the `dsh-sandbox` seam in upstream's
//! order: [`BwrapRunner`] (bubblewrap, when `bwrap` is installed and its probe passes), then
//! [`LandlockRunner`] (the `dsh-landlock-run` helper of [`helper`]: a separate process that
//! restricts itself with Landlock and then execs the command; dsh itself is never confined).
//! Under both, the writable roots are exactly the workspace, the host's `/tmp` and `$TMPDIR`,
//! and the network is off unless `[sandbox] network = true` (bwrap `--unshare-net`; the helper
//! enters a new user and network namespace).
//!
//! Behaviour, profiles and probes: `docs/upstream/sandbox.md`.

pub mod helper;
mod runners;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_sandbox::SandboxService;
use serde::Deserialize;

pub use runners::{BwrapRunner, LandlockRunner, default_helper_path, probe_with_timeout};

/// This plugin's id (its settings section).
pub const PLUGIN_ID: &str = "dsh-sandbox-linux";

/// The file name of the Landlock helper binary (built by the `dsh` package next to `dsh`).
pub const HELPER_NAME: &str = "dsh-landlock-run";

/// The `dsh-sandbox-linux` settings section (`[plugins.dsh-sandbox-linux]`; unknown keys
/// rejected).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LinuxSandboxConfig {
    /// The bubblewrap executable (a name is looked up on `PATH`). Default `bwrap`.
    pub bwrap: PathBuf,
    /// The Landlock helper. Default: `dsh-landlock-run` next to the running executable (or one
    /// directory up, for test executables under `deps/`).
    pub landlock_helper: Option<PathBuf>,
    /// Timeout of each runner's probe (ms, at least 1). Default 5000.
    #[serde(deserialize_with = "dsh_kernel::at_least_one")]
    #[schemars(range(min = 1))]
    pub probe_timeout_ms: u64,
}

impl Default for LinuxSandboxConfig {
    fn default() -> Self {
        Self {
            bwrap: PathBuf::from("bwrap"),
            landlock_helper: None,
            probe_timeout_ms: 5_000,
        }
    }
}

fn start(ctx: &Context) -> Result<(), BoxError> {
    let config: LinuxSandboxConfig = ctx.settings_section(PLUGIN_ID)?;
    let service = ctx.require::<SandboxService>()?;
    install(&service, &config);
    Ok(())
}

/// Registers the runners of `config` with `service`: bubblewrap, then Landlock.
pub fn install(service: &SandboxService, config: &LinuxSandboxConfig) {
    let network = service.network();
    service.add_runner(Arc::new(BwrapRunner {
        program: config.bwrap.clone(),
        network,
        probe_timeout_ms: config.probe_timeout_ms,
    }));
    service.add_runner(Arc::new(LandlockRunner {
        helper: config
            .landlock_helper
            .clone()
            .unwrap_or_else(default_helper_path),
        network,
        probe_timeout_ms: config.probe_timeout_ms,
    }));
}

dsh_kernel::plugin! {
    after = [dsh_sandbox::PLUGIN],
    settings = LinuxSandboxConfig,
    restricted = ["bwrap", "landlock_helper"],
    start = start,
}
