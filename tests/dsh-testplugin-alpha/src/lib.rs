//! A test plugin that provides a marker service and must boot after `dsh-testplugin-beta`
//! declared no order, so the kernel's id tie-break decides; it also declares `before` on a
//! plugin that is not linked, which must be ignored.

use std::sync::Arc;

/// The marker service this plugin provides: the ids of plugins applied before it.
#[derive(Debug)]
pub struct AlphaMarker(pub Vec<String>);

/// Records which plugin scopes exist when alpha applies, then provides [`AlphaMarker`].
fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let seen_beta = ctx.get::<BetaSeen>().is_some();
    ctx.provide(Arc::new(AlphaMarker(if seen_beta {
        vec!["beta-first".to_owned()]
    } else {
        vec![]
    })))?
    .detach();
    Ok(())
}

/// A service the beta plugin provides before failing (it must vanish with beta's scope).
#[derive(Debug)]
pub struct BetaSeen;

dsh_kernel::plugin! { after = ["dsh-testplugin-beta"], before = ["not-linked-anywhere"], apply = apply }
