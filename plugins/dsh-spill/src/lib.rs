//! Spill (behaviour notes: `docs/tools.md`, "Spill"): the local spill store
//! ([`LocalSpillStore`], provided as `ctx.spillStore`) and the `tools/post-execute` policy
//! that replaces an oversized plain-text tool result with a head/tail preview plus the path of
//! a private file holding the full text (see [`policy`] for the exact text).
//!
//! Files live in the session's spill folder ([`LocalSpillStore::folder_for`]): `spill/` in the
//! session's own folder beside its stored log (so they survive a resume and are removed with the
//! session by `dsh sessions delete`), or `<root>/session-<12 hex of sha256(session id)>/` with a
//! configured `root` or for an unstored (ephemeral) session under a temporary root that is
//! removed again; each file is `<12 random hex>-<safe name>`. Directories are created 0700 and each file exclusively (`O_CREAT|O_EXCL`) with mode 0600, so a
//! planted symlink cannot redirect a write. The model reads a spill file back with the `read`
//! tool: the store grants the filesystem service read access to each session directory through
//! [`dsh_fs::FsService::grant_read_root`] — the seam lives in the core crate `dsh-fs`, so this
//! plugin does not depend on `dsh-tool-fs`. A save failure keeps the original result.
//!
//! With the policy enabled the plugin also provides [`dsh_tools::OutputFolders`]: a tool that
//! bounds its own output (the bash tool) writes the whole of it into the session's spill folder
//! itself and declares the file in its value ([`dsh_tools::OUTPUT_FILE_FIELD`]); the policy leaves
//! such a result as it is, so the output is cut once, with one notice and one copy on disk.
//!
//! Settings section `dsh-spill` (snake_case keys, optional, unknown keys rejected): `enabled`
//! (default true), `max_inline_bytes` (default 51200 = 50 KiB, upstream's read cap), `root`
//! (default: the session's own folder, else a private `dsh-spill-<uuid>` directory under the OS
//! temp dir, removed when the run ends).

pub mod policy;
mod store;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::ListenOptions;
use serde::Deserialize;

pub use store::{
    LocalSpillStore, RETRIEVAL_HINT, SPILL_DIR_NAME, SaveTextSpill, SpillError, SpillRef,
    SpillSource, encode_segment, session_dir,
};

/// The plugin id (= package name).
pub const PLUGIN_ID: &str = "dsh-spill";

/// Default `max_inline_bytes`: 50 KiB.
pub const DEFAULT_MAX_INLINE_BYTES: usize = 50 * 1024;

/// Settings of the plugin (section `dsh-spill`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SpillConfig {
    /// Register the policy at all.
    pub enabled: bool,
    /// Results larger than this many UTF-8 bytes are spilled; the replacement never exceeds it.
    pub max_inline_bytes: usize,
    /// Spill root directory (files go to `<root>/session-<hash>/`). Default: the session's own
    /// folder beside its stored log (`spill/`), or a temporary root for an unstored session.
    pub root: Option<PathBuf>,
}

impl Default for SpillConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_inline_bytes: DEFAULT_MAX_INLINE_BYTES,
            root: None,
        }
    }
}

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let cfg: SpillConfig = ctx.settings_section(PLUGIN_ID)?;
    let store = Arc::new(LocalSpillStore::new(ctx.clone(), cfg.root.clone()));
    ctx.provide(store.clone())?.detach();
    let started = store.clone();
    ctx.on_emit_with::<dsh_session::SessionCreated>(ListenOptions::global(), move |n| {
        started.session_started(n.session.header());
    })?
    .detach();
    let ended = store.clone();
    ctx.on_emit_with::<dsh_session::SessionDisposed>(ListenOptions::global(), move |n| {
        ended.session_ended(n.session.header());
    })?
    .detach();
    if cfg.enabled {
        let folders = store.clone();
        let service = dsh_tools::OutputFolders::new(move |header| {
            folders.prepare_folder(header).map_err(Into::into)
        });
        ctx.provide(Arc::new(service))?.detach();
        policy::install(ctx, store, cfg.max_inline_bytes)?.detach();
    }
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN],
    settings = SpillConfig,
    restricted = ["root"],
    start = apply,
}
