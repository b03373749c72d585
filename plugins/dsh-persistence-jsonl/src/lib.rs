//! `dsh-persistence-jsonl`: the default session store of dsh, registered with the persistence
//! seam as backend `jsonl`. One log per session at
//! `<dir>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl` (or `session.jsonl.zstd`,
//! concatenated checksummed zstd frames): a header line, then one storage record per line.
//!
//! Behaviour: `docs/persistence.md` ("JSONL backend").
//!
//! The plugin (id `dsh-persistence-jsonl`, applied after `dsh-persistence`) registers a
//! [`dsh_persistence::BackendFactory`] in `Arc<PersistenceBackends>`; its own settings section
//! `dsh-persistence-jsonl` is [`JsonlSettings`] (`{"pack_chunks": true, "compression": "none"}`).
//! The factory also reads standalone `.jsonl` / `.jsonl.zstd` files for `sessions verify` and
//! `sessions import`.

mod backend;
mod fsio;
mod path;
mod raw;

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context};
use dsh_persistence::{
    BackendConfig, BackendFactory, Persistence, PersistenceBackends, RawLog, Result,
    SharedPersistence,
};

pub use backend::{Compression, JsonlBackend, JsonlConfig, zstd_frame};
pub use path::{
    LOCK_FILE_NAME, LOG_FILE_NAME, ZSTD_LOG_FILE_NAME, encode_segment, log_path, project_dir,
    project_key, session_dir,
};

/// The name this backend registers under (the `backend` setting value that selects it).
pub const BACKEND_NAME: &str = "jsonl";

/// The JSONL seam.
pub type JsonlPersistence = Persistence<JsonlBackend>;

/// A JSONL seam over `config` (loads accept the default event-type catalog).
pub fn jsonl_persistence(config: JsonlConfig) -> Arc<JsonlPersistence> {
    Arc::new(Persistence::new(JsonlBackend::new(config)))
}

/// Settings section `dsh-persistence-jsonl`: the options only this backend has.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JsonlSettings {
    /// Pack runs of ≥3 chunk deltas into packed rows (default `true`).
    pub pack_chunks: Option<bool>,
    /// `"none"` (default: plain `session.jsonl`) or `"zstd"` (`session.jsonl.zstd`).
    pub compression: Option<Compression>,
}

/// The [`BackendFactory`] of this backend.
#[derive(Debug, Clone, Default)]
pub struct JsonlFactory {
    /// This backend's settings.
    pub settings: JsonlSettings,
}

impl BackendFactory for JsonlFactory {
    fn open(&self, config: &BackendConfig) -> Result<SharedPersistence> {
        let backend = JsonlBackend::new(JsonlConfig {
            root: config.dir.clone(),
            pack_chunks: self.settings.pack_chunks.unwrap_or(true),
            compression: self.settings.compression.unwrap_or_default(),
        });
        Ok(Arc::new(Persistence::with_registry(
            backend,
            config.registry.clone(),
        )))
    }

    fn read_file(&self, path: &Path) -> Option<Vec<RawLog>> {
        raw::recognizes(path).then(|| vec![raw::read_log(path)])
    }
}

fn apply(ctx: &Context) -> std::result::Result<(), BoxError> {
    let settings: JsonlSettings = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let backends = ctx
        .get::<PersistenceBackends>()
        .ok_or("dsh-persistence-jsonl needs the dsh-persistence plugin")?;
    backends.register(BACKEND_NAME, Arc::new(JsonlFactory { settings }))?;
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_persistence::PLUGIN],
    settings = JsonlSettings,
    start = apply,
}
