//! The plugin's boot hooks: provide the service on the root layer (phase 1), declare the
//! log-only event types (phase 2).

use std::sync::Arc;

use dsh_kernel::{BoxError, Context};

use crate::{ApprovalConfig, ApprovalService, PLUGIN_ID, session_io};

pub(crate) fn register(ctx: &Context) -> Result<(), BoxError> {
    let config: ApprovalConfig = ctx.settings_section(PLUGIN_ID)?;
    ctx.provide(Arc::new(ApprovalService::new(ctx.clone(), config)))?
        .detach();
    Ok(())
}

pub(crate) fn start(ctx: &Context) -> Result<(), BoxError> {
    session_io::declare_types(ctx)
}
