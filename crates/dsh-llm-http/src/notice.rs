//! Provider notices: something about a running call the user should see (today: the provider
//! sent invalid UTF-8, shown as U+FFFD), and the kernel event that carries them to the front
//! end. See docs/upstream/deepseek.md (Invalid UTF-8).

use std::sync::Arc;

/// Something the user should see about a call that still goes on. Delivered through a
/// [`NoticeFn`] an adapter is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderNotice {
    /// The call's session (`GenerateOptions::session_id`), when known.
    pub session_id: Option<String>,
    /// The route id.
    pub route: String,
    /// One line of text, e.g. `deepseek: the provider sent invalid UTF-8 (shown as U+FFFD)`.
    pub message: String,
}

/// A receiver of [`ProviderNotice`]s.
pub type NoticeFn = Arc<dyn Fn(ProviderNotice) + Send + Sync>;

dsh_kernel::event! {
    /// `llm/provider-notice` (emit): something about a running call the user should see (the
    /// provider sent invalid UTF-8). Not logged; `dsh` prints it on stderr.
    pub struct LlmProviderNotice: emit("llm/provider-notice") => ProviderNotice;
}

/// Logs the one warning per response that carried invalid UTF-8 (target `dsh_llm_http`) and
/// sends the notice "<route>: the provider sent invalid UTF-8; each bad sequence is shown as
/// U+FFFD" to `notices`, when set.
pub fn warn_invalid_utf8(
    notices: Option<&NoticeFn>,
    session_id: Option<&str>,
    route: &str,
    url: &str,
) {
    tracing::warn!(
        target: "dsh_llm_http",
        route,
        url,
        "the provider sent invalid UTF-8; it was replaced by U+FFFD"
    );
    if let Some(f) = notices {
        f(ProviderNotice {
            session_id: session_id.map(str::to_owned),
            route: route.to_owned(),
            message: format!(
                "{route}: the provider sent invalid UTF-8; each bad sequence is shown as U+FFFD"
            ),
        });
    }
}
