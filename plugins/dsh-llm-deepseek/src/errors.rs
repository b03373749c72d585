//! This crate's error enum. The HTTP failure mapping lives in `dsh-llm-http` (re-exported from
//! the crate root).
//!
//! See docs/upstream/llm.md (Usage and failures; adapter contract item 6) and
//! docs/upstream/deepseek.md (HTTP errors; wire fixtures 16 and 17).

/// Errors of this crate outside a call (configuration, client construction), each with a stable
/// code ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum DeepSeekError {
    /// The settings section is invalid (duplicate route ids, empty base URL, …).
    /// Code `INVALID_SETTINGS`.
    #[error("invalid dsh-llm-deepseek settings: {0}")]
    #[code("INVALID_SETTINGS")]
    InvalidSettings(String),
    /// A route's `base_url` is not an absolute `http://` / `https://` URL with a host (from
    /// `[providers.<id>] base_url` or, for `deepseek`, `DEEPSEEK_BASE_URL`). A configuration
    /// error (exit 2 in `dsh`). Code `INVALID_BASE_URL`.
    #[error(
        "provider route {route:?} has an invalid base_url {url:?}: {reason} (set it with \
         [providers.{route}] base_url{env}; it is the part before /chat/completions, e.g. \
         https://api.deepseek.com or http://127.0.0.1:8080/v1)",
        env = if route == crate::DEEPSEEK_ROUTE { " or DEEPSEEK_BASE_URL" } else { "" }
    )]
    #[code("INVALID_BASE_URL")]
    InvalidBaseUrl {
        /// The route id.
        route: String,
        /// The URL as configured, its user info redacted ([`crate::redact_url`]).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built. Code `HTTP_CLIENT`.
    #[error("cannot build the HTTP client: {0}")]
    #[code("HTTP_CLIENT")]
    Client(String),
}
