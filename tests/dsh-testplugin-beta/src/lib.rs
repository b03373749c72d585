//! A test plugin that registers a listener and a service, then fails to apply, so boot must
//! report it by id and dispose what it registered.

use std::sync::Arc;

/// The service beta provides before failing.
#[derive(Debug)]
pub struct BetaService;

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(Arc::new(BetaService))?.detach();
    Err("beta refuses to start: missing widget".into())
}

dsh_kernel::plugin! { apply = apply }
