//! A test plugin for the kernel's link-time discovery tests. It records its boot, provides
//! [`BetaService`], then fails to apply, so boot must report it by id and dispose what it
//! registered.

use std::sync::{Arc, Mutex};

/// The service beta provides before failing (it must vanish with beta's scope).
#[derive(Debug)]
pub struct BetaService;

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    if let Some(log) = ctx.get_named::<Mutex<Vec<String>>>("boot-log") {
        log.lock()
            .map_err(|_| "boot-log poisoned")?
            .push(env!("CARGO_PKG_NAME").to_owned());
    }
    ctx.provide(Arc::new(BetaService))?.detach();
    Err("beta refuses to start: missing widget".into())
}

dsh_kernel::plugin! { start = apply }
