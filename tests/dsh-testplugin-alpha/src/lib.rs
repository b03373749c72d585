//! A test plugin for the kernel's link-time discovery tests. It declares that it boots after
//! `dsh-testplugin-beta` (which alphabetical order alone would put after it), records its boot in the test's
//! `boot-log` service and provides [`AlphaMarker`].

use std::sync::{Arc, Mutex};

/// The service this plugin provides.
#[derive(Debug)]
pub struct AlphaMarker;

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    if let Some(log) = ctx.get_named::<Mutex<Vec<String>>>("boot-log") {
        log.lock()
            .map_err(|_| "boot-log poisoned")?
            .push(env!("CARGO_PKG_NAME").to_owned());
    }
    ctx.provide(Arc::new(AlphaMarker))?.detach();
    Ok(())
}

dsh_kernel::plugin! { after = [dsh_testplugin_beta::PLUGIN], start = apply }
