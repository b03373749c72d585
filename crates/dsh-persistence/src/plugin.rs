//! Wiring the seam into a kernel: [`install`] for a host-given backend, and the plugin's start
//! hook, which resolves the settings against the run facts and provides the backend registry
//! and the service.

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context};

use crate::{
    NO_BACKEND, PersistenceBackends, PersistenceService, PersistenceSettings, SharedPersistence,
    service,
};

/// Installs a host-given `backend` in `ctx` (no registry, no settings): provides
/// `Arc<PersistenceService>` and the resume loader and registers the write-path listeners and
/// checkpoint barriers (see [`PersistenceService`]). For tests and embedders; the binary uses the
/// plugin.
///
/// # Errors
/// Kernel registration failures.
pub fn install(
    ctx: &Context,
    backend: SharedPersistence,
    write_batch_max_delay: Duration,
) -> std::result::Result<Arc<PersistenceService>, BoxError> {
    let service = Arc::new(PersistenceService::with_backend(
        backend,
        write_batch_max_delay,
    ));
    service::wire(ctx, service.clone())?;
    Ok(service)
}

/// Provides the backend registry and the (not yet resolved) service, which the backend plugins
/// (started after this one) register their factories with; the host resolves it once boot is
/// done (`PersistenceService::resolve`), else the first use does. The run facts
/// fill in what the user left out: `ephemeral` turns persistence off, `dir` defaults to
/// `<dsh_home>/sessions`, and a relative `dir` (or one starting with `~/`) is made absolute
/// against `launch_dir` (or `$HOME`).
pub(crate) fn start(ctx: &Context) -> std::result::Result<(), BoxError> {
    let mut settings: PersistenceSettings = ctx.settings_section(env!("CARGO_PKG_NAME"))?;
    let facts = ctx.settings();
    if facts.fact_flag("ephemeral") {
        settings.backend = Some(NO_BACKEND.to_owned());
    }
    settings.dir = match settings.dir.take() {
        Some(dir) => Some(absolute_dir(dir, facts.fact_str("launch_dir"))),
        None => facts
            .fact_str("dsh_home")
            .map(|h| std::path::Path::new(h).join("sessions")),
    };
    let backends = Arc::new(PersistenceBackends::new());
    ctx.provide(backends.clone())?.detach();
    let registry = ctx
        .get::<dsh_session::EventTypeRegistry>()
        .unwrap_or_else(dsh_session::EventTypeRegistry::shared_default);
    let service = Arc::new(PersistenceService::from_settings(
        settings, backends, registry,
    ));
    service::wire(ctx, service)?;
    Ok(())
}

fn absolute_dir(dir: std::path::PathBuf, launch_dir: Option<&str>) -> std::path::PathBuf {
    if let Ok(rest) = dir.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return std::path::Path::new(&home).join(rest);
    }
    match launch_dir {
        Some(base) if dir.is_relative() => std::path::Path::new(base).join(dir),
        _ => dir,
    }
}
